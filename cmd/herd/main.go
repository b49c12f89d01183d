// Herd measures the thundering herd of epoll: many threads, each blocked in
// epoll_wait on an epoll instance of its own, all watching one wakeup source.
// Without EPOLLEXCLUSIVE every event wakes every thread, and all but one find
// nothing to do; with it the kernel wakes one (or a few).
//
// It is the pipe test from the Linux EPOLLEXCLUSIVE patch series (100 waiters,
// 20000 one-byte writes 100us apart: 2,047,108 context switches waking all,
// 40,308 waking exclusively), plus the case that motivated the flag: a shared
// listening socket, against one SO_REUSEPORT socket per waiter.
//
// Usage:
//
//	herd [-source pipe|accept] [-mode wakeall|exclusive|reuseport] [-waiters n]
//	     [-events n] [-interval d] [-count n] [-timeout d] [-format text|bench|json]
//
// Each waiter is a goroutine locked to its own thread, blocked in
// epoll_wait(-1) with the source and a stop eventfd registered
// level-triggered. Between the first event sent and the last one taken, herd
// measures the wall time, the CPU time and the context switches of the whole
// process (getrusage), how the events spread over the waiters, and the empty
// wakeups: epoll_wait returned the source but the read or accept found
// nothing. A waiter whose epoll finds the source drained by the time it looks
// goes back to sleep inside epoll_wait; that costs context switches but is
// not an empty wakeup. The process's figures include the emitter and the Go
// runtime, a few context switches per event whatever the mode.
//
// The bench format is read by benchstat as it is.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "herd:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run parses args, runs the experiment -count times and reports each run on stdout.
func run(args []string, stdout, stderr io.Writer) error {
	opts, err := parseFlags(args, stderr)
	if err != nil || opts == nil {
		return err // opts is nil after -h, with the usage printed
	}
	rep, err := newReport(stdout, opts.format, opts.config)
	if err != nil {
		return err
	}
	for range opts.count {
		res, err := runOnce(opts.config)
		if err != nil {
			return err
		}
		if err := rep.add(res); err != nil {
			return err
		}
	}
	return rep.flush()
}
