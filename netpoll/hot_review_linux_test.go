package netpoll_test

import (
	"errors"
	"io"
	"log"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Review tests for dispatch=hot (hot_linux.go). Each runs the same script
// under dispatch=go, where it must pass (the script itself is sound), and
// under dispatch=hot, where it shows a defect. The sweeper's tick is an
// hour, so that going cold does not hide a lost wakeup: what the sweeper
// would end 20 to 40 ms late by default is a hang here, which a bound that
// only a hang reaches turns into a failure.

// reviewRead is what one Read of a handler returned.
type reviewRead struct {
	s   string
	err error
}

// TestHotReviewShortReadPending: the hot callback skips its poll(2) after
// a short Read (serve: ask false when the direction is drained and nothing
// is sticky), but while a connection is hot its own registration is
// disarmed, so the poller never sees the EPOLLPRI, EPOLLRDHUP or EPOLLERR
// that would make the condition sticky. When the data and what ends the
// read early (an urgent mark, a FIN, a reset) are queued together before
// the wakeup (here: while the handler of the previous request runs inside
// the callback), the handler's short Read takes "abc", the callback parks
// on the runtime's flag, which the wakeup consumed, and what is still
// queued ("def", EOF) waits for the sweeper. dispatch=go serves it at
// once, through the sticky bits. The reset passed under dispatch=hot even
// then: EPOLLERR and EPOLLHUP come with any registration, and the poller
// stored them.
func TestHotReviewShortReadPending(t *testing.T) {
	// hot-block: dispatch=hot under wait=block. -noinq: as on a kernel
	// that refuses TCP_INQ, where the read ahead cannot see urgent data
	// behind it: the watch takes EPOLLPRI, and under wait=block, where it
	// would wake the poller's thread at every segment, a hot connection
	// watches nothing and one that reads ahead never skips (stickyWatch
	// says why).
	for _, dispatch := range []string{"go", "hot", "hot-block", "hot-noinq", "hot-block-noinq"} {
		for _, p := range shortPaths {
			if p.network != "tcp" || p.setup != nil {
				continue
			}
			t.Run(dispatch+"/"+p.name, func(t *testing.T) {
				hotReviewShortRead(t, dispatch, p)
			})
		}
	}
}

func hotReviewShortRead(t *testing.T, dispatch string, p shortPath) {
	t.Cleanup(netpoll.SetHotTick(time.Hour))
	reads := make(chan reviewRead, 8)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		reads <- reviewRead{string(buf[:n]), err}
		if err == nil && string(buf[:n]) == "block" {
			entered <- struct{}{}
			<-release
		}
		return err
	})
	s, c, stop, next := reviewServe(t, dispatch, h, reads)
	reviewHeat(t, dispatch, s, c, stop, next)
	// Under dispatch=hot this call runs inside the dup's RawConn.Read.
	reviewBlock(t, c, next, entered)
	// While the handler runs, the peer queues "abc" and what ends the
	// next Read early; all of it reaches the server before the handler
	// returns.
	sc := serverSide(t, s, c)
	p.send(t, c)
	if p.queued > 0 {
		if !await(stop, func() bool { return inq(t, sc) >= p.queued }) {
			t.Fatalf("the server never had %d bytes queued", p.queued)
		}
	} else if !await(stop, func() bool { return outq(t, c) == 0 }) {
		t.Fatal("the peer's data was never all acked")
	}
	// And what ends the read early is there too (an urgent mark, a FIN, a
	// reset: the bits the poller would keep as sticky).
	if !await(stop, func() bool {
		fds := []unix.PollFd{{Fd: int32(netpoll.FD(sc)), Events: unix.POLLIN | unix.POLLRDHUP | unix.POLLPRI}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n == 1 && uint32(fds[0].Revents)&p.sticky == p.sticky
	}) {
		t.Fatalf("poll never reported %#x", p.sticky)
	}
	close(release)
	if r := next("abc"); r.s != "abc" || r.err != nil {
		t.Fatalf("Read after the block: %q, %v; want the short %q", r.s, r.err, "abc")
	}
	// A bound only a hang reaches: with what follows already queued, the
	// handler is called again at once, or never (until a sweep).
	select {
	case r := <-reads:
		b := []byte(r.s)
		p.second(t, len(b), r.err, b)
	case <-time.After(10 * time.Second):
		t.Fatalf("dispatch=%s: the handler was never called for what followed the short read (%s), queued with it: hot %d, waiting hot %d",
			dispatch, p.name, netpoll.HotConns(s), netpoll.HotWaiting(s))
	}
}

