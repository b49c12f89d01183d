package netpoll_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Failed epoll_ctl calls (ctl_linux.go), injected with SetCtlFault. While
// the library dropped these errors, each test but TestCtlUnregisterFails
// hung until its watchdog fired; that one saw Close return nil.

// wantCtlError checks that err is a *net.OpError for op around an
// *os.SyscallError naming epoll_ctl that wraps errno.
func wantCtlError(t *testing.T, what string, err error, op string, errno syscall.Errno) {
	t.Helper()
	var oe *net.OpError
	var se *os.SyscallError
	switch {
	case !errors.As(err, &oe) || oe.Op != op:
		t.Errorf("%s: err = %v (%T), want a *net.OpError for %q", what, err, err, op)
	case !errors.As(err, &se) || se.Syscall != "epoll_ctl":
		t.Errorf("%s: err = %v, want it to wrap an *os.SyscallError naming epoll_ctl", what, err)
	case !errors.Is(err, errno):
		t.Errorf("%s: err = %v, want it to wrap %v", what, err, errno)
	}
}

// dropOutFault fails, once, the first EPOLL_CTL_MOD on fd that arms no
// EPOLLOUT after an ADD or MOD armed EPOLLOUT with EPOLLIN: with a reader
// parked, that is the poller's re-arm after the writer's event (mode=oneshot)
// or its drop of EPOLLOUT (mode=lt).
type dropOutFault struct {
	fd    int
	errno syscall.Errno

	mu     sync.Mutex
	out    bool // EPOLLIN|EPOLLOUT was armed
	fired  bool
	armedc chan struct{} // closed when out is set
}

func newDropOutFault(fd int, errno syscall.Errno) *dropOutFault {
	return &dropOutFault{fd: fd, errno: errno, armedc: make(chan struct{})}
}

func (f *dropOutFault) fault(_, op, fd int, events uint32) unix.Errno {
	if fd != f.fd || op == unix.EPOLL_CTL_DEL {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	const inOut = unix.EPOLLIN | unix.EPOLLOUT
	switch {
	case events&inOut == inOut:
		if !f.out {
			f.out = true
			close(f.armedc)
		}
	case op == unix.EPOLL_CTL_MOD && events&unix.EPOLLOUT == 0 && f.out && !f.fired:
		f.fired = true
		return f.errno
	}
	return 0
}

func (f *dropOutFault) hasFired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// parkedReader starts a Read on c and returns once it has parked (its
// poller's ReadParks passed base: c must be the group's only reader).
func parkedReader(t *testing.T, g *netpoll.Group, c net.Conn, base uint64, expired <-chan struct{}) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		res <- err
	}()
	if !await(expired, func() bool { return netpoll.Counters(g).Total.ReadParks > base }) {
		t.Fatalf("the Read never parked (read state %s)", netpoll.ReadState(c))
	}
	return res
}

