// Command echoserver is a goroutine-per-connection echo server on package
// net or on a netpoll group, for load tests from another process
// (cmd/loadgen). It prints the address it listens on and, with -lifetime,
// exits by itself. With -ondemand it serves with a netpoll.Server instead:
// a handler call per readable connection, which echoes one Read.
//
// While it serves, SIGUSR1 makes it collect garbage (runtime.GC, then
// debug.FreeOSMemory) and write one line to stderr with the heap and
// goroutines as runtime/metrics sees them then:
//
//	echoserver: memstats heap-live=<bytes> heap-objects=<n> goroutines=<n> stacks=<bytes>
//
// netpollbench's idle experiment reads it back.
//
//	echoserver -impl netpoll -mode oneshot -addr 127.0.0.1:7000 -lifetime 30s
//	echoserver -ondemand -buf 4096
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"syscall"

	"github.com/edgepoll/edgepoll/internal/servecmd"
	"github.com/edgepoll/edgepoll/netpoll"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "echoserver:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// SIGUSR1 writes a memstats line while the server runs; the line and
	// the server's own messages (-stats, the Server's error log) share
	// stderr, one Write at a time.
	stderr = &lockedWriter{w: stderr}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	quit, reported := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reported)
		reportMemstats(usr1, quit, stderr)
	}()
	defer func() { close(quit); <-reported }()
	return serve(ctx, args, stdout, stderr)
}

// reportMemstats writes memstatsLine to w, after a collection and a return
// of freed memory to the OS, for each value from sigs until quit closes.
func reportMemstats(sigs <-chan os.Signal, quit <-chan struct{}, w io.Writer) {
	for {
		select {
		case <-sigs:
			runtime.GC()
			debug.FreeOSMemory()
			fmt.Fprintln(w, memstatsLine())
		case <-quit:
			return
		}
	}
}

// memstatsNames are the runtime/metrics a memstats line reports, by its
// keys.
var memstatsNames = []struct{ key, metric string }{
	{"heap-live", "/gc/heap/live:bytes"},
	{"heap-objects", "/gc/heap/objects:objects"},
	{"goroutines", "/sched/goroutines:goroutines"},
	{"stacks", "/memory/classes/heap/stacks:bytes"},
}

// memstatsLine reads memstatsNames and returns them as one line,
// "echoserver: memstats heap-live=... heap-objects=... goroutines=...
// stacks=...", no newline. A metric this runtime lacks is "?".
func memstatsLine() string {
	samples := make([]metrics.Sample, len(memstatsNames))
	for i, m := range memstatsNames {
		samples[i].Name = m.metric
	}
	metrics.Read(samples)
	b := []byte("echoserver: memstats")
	for i, s := range samples {
		b = fmt.Appendf(b, " %s=", memstatsNames[i].key)
		if s.Value.Kind() == metrics.KindUint64 {
			b = fmt.Appendf(b, "%d", s.Value.Uint64())
		} else {
			b = append(b, '?')
		}
	}
	return string(b)
}

// lockedWriter is w, one Write at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serve runs the server until its lifetime passes or ctx ends, then closes
// every connection and returns.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("echoserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f servecmd.Flags
	f.Register(fs, "127.0.0.1:0")
	bufSize := fs.Int("buf", 64<<10, "read buffer per connection")
	waitRead := fs.Bool("waitread", false, "wait for readability with Conn.WaitRead, holding no buffer, and take one from a pool only to read and echo (needs -impl netpoll)")
	onDemand := fs.Bool("ondemand", false, "serve with netpoll.Server: a handler call per readable connection takes a buffer from a pool, echoes one Read and returns, so an idle connection holds no buffer, and no goroutine with -impl netpoll (-impl net: the Server's fallback, a goroutine per connection)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *bufSize < 1 {
		return fmt.Errorf("bad -buf %d: want at least 1", *bufSize)
	}
	if *onDemand && *waitRead {
		return errors.New("-ondemand and -waitread are two ways to wait without a buffer: choose one")
	}
	if *waitRead && f.Impl != "netpoll" {
		// Package net's Read of an empty slice returns at once: a wait
		// built on it would spin.
		return fmt.Errorf("-waitread needs -impl netpoll (package net has no buffer-free wait), not -impl %s", f.Impl)
	}
	s, err := f.Listen(stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	s.Announce(stdout, "echoserver")

	pool := sync.Pool{New: func() any { b := make([]byte, *bufSize); return &b }}
	if *onDemand {
		return s.ServeOnDemand(ctx, echoOnDemand(&pool))
	}
	if *waitRead {
		return s.Serve(ctx, func(_ context.Context, c net.Conn) { echoWaiting(c.(readWaiter), &pool) })
	}
	return s.Serve(ctx, func(_ context.Context, c net.Conn) { echo(c, *bufSize) })
}

// readWaiter is netpoll's Conn: a net.Conn with a buffer-free wait.
type readWaiter interface {
	net.Conn
	WaitRead() error
}

// echoWaiting is echo holding a buffer only while it reads and writes: it
// waits for readability with none, and takes one from pool to echo.
func echoWaiting(c readWaiter, pool *sync.Pool) {
	for {
		if err := c.WaitRead(); err != nil {
			return
		}
		bp := pool.Get().(*[]byte)
		n, err := c.Read(*bp)
		if n > 0 {
			_, err = c.Write((*bp)[:n])
		}
		pool.Put(bp)
		if err != nil {
			return
		}
	}
}

// echoOnDemand is echo as a netpoll.Server's handler: called when a
// connection is readable, it takes a buffer from pool, writes back what
// one Read returns and gives the buffer back. nil waits for more; a Read
// or Write error (EOF too) closes the connection. What one Read leaves
// queued calls it again.
func echoOnDemand(pool *sync.Pool) netpoll.HandlerFunc {
	return func(c net.Conn) error {
		bp := pool.Get().(*[]byte)
		n, err := c.Read(*bp)
		if n > 0 {
			if _, werr := c.Write((*bp)[:n]); werr != nil {
				err = werr
			}
		}
		pool.Put(bp)
		return err
	}
}

// echo writes back what it reads until the peer closes or an error.
func echo(c net.Conn, bufSize int) {
	buf := make([]byte, bufSize)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