// reviewServe serves h on a group for dispatch: "go", "hot", "hot-block"
// (dispatch=hot under wait=block), either hot one with "-noinq" (as on a
// kernel that refuses TCP_INQ: SetNoInq), and dials it. next waits for
// the handler's next Read, sent on reads, within a watchdog (stop).
func reviewServe(t *testing.T, dispatch string, h netpoll.Handler, reads <-chan reviewRead) (*netpoll.Server, net.Conn, <-chan struct{}, func(what string) reviewRead) {
	t.Helper()
	cfg := "dispatch=hot"
	if d, ok := strings.CutSuffix(dispatch, "-noinq"); ok {
		t.Cleanup(netpoll.SetNoInq())
		dispatch = d
	}
	switch dispatch {
	case "go":
		cfg = "dispatch=go"
	case "hot-block":
		cfg = "dispatch=hot,wait=block"
	}
	_, s, c, stop, _ := hotFixtureOf(t, cfg+",spin=off,shortread=on", h)
	next := func(what string) reviewRead {
		t.Helper()
		select {
		case r := <-reads:
			return r
		case <-stop:
			t.Fatalf("the handler never read %s", what)
			return reviewRead{}
		}
	}
	return s, c, stop, next
}

// reviewHeat makes c's connection busy (two calls), and, but under
// dispatch=go, waits until it waits hot.
func reviewHeat(t *testing.T, dispatch string, s *netpoll.Server, c net.Conn, stop <-chan struct{}, next func(string) reviewRead) {
	t.Helper()
	for range 2 { // the second call makes the connection busy: hot
		write(t, c, "hi")
		if r := next("hi"); r.s != "hi" || r.err != nil {
			t.Fatalf("first Reads: %q, %v", r.s, r.err)
		}
	}
	if dispatch != "go" && !await(stop, func() bool { return netpoll.HotWaiting(s) == 1 }) {
		t.Fatal("the connection never waited hot")
	}
}

// reviewBlock sends "block", whose call the handler holds (it reports
// entered) until the test releases it.
func reviewBlock(t *testing.T, c net.Conn, next func(string) reviewRead, entered <-chan struct{}) {
	t.Helper()
	write(t, c, "block")
	if r := next("block"); r.s != "block" || r.err != nil {
		t.Fatalf("Read of block: %q, %v", r.s, r.err)
	}
	<-entered
}

// TestHotReviewForeignRead: a Read from outside the handler on an idle
// connection fails with ErrServed (doc.go). While the connection waits hot
// its read direction is empty, not in serve, so such a Read parks instead
// (and arms the registration). And then Close does not reach the hot
// wait: nudge moves the parked Read out of waiting and returns before
// kickHot, so the dup is neither severed nor kicked, and it keeps the
// socket open: the peer sees no EOF and StateClosed does not come until a
// sweep. A read deadline set then is lost the same way.
func TestHotReviewForeignRead(t *testing.T) {
	for _, dispatch := range []string{"go", "hot"} {
		t.Run(dispatch, func(t *testing.T) {
			hotReviewForeignRead(t, dispatch)
		})
	}
}