// TestCtlRearmFails parks a Read, then a Write on the same connection, and
// drains the peer: the poller re-arms the still parked reader after the
// writer's events (mode=oneshot) or drops EPOLLOUT once the writer is done
// (mode=lt), and that EPOLL_CTL_MOD fails. The Read must end with
// the epoll_ctl error, and so must Close; the Write ends with it or
// completes. With the error dropped, the mode=oneshot fd stayed disarmed and the
// Read parked for good; under mode=lt the MOD ran again at the next
// EPOLLOUT, and the Read, with no data coming, waited for good too, where
// it must learn that its registration was in doubt.
func TestCtlRearmFails(t *testing.T) {
	for _, mode := range []string{"oneshot", "lt"} {
		for _, wait := range []string{"nested", "inline", "block"} {
			t.Run("mode="+mode+"/wait="+wait, func(t *testing.T) {
				done, expired := watchdog(t, time.Minute)
				defer done()
				goroutines, fds := leakBaseline(t)
				g, err := netpoll.New(cfgOf(t, "mode="+mode+",wait="+wait))
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				client, server := netClient(t, l)
				l.Close()

				f := newDropOutFault(netpoll.FD(server), syscall.ENOENT)
				defer netpoll.SetCtlFault(f.fault)()
				readRes := parkedReader(t, g, server, netpoll.Counters(g).Total.ReadParks, expired)

				// The writer parks on a full socket before the peer drains it,
				// so that it arms EPOLLOUT.
				if err := server.(*netpoll.Conn).SetWriteBuffer(16 << 10); err != nil {
					t.Fatal(err)
				}
				writeRes := make(chan error, 1)
				go func() {
					_, err := server.Write(make([]byte, 4<<20))
					writeRes <- err
				}()
				select {
				case <-f.armedc:
				case <-expired:
					t.Fatalf("the writer never armed EPOLLOUT (write state %s)", netpoll.WriteState(server))
				}
				drained := make(chan error, 1)
				go func() {
					_, err := io.Copy(io.Discard, client)
					drained <- err
				}()

				wantCtlError(t, "the parked Read", awaitResult(t, readRes, expired, "the Read whose re-arm failed"), "read", syscall.ENOENT)
				if !f.hasFired() {
					t.Error("the Read failed, but the fault never fired")
				}
				if err := awaitResult(t, writeRes, expired, "the Write"); err != nil {
					wantCtlError(t, "the Write", err, "write", syscall.ENOENT)
				}
				_, err = server.Read(make([]byte, 1))
				wantCtlError(t, "a Read after the failure", err, "read", syscall.ENOENT)
				wantCtlError(t, "Close", server.Close(), "close", syscall.ENOENT)
				if err := awaitResult(t, drained, expired, "the peer's drain"); err != nil {
					t.Errorf("the peer's drain: %v", err)
				}
				client.Close()
				g.Close()
				checkLeaks(t, goroutines, fds)
			})
		}
	}
}

// TestCtlReaddFails parks a Read, then a Write, on a mode=lt
// connection of a nested poller, which arms the writer with EPOLL_CTL_DEL
// and ADD; the ADD fails. The Write returned that error before; the Read,
// whose registration the DEL had taken, parked for good. Both must end
// with it.
func TestCtlReaddFails(t *testing.T) {
	for _, wait := range nestedWaits {
		t.Run("wait="+wait, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode=lt,wait="+wait))
			l := listen(t, g, "tcp")
			_, server := netClient(t, l)
			done, expired := watchdog(t, time.Minute)
			defer done()

			fd := netpoll.FD(server)
			var fired atomic.Bool
			defer netpoll.SetCtlFault(func(_, op, cfd int, events uint32) unix.Errno {
				if cfd == fd && op == unix.EPOLL_CTL_ADD && fired.CompareAndSwap(false, true) {
					return unix.ENOSPC
				}
				return 0
			})()
			readRes := parkedReader(t, g, server, netpoll.Counters(g).Total.ReadParks, expired)
			if err := server.(*netpoll.Conn).SetWriteBuffer(16 << 10); err != nil {
				t.Fatal(err)
			}
			writeRes := make(chan error, 1)
			go func() {
				_, err := server.Write(make([]byte, 4<<20)) // the peer never reads
				writeRes <- err
			}()
			wantCtlError(t, "the Write whose arming failed", awaitResult(t, writeRes, expired, "the Write"), "write", syscall.ENOSPC)
			wantCtlError(t, "the parked Read", awaitResult(t, readRes, expired, "the Read whose registration was lost"), "read", syscall.ENOSPC)
			wantCtlError(t, "Close", server.Close(), "close", syscall.ENOSPC)
		})
	}
}

