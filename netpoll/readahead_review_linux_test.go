package netpoll_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Review tests for the hot wait's read-ahead (readahead_linux.go). Each
// asserts what package net, or the design's own statement, promises; the
// sweeper's tick is an hour (hotFixture), so a lost wakeup is a hang that
// the watchdog turns into a failure.

// firstByteHandler reads one byte and, if cmds has a command for it, runs
// it; any other input is echoed whole, its rest taken from what the hot
// wait read ahead (heatAhead's "heat").
func firstByteHandler(cmds map[byte]func(c net.Conn) error) netpoll.Handler {
	return netpoll.HandlerFunc(func(c net.Conn) error {
		var b [64]byte
		n, err := c.Read(b[:1])
		if err != nil {
			return err
		}
		if cmd := cmds[b[0]]; cmd != nil {
			return cmd(c)
		}
		m, err := c.Read(b[1:])
		if err != nil {
			return err
		}
		_, err = c.Write(b[:n+m])
		return err
	})
}

// sinkListener accepts one connection and sends what it read until EOF.
func sinkListener(t *testing.T) (addr string, sunk <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			ch <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		if err != nil {
			ch <- "read: " + err.Error()
			return
		}
		ch <- string(b)
	}()
	return l.Addr().String(), ch
}

// TestReadAheadReviewStaleEdge: a ready token the read direction holds as
// the hot period begins (an edge the poller dispatched for input that came
// while the connection went hot, which the first read ahead then took) is
// never consumed while the connection reads ahead: readAhead does not
// consume it before its read(2) as a stream Read does (transfer's
// consume), and the handler's Reads take the buffer with no syscall. The
// hot wait skips only with the direction empty (serve: ask), so it never
// skips again in that hot period: every request pays a read(2) that finds
// EAGAIN, the syscall the change removes. It happens on its own in about
// one run of TestServeReadAheadHops in six under -race (skips 0), and
// makes TestServeReadAheadStickyWindows/before fail and then hang (its
// window is never reached, and the poller stays held in the sticky hook).
// Here the stale edge is handed over as dispatch would.
func TestReadAheadReviewStaleEdge(t *testing.T) {
	_, s, c, stop := hotFixture(t, echoHandler)
	heatAhead(t, s, c, stop)
	sc := serverSide(t, s, c)
	netpoll.StaleReadEdge(sc)
	if st := netpoll.ReadState(sc); st != "ready" {
		t.Fatalf("read state %q after the edge, want ready", st)
	}
	const n = 100
	echoN(t, c, "stale", n)
	goCold(t, s, stop)
	calls, aheads, skips := aheadSkips(t, s)
	t.Logf("hot calls %d, reads ahead %d, skips %d", calls, aheads, skips)
	if calls < n || skips != calls {
		t.Errorf("hot calls %d, skips %d: want each short read ahead's wait to skip its read, as TestServeReadAheadHops does (the edge came before the first read ahead, which took what it announced)", calls, skips)
	}
}

// TestReadAheadReviewReadFromSplice: Conn.ReadFrom splices from a source
// that is this package's *Conn (or an io.LimitedReader around one, which
// io.CopyN makes) straight from its socket, behind the input its hot wait
// read ahead: a handler that proxies a body with io.CopyN to a Conn of the
// group's loses the bytes read ahead (here the body's first bytes, or all
// of it), which stay in the buffer for a later Read. WriteTo flushes them
// first (flushAhead); readFrom's spliceSource does not.
func TestReadAheadReviewReadFromSplice(t *testing.T) {
	addr, sunk := sinkListener(t)
	want := "first;" + strings.Repeat("then spliced;", 1000)
	var group atomic.Pointer[netpoll.Group]
	type result struct {
		n       int64
		err     error
		pending int
	}
	copied := make(chan result, 1)
	h := firstByteHandler(map[byte]func(net.Conn) error{'S': func(c net.Conn) error {
		dst, err := group.Load().Dial(context.Background(), "tcp", addr)
		if err != nil {
			copied <- result{err: err}
			return err
		}
		n, err := io.CopyN(dst, c, int64(len(want)))
		dst.Close()
		pending, _ := netpoll.ReadAhead(c)
		copied <- result{n, err, pending}
		return io.EOF
	}})
	g, s, c, stop := hotFixture(t, h)
	group.Store(g)
	heatAhead(t, s, c, stop)
	write(t, c, "S"+want[:len("first;")])
	write(t, c, want[len("first;"):])
	c.(*net.TCPConn).CloseWrite()
	var r result
	select {
	case r = <-copied:
	case <-stop:
		t.Fatal("the handler never copied")
	}
	got := <-sunk
	if got != want || r.pending != 0 {
		t.Errorf("io.CopyN to a Conn copied %d bytes (%v), the sink got %d bytes (%.30q...), %d bytes left read ahead: want %d in order, none left", r.n, r.err, len(got), got, r.pending, len(want))
	}
}

