// Package peercmd is what the peer echo servers in cmd/ share: the flags and
// output line of cmd/echoserver, so that one orchestrator drives them all,
// and the wait for the lifetime, a signal or the server's end.
package peercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Flags are the flags every peer server takes.
type Flags struct {
	Addr     string
	Lifetime time.Duration
}

// Register adds the common flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Addr, "addr", "127.0.0.1:0", "address to listen on")
	fs.DurationVar(&f.Lifetime, "lifetime", 0, "exit after this long (0: run until SIGINT or SIGTERM)")
}

// Parse parses args into fs and rejects arguments that are not flags.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// SignalContext returns a context that ends on SIGINT or SIGTERM, as a
// command's run does before it serves.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Announce prints the line scripts and tests wait for, as the first line
// of stdout: "echoserver listening on ADDR (k=v/k=v)".
func Announce(w io.Writer, addr string, labels ...string) {
	fmt.Fprintf(w, "echoserver listening on %s (%s)\n", addr, strings.Join(labels, "/"))
}

// Label formats one key=value label.
func Label(key string, value any) string {
	return fmt.Sprintf("%s=%v", key, value)
}

// Wait blocks until the lifetime passes, ctx ends or the server reports
// through served that it stopped; it returns the server's error in that
// last case and nil otherwise.
func (f *Flags) Wait(ctx context.Context, served <-chan error) error {
	var expire <-chan time.Time
	if f.Lifetime > 0 {
		t := time.NewTimer(f.Lifetime)
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-expire:
		return nil
	case <-ctx.Done():
		return nil
	case err := <-served:
		if err == nil {
			err = errors.New("server stopped by itself")
		}
		return err
	}
}

// Exit ends a command whose run returned err: status 0 for -h, otherwise
// the error on stderr and status 1.
func Exit(name string, err error) {
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(1)
}