// TestCtlRequeueFails fails every EPOLL_CTL_ADD of an Exclusive listener's
// socket, so that each registration balancing requeues (EPOLL_CTL_DEL, then
// ADD) is left out of epoll. Four connections are dialed one at a time:
// the first accept requeues its registration, the third the other's, and
// with the errors dropped nothing was left to report the fourth, whose
// Accept waited for good. Accept must return the epoll_ctl error, and
// once the kernel takes the ADD again every connection is accepted.
func TestCtlRequeueFails(t *testing.T) {
	done, expired := watchdog(t, time.Minute)
	defer done()
	goroutines, fds := leakBaseline(t)
	g, err := netpoll.New(netpoll.Config{Sharing: netpoll.Exclusive, Pollers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// The fault fails every EPOLL_CTL_ADD of the socket while failing is
	// set, and keeps which epoll instances (pollers) it is out of.
	fd := netpoll.FD(l)
	var (
		mu      sync.Mutex
		failing = true
		faults  int
		out     = map[int]bool{} // by epoll fd
	)
	defer netpoll.SetCtlFault(func(epfd, op, cfd int, _ uint32) unix.Errno {
		if cfd != fd {
			return 0
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case op == unix.EPOLL_CTL_DEL:
			out[epfd] = true
		case op == unix.EPOLL_CTL_ADD && failing:
			faults++
			return unix.ENOSPC
		case op == unix.EPOLL_CTL_ADD:
			out[epfd] = false
		}
		return 0
	})()
	lift := func() {
		mu.Lock()
		failing = false
		mu.Unlock()
	}
	outOf := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range out {
			if o {
				n++
			}
		}
		return n
	}

	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result)
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			results <- result{c, err}
		}
	}()
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	// accept dials l and waits for the connection, checking the errors
	// Accept returns meanwhile; lifting, if set, lifts the fault at the
	// first one.
	errs := 0
	accept := func(what string, lifting bool) {
		t.Helper()
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, client)
		for {
			r := awaitResult(t, results, expired, what)
			if r.err == nil {
				r.c.Close()
				return
			}
			errs++
			wantCtlError(t, what, r.err, "accept", syscall.ENOSPC)
			if lifting {
				lift() // perhaps no registration is left: let the next try add one back
			}
		}
	}
	accept("Accept of the first connection", false)
	accept("Accept of the second connection", false)
	accept("Accept of the third connection", false)
	accept("Accept of the fourth connection", true)
	lift()
	mu.Lock()
	if errs == 0 || faults == 0 || errs > faults {
		t.Errorf("%d Accept errors for %d failed EPOLL_CTL_ADDs: want some, none without a failed ADD", errs, faults)
	}
	mu.Unlock()
	// Every registration comes back, and accepting goes on (an error may
	// still come from a try made before the fault was lifted).
	if !await(expired, func() bool { return outOf() == 0 }) {
		t.Fatalf("%d registrations never came back", outOf())
	}
	for range 4 {
		accept("Accept after the fault was lifted", false)
	}
	if n := outOf(); n != 0 {
		t.Errorf("%d registrations out of epoll after the fault was lifted", n)
	}

	l.Close()
	for open := true; open; {
		select {
		case r := <-results:
			if r.c != nil {
				r.c.Close()
			}
		case <-accepting:
			open = false
		}
	}
	for _, c := range clients {
		c.Close()
	}
	clients = nil
	g.Close()
	checkLeaks(t, goroutines, fds)
}

// leakBaseline starts the runtime's netpoller (package net's first socket
// opens its epoll fd for good), then returns the goroutines and fds open.
func leakBaseline(t *testing.T) (goroutines, fds int) {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nl.Close()
	return runtime.NumGoroutine(), countFDs(t)
}

// checkLeaks checks that the fds and goroutines are back to a baseline.
func checkLeaks(t *testing.T, goroutines, fds int) {
	t.Helper()
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds open after the group closed, want %d", n, fds)
	}
	awaitGoroutines(t, goroutines)
}

