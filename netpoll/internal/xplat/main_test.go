package main

import (
	"bytes"
	"testing"
)

func TestRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run([]string{"-n", "3"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v; stderr: %s", err, stderr.Bytes())
	}
	if got, want := stdout.String(), "message 0\nmessage 1\nmessage 2\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
}
