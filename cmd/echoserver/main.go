// Command echoserver is a goroutine-per-connection echo server on package
// net or on a netpoll group, for load tests from another process
// (cmd/loadgen). It prints the address it listens on and, with -lifetime,
// exits by itself. With -ondemand it serves with a netpoll.Server instead:
// a handler call per readable connection, which echoes one Read.
//
// With -idletimeout D, a connection that sends nothing for D is closed:
// before each wait for a request the server sets a read deadline of now+D,
// and a Read that fails with the timeout ends the connection; with
// -ondemand, the netpoll.Server's IdleTimeout closes it.
//
// The server echoes the bytes of each Read as they are, but for two
// requests of cmd/loadgen's message format (internal/loadproto), marked in
// the first word of a Read: a Delay request is echoed after sleeping
// -delay (a handler blocked outside the server's poller: netpollbench's
// blocked-neighbour cell), and a Memstats request makes the server
// collect garbage (runtime.GC, then debug.FreeOSMemory) and answer with
// its live heap, heap objects, goroutines and stack bytes as
// runtime/metrics sees them then (netpollbench's idle experiment).
//
// With -zeroread (-impl net), each connection's goroutine waits with a
// zero-byte Read, holding no buffer, and takes one from a pool only to
// read and echo. Only the patched toolchain (runtime_patch/build.sh) under
// GODEBUG=netpollzeroread=1 makes that Read wait; elsewhere it returns at
// once and the loop would spin, so the server checks first and refuses.
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
	"sync"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
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
	return serve(ctx, args, stdout, stderr)
}