// TestCtlUnregisterFails fails the EPOLL_CTL_DEL of a connection's Close:
// Close must return it (it returned nil). The connection's fd is closed
// all the same; with a dup of the socket (File) alive, the registration
// stays and reports events of the closed connection's generation, which
// the poller drops as stale, with the fd number reused by a new
// connection, which is served.
func TestCtlUnregisterFails(t *testing.T) {
	// spin=off: no adaptive spinning measurement opens pipes meanwhile, so the
	// next socket takes the closed fd number.
	g := newGroup(t, netpoll.Config{DisableSpin: true})
	l := listen(t, g, "tcp")
	client, server := netClient(t, l)
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	done, expired := watchdog(t, time.Minute)
	defer done()

	fd := netpoll.FD(server)
	file, err := server.(*netpoll.Conn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var fired atomic.Bool
	restore := netpoll.SetCtlFault(func(_, op, cfd int, events uint32) unix.Errno {
		if cfd == fd && op == unix.EPOLL_CTL_DEL && fired.CompareAndSwap(false, true) {
			return unix.EINTR
		}
		return 0
	})
	err = server.Close()
	restore()
	wantCtlError(t, "Close whose EPOLL_CTL_DEL failed", err, "close", syscall.EINTR)

	// A new connection on the same fd number, while the old registration
	// lives on in the dup.
	c2, err := g.Dial(context.Background(), "tcp", peer.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := netpoll.FD(c2); got != fd {
		t.Fatalf("the new connection has fd %d, not the closed one's %d", got, fd)
	}
	p2, err := peer.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	stale := netpoll.Counters(g).Total.StaleEvents
	if _, err := client.Write([]byte("to the closed connection")); err != nil {
		t.Fatal(err)
	}
	if !await(expired, func() bool { return netpoll.Counters(g).Total.StaleEvents > stale }) {
		t.Fatal("no stale event for the registration the dup kept")
	}
	msg := []byte("to the new connection")
	if _, err := p2.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c2, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("the new connection read %q, %v", got, err)
	}
}

// TestCtlServeRearmFails fails the mode=oneshot re-arm of a connection served on
// demand while it is idle (no goroutine) and its handler's background
// Write is parked: the writer's event comes, and re-arming the idle reader
// fails. The handler must be called and its Read return the epoll_ctl
// error, which closes the connection. With the error dropped the fd stayed
// disarmed and the connection idle for good.
func TestCtlServeRearmFails(t *testing.T) {
	g := newGroup(t, cfgOf(t, "mode=oneshot"))
	l := listen(t, g, "tcp")
	done, expired := watchdog(t, time.Minute)
	defer done()

	var f *dropOutFault
	faultSet := make(chan struct{})
	writeRes := make(chan error, 1)
	secondRead := make(chan error, 1)
	var calls atomic.Int32
	sl := newStateLog()
	s := &netpoll.Server{ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		if calls.Add(1) == 1 {
			if _, err := c.Read(make([]byte, 1)); err != nil {
				return err
			}
			<-faultSet
			if err := c.(*netpoll.Conn).SetWriteBuffer(16 << 10); err != nil {
				return err
			}
			go func() {
				_, err := c.Write(make([]byte, 4<<20))
				writeRes <- err
			}()
			// Idle with the writer parked: the hand-off arms both.
			if !netpoll.AwaitWriteState(c, "waiting", expired) {
				return errors.New("the background Write never parked")
			}
			return nil
		}
		_, err := c.Read(make([]byte, 1))
		secondRead <- err
		return err
	})}
	serveOn(t, s, l)
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := sl.conn(t, 0, expired)
	f = newDropOutFault(netpoll.FD(c), syscall.ENOENT)
	defer netpoll.SetCtlFault(f.fault)()
	close(faultSet)
	if _, err := client.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.armedc:
	case <-expired:
		t.Fatal("the idle connection never armed EPOLLIN|EPOLLOUT")
	}
	drained := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, client)
		drained <- err
	}()
	wantCtlError(t, "the handler's Read", awaitResult(t, secondRead, expired, "the handler's call after the failed re-arm"), "read", syscall.ENOENT)
	// The Write ends with the error too, or completes, or meets the Close
	// the handler's error made.
	if err := awaitResult(t, writeRes, expired, "the background Write"); err != nil && !errors.Is(err, net.ErrClosed) {
		wantCtlError(t, "the background Write", err, "write", syscall.ENOENT)
	}
	if err := awaitResult(t, drained, expired, "the client's read to EOF"); err != nil {
		t.Errorf("the client's read: %v, want EOF", err)
	}
	if !await(expired, func() bool { return sl.closed.Load() == 1 }) {
		t.Fatal("the connection was never closed")
	}
	sl.check(t)
}

