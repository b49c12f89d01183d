// Command loadgen drives a goroutine-per-connection echo or HTTP/1.1 server
// with a fixed number of connections, in a closed loop (each connection keeps
// -pipeline requests in flight) or an open loop (a fixed total -rate, latency
// counted from each request's scheduled send time), and reports throughput,
// latency percentiles, and client and server CPU per request as text, Go
// benchmark lines for benchstat, or JSON.
//
// Every echo is checked byte for byte and every HTTP response is parsed;
// failures are counted by kind, and any failure makes loadgen exit non-zero
// after it has printed its results. A connection stops at its first failure.
//
// With -blocked n, the first n connections mark their requests for the
// server to hold (internal/loadproto's Delay; cmd/echoserver -delay), as a
// handler blocked outside its poller would, and the figures are the other
// connections': what a blocking handler costs its neighbours. With -idle,
// loadgen holds -conns connections open and quiet instead and reports the
// memory per connection of the server -server-pid (idle.go).
//
// Usage:
//
//	loadgen -addr 127.0.0.1:8080 [-proto echo|http] [-conns 50] [-rate 0] ...
//
// Run loadgen -h for the flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}
