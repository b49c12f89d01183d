package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Sources of events.
const (
	sourcePipe   = "pipe"   // one byte written to a pipe per event
	sourceAccept = "accept" // one loopback TCP connection per event
)

// Ways the waiters share the source.
const (
	modeWakeAll   = "wakeall"   // EPOLLIN: every waiter is woken by every event
	modeExclusive = "exclusive" // EPOLLIN|EPOLLEXCLUSIVE: the kernel wakes one or more
	modeReusePort = "reuseport" // accept only: one SO_REUSEPORT listener per waiter
)

// Output formats.
const (
	formatText  = "text"
	formatBench = "bench"
	formatJSON  = "json"
)

// maxWaiters keeps the threads under the runtime's limit of 10000 (debug.SetMaxThreads),
// which kills the process when crossed.
const maxWaiters = 8000

// defaultEvents is the number of events when -events is not set: the patch's
// pipe test used 20000; a connection costs far more than a byte.
var defaultEvents = map[string]int{sourcePipe: 20000, sourceAccept: 2000}

// config is one run of the experiment.
type config struct {
	source   string
	mode     string
	waiters  int
	events   int
	interval time.Duration // between events, on an absolute schedule; 0 sends them back to back
	timeout  time.Duration // for the whole event stream
}

type options struct {
	config
	count  int
	format string
}

// usageError is an error in the command line; main exits with status 2 for it, as the flag package does.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parseFlags parses and checks the command line. It returns nil options and
// no error for -h, after printing the usage to stderr.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("herd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors go back to main; only -h prints the usage
	fs.StringVar(&o.source, "source", sourcePipe, "wakeup source: pipe or accept")
	fs.StringVar(&o.mode, "mode", modeWakeAll, "how waiters share the source: wakeall, exclusive or reuseport (accept only)")
	fs.IntVar(&o.waiters, "waiters", 100, "number of waiters, each a thread with its own epoll instance")
	fs.IntVar(&o.events, "events", 0, "number of events (default 20000 for pipe, 2000 for accept)")
	fs.DurationVar(&o.interval, "interval", 100*time.Microsecond, "time between events, kept on an absolute schedule; 0 sends them back to back")
	fs.IntVar(&o.count, "count", 1, "number of runs")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit on each run's event stream")
	fs.StringVar(&o.format, "format", formatText, "output: text, bench (benchstat input) or json (one object per run)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintf(stderr, "usage: herd [flags]\n\nherd measures epoll's thundering herd: -waiters threads in epoll_wait on one source.\n\n")
			fs.PrintDefaults()
			return nil, nil
		}
		return nil, usageError{err}
	}
	if err := o.check(fs.Args()); err != nil {
		return nil, usageError{err}
	}
	return &o, nil
}

// check validates the options and fills in the defaults that depend on others.
func (o *options) check(rest []string) error {
	if len(rest) > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(rest, " "))
	}
	if _, ok := defaultEvents[o.source]; !ok {
		return fmt.Errorf("unknown -source %q: want pipe or accept", o.source)
	}
	switch o.mode {
	case modeWakeAll, modeExclusive:
	case modeReusePort:
		if o.source != sourceAccept {
			return fmt.Errorf("-mode reuseport needs -source accept: only sockets can be split with SO_REUSEPORT")
		}
	default:
		return fmt.Errorf("unknown -mode %q: want wakeall, exclusive or reuseport", o.mode)
	}
	switch o.format {
	case formatText, formatBench, formatJSON:
	default:
		return fmt.Errorf("unknown -format %q: want text, bench or json", o.format)
	}
	if o.waiters < 1 {
		return fmt.Errorf("-waiters must be at least 1, got %d", o.waiters)
	}
	if o.waiters > maxWaiters {
		return fmt.Errorf("-waiters must be at most %d, got %d: each waiter is a thread", maxWaiters, o.waiters)
	}
	if o.events < 0 {
		return fmt.Errorf("-events must be positive, got %d", o.events)
	}
	if o.events == 0 {
		o.events = defaultEvents[o.source]
	}
	if o.interval < 0 {
		return fmt.Errorf("-interval must not be negative, got %v", o.interval)
	}
	if o.count < 1 {
		return fmt.Errorf("-count must be at least 1, got %d", o.count)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("-timeout must be positive, got %v", o.timeout)
	}
	return nil
}
