// Command nbioecho is an echo server on github.com/lesismal/nbio with the
// flags and first output line of cmd/echoserver, so that the same scripts
// and cmd/loadgen drive it. bench/peers/README.md says why each default is
// what it is.
//
//	taskset -c 0 nbioecho -addr 127.0.0.1:7000 -lifetime 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"

	"github.com/edgepoll/edgepoll/bench/peers/internal/peercmd"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		peercmd.Exit("nbioecho", err)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := peercmd.SignalContext()
	defer stop()
	return serve(ctx, args, stdout, stderr)
}

// epollModes are the values of -epoll.
var epollModes = map[string]uint32{"lt": nbio.EPOLLLT, "et": nbio.EPOLLET}

// serve runs the engine until its lifetime passes or ctx ends, then stops
// it (which closes every connection) and returns.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nbioecho", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f peercmd.Flags
	f.Register(fs)
	loops := fs.Int("loops", 1, "poller goroutines, each with its epoll (Config.NPoller)")
	mode := fs.String("epoll", "lt", "epoll registration: lt or et (Config.EpollMod)")
	readBuf := fs.Int("readbuf", nbio.DefaultReadBufferSize, "bytes a poller reads at a time (Config.ReadBufferSize)")
	lockPoller := fs.Bool("lockpoller", false, "lock every poller goroutine to its OS thread (Config.LockPoller)")
	if err := peercmd.Parse(fs, args); err != nil {
		return err
	}
	if *loops < 1 {
		return fmt.Errorf("bad -loops %d: want at least 1", *loops)
	}
	epollMod, ok := epollModes[*mode]
	if !ok {
		return fmt.Errorf("bad -epoll %q: want lt or et", *mode)
	}
	if *readBuf < 1 {
		return fmt.Errorf("bad -readbuf %d: want at least 1", *readBuf)
	}

	// nbio logs to stdout by default, whose first line is the announce line.
	logging.Output = stderr
	engine := nbio.NewEngine(nbio.Config{
		Name:           "nbioecho",
		Network:        "tcp",
		Addrs:          []string{f.Addr},
		NPoller:        *loops,
		ReadBufferSize: *readBuf,
		EpollMod:       epollMod,
		LockPoller:     *lockPoller,
	})
	// OnData runs on the poller goroutine with the poller's read buffer.
	// Write sends what the socket takes at once and copies the rest into
	// the connection's write list, flushed by the poller on EPOLLOUT; so
	// data may be passed as it is.
	engine.OnData(func(c *nbio.Conn, data []byte) {
		c.Write(data) // on a write error nbio has closed c already
	})
	if err := engine.Start(); err != nil {
		return fmt.Errorf("nbio: %w", err)
	}
	// Start has bound the listener and put its address, port 0 resolved,
	// back into Addrs.
	peercmd.Announce(stdout, engine.Addrs[0],
		"impl=nbio",
		peercmd.Label("loops", *loops),
		peercmd.Label("epoll", *mode),
		peercmd.Label("readbuf", *readBuf),
		peercmd.Label("lockpoller", *lockPoller))

	// nbio has no way to report that it stopped by itself.
	if err := f.Wait(ctx, nil); err != nil {
		return err
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := engine.Shutdown(stopCtx); err != nil {
		return fmt.Errorf("nbio stop: %w", err)
	}
	return nil
}
