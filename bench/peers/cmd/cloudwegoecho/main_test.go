package main

import (
	"testing"

	"github.com/edgepoll/edgepoll/bench/peers/internal/echotest"
)

// The cases reconfigure netpoll's global pollers and runner one after the
// other, as a process would that called Configure before each server.
func TestEcho(t *testing.T) {
	echotest.TestEcho(t, serve, []echotest.Case{
		{Name: "default", Labels: "impl=cloudwego/loops=1/runner=go"},
		{Name: "gopool", Args: []string{"-runner", "gopool"}, Labels: "impl=cloudwego/loops=1/runner=gopool"},
		{Name: "loops=2", Args: []string{"-loops", "2"}, Labels: "impl=cloudwego/loops=2/runner=go"},
	})
}

func TestLifetime(t *testing.T) { echotest.TestLifetime(t, run) }

func TestBadFlags(t *testing.T) {
	echotest.TestBadFlags(t, run, map[string]string{
		"-loops 0":     "-loops 0",
		"-runner fast": `"fast"`,
		"-addr nohost": "nohost",
		"extra":        "unexpected",
	})
}