// TestReadAheadReviewWriteToReset: a reset that the hot wait's read ahead
// consumed (the socket reports EOF after it) is kept for the handler's
// Read, but WriteTo to a socket (splice) does not report it: flushAhead
// leaves a kept error to "WriteTo's Read", and the splice, which makes no
// Read, finds EOF. So a proxying handler's io.Copy(backend, c) ends with
// nil, as if the client had closed cleanly, where package net's WriteTo
// (and this package's, cold) returns ECONNRESET; the error stays behind
// for a Read nobody makes.
func TestReadAheadReviewWriteToReset(t *testing.T) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	type result struct {
		n          int64
		err        error
		pendingErr bool
	}
	results := make(chan result, 1)
	var proxy atomic.Bool
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		if !proxy.Load() {
			return echoHandler.ServeConn(c)
		}
		dst, err := net.Dial("tcp", sink.Addr().String())
		if err != nil {
			results <- result{err: err}
			return err
		}
		defer dst.Close()
		n, err := c.(io.WriterTo).WriteTo(dst)
		_, pending := netpoll.ReadAhead(c)
		results <- result{n, err, pending}
		return io.EOF
	})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	proxy.Store(true)
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close() // a reset, with nothing unread: the read ahead consumes it
	var r result
	select {
	case r = <-results:
	case <-stop:
		t.Fatal("the handler never ran for the reset")
	}
	if !errors.Is(r.err, syscall.ECONNRESET) {
		t.Errorf("WriteTo after a reset: %d, %v (reset still kept for a Read: %v); want an error wrapping ECONNRESET, as package net's", r.n, r.err, r.pendingErr)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 0 }) {
		t.Fatal("the reset connection stayed hot")
	}
	if calls, aheads := aheadStats(t, s); aheads != calls {
		t.Fatalf("hot calls %d, reads ahead %d: the reset was not read ahead, the test shows nothing", calls, aheads)
	}
}

// TestReadAheadReviewRawReadOpError: ErrReadAhead's documentation says a
// RawConn's Read returns it "wrapped in a *net.OpError" (as package net
// wraps RawConn errors: Op "raw-read"), but rawIO returns it bare.
func TestReadAheadReviewRawReadOpError(t *testing.T) {
	errs := make(chan error, 1)
	h := firstByteHandler(map[byte]func(net.Conn) error{'R': func(c net.Conn) error {
		rc, _ := c.(syscall.Conn).SyscallConn()
		errs <- rc.Read(func(uintptr) bool { return true })
		var b [16]byte
		n, err := c.Read(b[:])
		if err != nil {
			return err
		}
		_, err = c.Write(b[:n])
		return err
	}})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	write(t, c, "Rxyz")
	var err error
	select {
	case err = <-errs:
	case <-stop:
		t.Fatal("the handler never ran")
	}
	var oe *net.OpError
	if !errors.Is(err, netpoll.ErrReadAhead) || !errors.As(err, &oe) {
		t.Errorf("RawConn.Read with input read ahead: %v (%T), want a *net.OpError wrapping ErrReadAhead", err, err)
	}
	got := make([]byte, 3)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "xyz" {
		t.Fatalf("reply %q, %v", got, err)
	}
}

// The review's TestReadAheadReviewModsPerRequest found that re-arming the
// watch after a handler's park costs a second EPOLL_CTL_MOD per park
// (rearmAfterEvent). Kept, and documented (DESIGN.md, "Read-ahead"):
// re-arming it only before a skip would cost the same MOD whenever a skip
// follows the park, the common case, and not re-arming it would lose the
// watch for the rest of the hot period. An exact count is not
// deterministic under -race (a lagging poller re-arms for the next park
// too), so TestServeReadAheadWatchAfterPark pins what the re-arm is for.

// TestReadAheadReviewControlPeek: a RawConn's Control hands the fd to user
// code as its Read does, but only Read and File fail with ErrReadAhead:
// a peek in Control (MSG_PEEK, as protocol sniffers do) with input read
// ahead finds the socket empty where package net's finds the input.
//
// Kept, and documented (ErrReadAhead, SyscallConn): Control is meant for
// options, and failing it while input is pending would fail setsockopt
// calls at random. The test pins what is documented: the first peek reads
// behind the input (EAGAIN), the next Read returns it, and once Control
// has had the fd nothing is read ahead again, so the next call's peek
// finds its input.
func TestReadAheadReviewControlPeek(t *testing.T) {
	type result struct {
		peek      string
		ctl, perr error
		rest      string
	}
	results := make(chan result, 2)
	h := firstByteHandler(map[byte]func(net.Conn) error{'P': func(c net.Conn) error {
		var r result
		rc, _ := c.(syscall.Conn).SyscallConn()
		r.ctl = rc.Control(func(fd uintptr) {
			b := make([]byte, 16)
			n, _, err := unix.Recvfrom(int(fd), b, unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err != nil {
				r.perr = err
				return
			}
			r.peek = string(b[:n])
		})
		var b [16]byte
		n, err := c.Read(b[:])
		r.rest = string(b[:n])
		results <- r
		if err != nil {
			return err
		}
		_, err = c.Write(b[:n])
		return err
	}})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	for i, want := range []result{{perr: unix.EAGAIN, rest: "xyz"}, {peek: "abc", rest: "abc"}} {
		write(t, c, "P"+want.rest)
		var r result
		select {
		case r = <-results:
		case <-stop:
			t.Fatal("the handler never ran")
		}
		if r != want {
			t.Errorf("call %d: Control's peek %q, %v (Control: %v), then Read %q; want %q, %v, nil, %q", i, r.peek, r.perr, r.ctl, r.rest, want.peek, want.perr, want.rest)
		}
		got := make([]byte, len(want.rest))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != want.rest {
			t.Fatalf("reply %q, %v", got, err)
		}
	}
}
