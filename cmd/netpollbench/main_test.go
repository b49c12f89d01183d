package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTiny runs netpollbench in a tiny configuration end to end: every
// configuration produces a result per cell and round, benchstat's table
// parses and has a column per configuration, the herd table has its rows,
// and the plots are written. The windows are long enough to get answers
// even with the machine loaded by parallel test binaries.
func TestTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every server and runs processes; skipped with -short")
	}
	// A relative -out, as users give it: binaries built from another
	// directory (bench/peers) must still land in it.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	out, err := filepath.Rel(wd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	configs := []string{"net", "et", "spin", "gnet", "nbio", "cloudwego", "c"}
	var stdout, stderr bytes.Buffer
	err = run([]string{"-out", out, "-configs", strings.Join(configs, ","), "-conns", "1,4", "-sizes", "64",
		"-rounds", "2", "-duration", "600ms", "-warmup", "200ms"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	rs, err := readResults(filepath.Join(out, "raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ran := configs
	if strings.Contains(stderr.String(), "no C compiler") {
		ran = configs[:len(configs)-1] // the C reference is skipped, and says so
	}
	for _, cfg := range ran {
		for _, conns := range []string{"1", "4"} {
			n := 0
			for _, r := range rs {
				if r.labels["cfg"] == cfg && r.labels["conns"] == conns {
					n++
					if r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 {
						t.Errorf("%s conns=%s: ns/op %v, errors %v", cfg, conns, r.metrics["ns/op"], r.metrics["errors"])
					}
				}
			}
			if n != 2 {
				t.Errorf("%s conns=%s: %d results, want one per round (2)", cfg, conns, n)
			}
		}
	}
	tables, err := os.ReadFile(filepath.Join(out, "tables.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"sec/op", "p50-sec", "server-cpu-sec/op", "syscalls/op", "\n1 64 ", "\n4 64 "}, ran...) {
		if !bytes.Contains(tables, []byte(want)) {
			t.Errorf("tables.txt lacks %q:\n%s", want, tables)
		}
	}
	herd, err := os.ReadFile(filepath.Join(out, "herd.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"pipe    wakeall", "pipe    exclusive", "accept  wakeall", "accept  exclusive", "accept  reuseport", "Seed"} {
		if !bytes.Contains(herd, []byte(row)) {
			t.Errorf("herd.txt lacks %q:\n%s", row, herd)
		}
	}
	for _, plot := range []string{"latency-conns1-size64.svg", "cpu-conns4-size64.svg", "throughput-size64.svg"} {
		if b, err := os.ReadFile(filepath.Join(out, plot)); err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("plot %s: %v", plot, err)
		}
	}
	if !strings.Contains(stdout.String(), "sec/op") {
		t.Errorf("stdout lacks the tables:\n%s", stdout.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"-configs net,bogus", `"bogus"`},
		{"-conns 0", "-conns"},
		{"-sizes 8", "-sizes"},
		{"-pin maybe", "-pin"},
		{"-rounds -1", "-rounds"},
	} {
		o, err := parseFlags(strings.Fields(tt.args), &bytes.Buffer{})
		if err == nil {
			_, err = pickServers(o.configs)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error mentioning %s", tt.args, err, tt.want)
		}
	}
}