func hotReviewForeignRead(t *testing.T, dispatch string) {
	t.Cleanup(netpoll.SetHotTick(time.Hour))
	closed := make(chan struct{}, 2)
	g := newGroup(t, cfgOf(t, "dispatch="+dispatch+",spin=off"))
	l := listen(t, g, "tcp")
	s := &netpoll.Server{Handler: echoHandler, ConnState: func(_ net.Conn, st netpoll.ConnState) {
		if st == netpoll.StateClosed {
			closed <- struct{}{}
		}
	}}
	serveOn(t, s, l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done, stop := watchdog(t, time.Minute)
	defer done()
	if err := heat(c, "hi"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool {
		return s.Stats().Idle == 1 && (dispatch != "hot" || netpoll.HotWaiting(s) == 1)
	}) {
		t.Fatal("the connection never went idle")
	}
	sc := serverSide(t, s, c)
	res := make(chan error, 1)
	go func() {
		_, err := sc.Read(make([]byte, 8))
		res <- err
	}()
	// The Read returns (ErrServed) or parks: whichever comes first.
	var foreign error
	returned := false
	if !await(stop, func() bool {
		select {
		case foreign = <-res:
			returned = true
			return true
		default:
			return netpoll.ReadState(sc) == "waiting"
		}
	}) {
		t.Fatal("the foreign Read neither returned nor parked")
	}
	switch {
	case !returned:
		t.Errorf("dispatch=%s: a Read from outside the handler parked on an idle connection, want ErrServed", dispatch)
	case !errors.Is(foreign, netpoll.ErrServed):
		t.Errorf("a Read from outside the handler on an idle connection: %v, want ErrServed", foreign)
	}
	if err := sc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A bound only a socket left open reaches.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("dispatch=%s: client Read after the server's Close: %d, %v; want 0, EOF (the dup keeps the socket open)", dispatch, n, err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Errorf("dispatch=%s: no StateClosed after Close: hot %d, waiting hot %d", dispatch, netpoll.HotConns(s), netpoll.HotWaiting(s))
	}
	if !returned {
		select {
		case err := <-res:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("the foreign Read after Close: %v, want net.ErrClosed", err)
			}
		case <-stop:
			t.Error("the foreign Read never returned after Close")
		}
	}
}

// TestHotReviewColdFailAfterClose: goCold calls fail after it dropped its
// reference (hot_linux.go, goCold: decref, then fail on a restore error).
// If Close came meanwhile, that decref was the last: destroy closed the fd,
// and fail's EPOLL_CTL_DEL then runs on a closed fd number, which another
// connection may have taken by then (its registration would be deleted,
// and it would wait for good), and its ctl.set adds an entry that the
// Close which already returned never takes. The test fails the restore's
// MOD while Close is under way, and records the DEL of the connection's
// fd number made after that number was closed.
func TestHotReviewColdFailAfterClose(t *testing.T) {
	_, s, c, stop := hotFixture(t, echoHandler)
	if err := heat(c, "hi"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return netpoll.HotWaiting(s) == 1 }) {
		t.Fatal("the connection never waited hot")
	}
	sc := serverSide(t, s, c)
	fd := netpoll.FD(sc)
	closeErr := make(chan error, 1)
	var failedRestore, delOnClosed atomic.Bool
	restore := netpoll.SetCtlFault(func(_, op, cfd int, events uint32) unix.Errno {
		if cfd != fd {
			return 0
		}
		switch {
		case op == unix.EPOLL_CTL_MOD && events&unix.EPOLLET != 0 && failedRestore.CompareAndSwap(false, true):
			// goCold's restore, with its reference held: Close now,
			// which waits for that reference, then fail the MOD.
			go func() { closeErr <- sc.Close() }()
			// Close has dropped the open reference and waits for
			// goCold's: its goroutine is blocked on the descriptor's
			// done channel, which only the stacks show.
			if !await(stop, closeBlocked) {
				t.Error("Close never came to wait for goCold's reference")
			}
			return unix.ENOMEM
		case op == unix.EPOLL_CTL_DEL:
			if _, err := unix.FcntlInt(uintptr(cfd), unix.F_GETFD, 0); err == unix.EBADF {
				delOnClosed.Store(true)
			}
		}
		return 0
	})
	defer restore()
	netpoll.SweepHot(s)
	netpoll.SweepHot(s)
	select {
	case <-closeErr:
	case <-stop:
		t.Fatal("Close never returned")
	}
	if !await(stop, func() bool { return s.Stats().Conns == 0 }) {
		t.Fatal("the connection was never finished")
	}
	if !failedRestore.Load() {
		t.Fatal("goCold's restore never ran")
	}
	if delOnClosed.Load() {
		t.Error("an EPOLL_CTL_DEL ran on the connection's fd number after the fd was closed (goCold: fail after decref)")
	}
}

