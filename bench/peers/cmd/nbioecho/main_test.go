package main

import (
	"testing"

	"github.com/edgepoll/edgepoll/bench/peers/internal/echotest"
)

func TestEcho(t *testing.T) {
	echotest.TestEcho(t, serve, []echotest.Case{
		{Name: "default", Labels: "impl=nbio/loops=1/epoll=lt/readbuf=65536/lockpoller=false"},
		{Name: "et", Args: []string{"-epoll", "et"}, Labels: "impl=nbio/loops=1/epoll=et/"},
		{Name: "loops=2", Args: []string{"-loops", "2", "-lockpoller"}, Labels: "impl=nbio/loops=2/epoll=lt/readbuf=65536/lockpoller=true"},
		{Name: "readbuf=1000", Args: []string{"-readbuf", "1000"}, Labels: "impl=nbio/loops=1/epoll=lt/readbuf=1000/"},
	})
}

func TestLifetime(t *testing.T) { echotest.TestLifetime(t, run) }

func TestBadFlags(t *testing.T) {
	echotest.TestBadFlags(t, run, map[string]string{
		"-loops 0":     "-loops 0",
		"-epoll edgy":  `"edgy"`,
		"-readbuf 0":   "-readbuf 0",
		"-addr nohost": "nohost",
		"extra":        "unexpected",
	})
}