// answer honours the loadproto mark b starts with, b being the bytes of
// one Read, and returns what to write back: b, after sleeping delay for a
// Delay request, or turned into the Stats answer, after a collection, for
// one whole Memstats request. Any other Read, a Plain message or bytes of
// another protocol, is echoed as it is: MarkOf reads four bytes, and
// nothing else happens on the echo's path.
func answer(b []byte, delay time.Duration) []byte {
	switch loadproto.MarkOf(b) {
	case loadproto.Delay:
		time.Sleep(delay)
	case loadproto.Memstats:
		loadproto.PutStats(b, servecmd.Memstats())
	}
	return b
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
	zeroRead := fs.Bool("zeroread", false, "wait for readability with a zero-byte Read, holding no buffer, and take one from a pool only to read and echo (needs -impl net, and the patched toolchain with GODEBUG=netpollzeroread=1)")
	idleTimeout := fs.Duration("idletimeout", 0, "close a connection that sends nothing for this long: a read deadline of now+D before each wait for a request, or with -ondemand the netpoll.Server's IdleTimeout (0: none)")
	delay := fs.Duration("delay", 0, "sleep this long before echoing a request loadgen marks for delay (loadgen -blocked), as a handler blocked outside the server's poller would (0: echo it at once)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *bufSize < 1 {
		return fmt.Errorf("bad -buf %d: want at least 1", *bufSize)
	}
	if *idleTimeout < 0 {
		return fmt.Errorf("bad -idletimeout %v: want a duration, or 0 for none", *idleTimeout)
	}
	if *delay < 0 {
		return fmt.Errorf("bad -delay %v: want a duration, or 0 for none", *delay)
	}
	if *zeroRead && (*onDemand || *waitRead) {
		return errors.New("-zeroread is package net's wait without a buffer: not with -ondemand or -waitread")
	}
	if *zeroRead && f.Impl != "net" {
		return fmt.Errorf("-zeroread needs -impl net (netpoll's buffer-free wait is -waitread), not -impl %s", f.Impl)
	}
	if *onDemand && *waitRead {
		return errors.New("-ondemand and -waitread are two ways to wait without a buffer: choose one")
	}
	if *waitRead && f.Impl != "netpoll" {
		// Package net's Read of an empty slice returns at once: a wait
		// built on it would spin.
		return fmt.Errorf("-waitread needs -impl netpoll (package net has no buffer-free wait), not -impl %s", f.Impl)
	}
	if *zeroRead {
		if err := checkZeroRead(); err != nil {
			return err
		}
	}
	s, err := f.Listen(stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	s.Announce(stdout, "echoserver")

	pool := sync.Pool{New: func() any { b := make([]byte, *bufSize); return &b }}
	idle := idleDeadline(*idleTimeout)
	if *onDemand {
		// The Server closes a connection idle for -idletimeout itself.
		s.IdleTimeout = *idleTimeout
		return s.ServeOnDemand(ctx, echoOnDemand(&pool, *delay))
	}
	if *zeroRead {
		return s.Serve(ctx, func(_ context.Context, c net.Conn) { echoZeroRead(c, &pool, idle, *delay) })
	}
	if *waitRead {
		return s.Serve(ctx, func(_ context.Context, c net.Conn) { echoWaiting(c.(*netpoll.Conn), &pool, idle, *delay) })
	}
	return s.Serve(ctx, func(_ context.Context, c net.Conn) { echo(c, *bufSize, idle, *delay) })
}

// idleDeadline returns what sets a connection's read deadline to d from
// now, before it waits for a request (-idletimeout), or nil for d = 0: no
// deadline, and the echo loops' hot path as it was.
func idleDeadline(d time.Duration) func(c net.Conn) error {
	if d <= 0 {
		return nil
	}
	return func(c net.Conn) error { return c.SetReadDeadline(time.Now().Add(d)) }
}

// echoWaiting is echo holding a buffer only while it reads and writes: it
// waits for readability with none, and takes one from pool to echo. idle
// (unless nil) sets the read deadline before each wait, which ends it as
// it ends Read; delay is answer's.
func echoWaiting(c *netpoll.Conn, pool *sync.Pool, idle func(net.Conn) error, delay time.Duration) {
	for {
		if idle != nil && idle(c) != nil {
			return
		}
		if err := c.WaitRead(); err != nil {
			return
		}
		bp := pool.Get().(*[]byte)
		n, err := c.Read(*bp)
		if n > 0 {
			_, err = c.Write(answer((*bp)[:n], delay))
		}
		pool.Put(bp)
		if err != nil {
			return
		}
	}
}

// errZeroRead is checkZeroRead's refusal.
var errZeroRead = errors.New("-zeroread needs a zero-byte Read that waits: build with runtime_patch/build.sh and set GODEBUG=netpollzeroread=1")

// checkZeroRead returns nil if a zero-byte Read on a TCP socket of package
// net waits for readability here, and errZeroRead if it returns at once
// (a stock toolchain, or the setting off), on which echoZeroRead would
// spin. It tries on a loopback pair made for it: one end, with nothing
// sent to it, reads zero bytes with a deadline 50ms ahead, which ends a
// Read that waits.
func checkZeroRead() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("checking -zeroread: %w", err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return fmt.Errorf("checking -zeroread: %w", err)
	}
	defer c.Close()
	peer, err := l.Accept()
	if err != nil {
		return fmt.Errorf("checking -zeroread: %w", err)
	}
	defer peer.Close()
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		return fmt.Errorf("checking -zeroread: %w", err)
	}
	switch _, err := c.Read(nil); {
	case err == nil:
		return errZeroRead
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	default:
		return fmt.Errorf("checking -zeroread: zero-byte Read: %w", err)
	}
}

// echoZeroRead is echoWaiting on package net: it waits for readability
// with a zero-byte Read, which waits only under checkZeroRead's
// conditions, and takes a buffer from pool to echo one Read. idle (unless
// nil) sets the read deadline before each wait; delay is answer's.
func echoZeroRead(c net.Conn, pool *sync.Pool, idle func(net.Conn) error, delay time.Duration) {
	for {
		if idle != nil && idle(c) != nil {
			return
		}
		if _, err := c.Read(nil); err != nil {
			return
		}
		bp := pool.Get().(*[]byte)
		n, err := c.Read(*bp)
		if n > 0 {
			_, err = c.Write(answer((*bp)[:n], delay))
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
// queued calls it again. delay is answer's.
func echoOnDemand(pool *sync.Pool, delay time.Duration) netpoll.HandlerFunc {
	return func(c net.Conn) error {
		bp := pool.Get().(*[]byte)
		n, err := c.Read(*bp)
		if n > 0 {
			if _, werr := c.Write(answer((*bp)[:n], delay)); werr != nil {
				err = werr
			}
		}
		pool.Put(bp)
		return err
	}
}

// echo writes back what it reads until the peer closes or an error. idle
// (unless nil) sets the read deadline before each Read; delay is
// answer's.
func echo(c net.Conn, bufSize int, idle func(net.Conn) error, delay time.Duration) {
	buf := make([]byte, bufSize)
	for {
		if idle != nil && idle(c) != nil {
			return
		}
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(answer(buf[:n], delay)); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
