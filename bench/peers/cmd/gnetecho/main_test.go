package main

import (
	"testing"

	"github.com/edgepoll/edgepoll/bench/peers/internal/echotest"
)

func TestEcho(t *testing.T) {
	echotest.TestEcho(t, serve, []echotest.Case{
		{Name: "default", Labels: "impl=gnet/loops=1/et=false/reuseport=false/lockosthread=true/"},
		{Name: "et", Args: []string{"-et"}, Labels: "impl=gnet/loops=1/et=true/"},
		{Name: "loops=2", Args: []string{"-loops", "2", "-lockosthread=false"}, Labels: "impl=gnet/loops=2/et=false/reuseport=false/lockosthread=false/"},
		{Name: "reuseport", Args: []string{"-loops", "2", "-reuseport"}, Labels: "impl=gnet/loops=2/et=false/reuseport=true/"},
	})
}

func TestLifetime(t *testing.T) { echotest.TestLifetime(t, run) }

func TestBadFlags(t *testing.T) {
	echotest.TestBadFlags(t, run, map[string]string{
		"-loops -1":    "-loops -1",
		"-addr nohost": "nohost",
		"extra":        "unexpected",
	})
}