// closeBlocked reports whether a goroutine is blocked in desc.close's wait
// for the descriptor's last reference.
func closeBlocked() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "[chan receive") && strings.Contains(g, "netpoll.(*desc).close(") {
			return true
		}
	}
	return false
}

// TestHotReviewHandlerEnds: a hot connection's handler, which runs inside
// the dup's RawConn.Read, ends its connection in each way that must not
// deadlock on the dup's reference (goCold closes the dup asynchronously
// only for a Goexit): it closes its own connection and returns nil or an
// error, panics, or exits its goroutine. Each time the client reads EOF,
// StateClosed comes once, nothing stays hot and the fds (the socket and
// its dup) are released.
func TestHotReviewHandlerEnds(t *testing.T) {
	for _, how := range []string{"close", "closeerr", "panic", "goexit"} {
		t.Run(how, func(t *testing.T) {
			var closed atomic.Int32
			t.Cleanup(netpoll.SetHotTick(time.Hour))
			g := newGroup(t, cfgOf(t, "dispatch=hot,spin=off"))
			l := listen(t, g, "tcp")
			s := &netpoll.Server{
				ErrorLog: log.New(io.Discard, "", 0),
				Handler: netpoll.HandlerFunc(func(c net.Conn) error {
					var buf [64]byte
					n, err := c.Read(buf[:])
					if err != nil {
						return err
					}
					if string(buf[:n]) == "end" {
						switch how {
						case "close":
							c.Close()
							return nil
						case "closeerr":
							c.Close()
							return io.ErrUnexpectedEOF
						case "panic":
							panic("review")
						case "goexit":
							runtime.Goexit()
						}
					}
					_, err = c.Write(buf[:n])
					return err
				}),
				ConnState: func(_ net.Conn, st netpoll.ConnState) {
					if st == netpoll.StateClosed {
						closed.Add(1)
					}
				},
			}
			serveOn(t, s, l)
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			done, stop := watchdog(t, time.Minute)
			defer done()
			for range 3 {
				if err := heat(c, "hi"); err != nil {
					t.Fatal(err)
				}
			}
			if !await(stop, func() bool { return netpoll.HotWaiting(s) == 1 }) {
				t.Fatal("the connection never waited hot")
			}
			fds := openFDs(t) // the socket and its dup among them
			write(t, c, "end")
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Fatalf("client Read after the handler ended: %d, %v; want 0, EOF", n, err)
			}
			if !await(stop, func() bool {
				return closed.Load() == 1 && s.Stats().Conns == 0 && netpoll.HotConns(s) == 0 && openFDs(t) == fds-2
			}) {
				t.Fatalf("StateClosed %d, %+v, hot %d, fds %d (want %d)", closed.Load(), s.Stats(), netpoll.HotConns(s), openFDs(t), fds-2)
			}
			if st := readHot(t, g, s); st.entries != st.exits {
				t.Errorf("hot entries %d, exits %d", st.entries, st.exits)
			}
		})
	}
}