// TestCtlWatchArmFails fails the EPOLL_CTL_MOD that arms a wait=inline
// poller's watch port as a holder leaves with its own event and a waiter
// behind it (the holder then blocks outside netpoll, as a handler on a
// mutex). The poller must fall back, not panic and not strand the waiter:
// the role goes to the poller's goroutine for good, which wakes the waiter
// at its byte with no takeover (the port never fired), and every later
// park waits on its channel with nothing armed again (one failed arm in
// all). The error is kept as the package keeps a failed epoll_ctl's.
// With the failure ignored the waiter's Read waited for the holder.
func TestCtlWatchArmFails(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",wait=inline"))
			l := listen(t, g, "tcp")
			clientA, serverA := pipe(t, g, l)
			clientB, serverB := pipe(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()
			if !netpoll.AwaitInlineRole(serverA, "vacant", expired) {
				t.Fatal("the role stayed taken after the setup")
			}
			base := netpoll.Counters(g).Total

			readA, release := make(chan ioResult, 1), make(chan struct{})
			defer close(release)
			if !awaitInlinePark(t, "A's Read", func() {
				go func() {
					b := make([]byte, 8)
					n, err := serverA.Read(b)
					readA <- ioResult{n, err}
					<-release
				}()
			}) {
				t.Fatal("A's Read waited on its channel with nobody holding the role; want it inline")
			}
			readB := make(chan ioResult, 1)
			read := func() {
				b := make([]byte, 8)
				n, err := serverB.Read(b)
				readB <- ioResult{n, err}
			}
			if awaitInlinePark(t, "B's Read", func() { go read() }) {
				t.Fatal("B's Read waited inline while A's held the role")
			}

			port := netpoll.WatchPortFD(serverA)
			var faults atomic.Int32
			restore := netpoll.SetCtlFault(func(epfd, op, _ int, events uint32) unix.Errno {
				if epfd == port && op == unix.EPOLL_CTL_MOD && events != 0 {
					faults.Add(1)
					return unix.ENOENT
				}
				return 0
			})
			if _, err := clientA.Write([]byte{1}); err != nil {
				restore()
				t.Fatal(err)
			}
			r := awaitResult(t, readA, expired, "A's Read")
			lostWhileHeld := await(expired, func() bool { return netpoll.InlineWatchLost(serverA) != nil })
			// B's byte: served while A is blocked, by the poller's goroutine.
			if _, err := clientB.Write([]byte{2}); err != nil {
				restore()
				t.Fatal(err)
			}
			rb := awaitResult(t, readB, expired, "B's Read (A blocked, the port lost)")
			restore()
			if r.err != nil || r.n != 1 || rb.err != nil || rb.n != 1 {
				t.Fatalf("A's Read = %d, %v; B's = %d, %v", r.n, r.err, rb.n, rb.err)
			}
			if !lostWhileHeld {
				t.Fatal("the failed arm was not kept")
			}
			wantSyscallErr(t, netpoll.InlineWatchLost(serverA), syscall.ENOENT)
			if n := faults.Load(); n != 1 {
				t.Errorf("%d failed arms; want 1: nothing arms the port once it is lost", n)
			}
			if !netpoll.AwaitInlineRole(serverA, "loop", expired) {
				t.Fatal("the role is not the loop's after the port was lost")
			}

			// From now on every park waits on its channel, the loop polling.
			if awaitInlinePark(t, "B's second Read", func() { go read() }) {
				t.Fatal("a Read waited inline after the port was lost")
			}
			if _, err := clientB.Write([]byte{3}); err != nil {
				t.Fatal(err)
			}
			if rb := awaitResult(t, readB, expired, "B's second Read"); rb.err != nil || rb.n != 1 {
				t.Fatalf("B's second Read = %d, %v", rb.n, rb.err)
			}
			s := netpoll.Counters(g).Total
			if n := s.Takeovers - base.Takeovers; n != 0 {
				t.Errorf("%d takeovers; want none: the port never fired", n)
			}
			if n := s.InlineWaits - base.InlineWaits; n != 1 {
				t.Errorf("%d parks waited inline; want A's alone", n)
			}
		})
	}
}

// wantSyscallErr checks that err is an *os.SyscallError naming epoll_ctl
// that wraps errno.
func wantSyscallErr(t *testing.T, err error, errno syscall.Errno) {
	t.Helper()
	var se *os.SyscallError
	if !errors.As(err, &se) || se.Syscall != "epoll_ctl" || !errors.Is(err, errno) {
		t.Errorf("err = %v (%T), want an *os.SyscallError naming epoll_ctl wrapping %v", err, err, errno)
	}
}
