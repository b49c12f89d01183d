package netpoll_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// TestWaitRead: Conn.WaitRead parks until the peer writes, and returns at
// once, without parking, for what was queued before it with no edge since
// (the hazard that sank Go's CL 22031): data left by a Read that took the
// edge, a FIN, and a reset, which must still reach the next Read as a
// reset. The read deadline and Close end it with Read's errors; after a
// short Read it still waits, and the Read after it makes its syscall.
func TestWaitRead(t *testing.T) {
	// Cold reads: a hot Read never leaves the socket known drained
	// (hotread_linux.go), so there is no skip to see.
	eachNestedWaitWith(t, "hotread=off", func(t *testing.T, g *netpoll.Group) {
		l := listen(t, g, "tcp")
		done, expired := watchdog(t, time.Minute)
		defer done()
		waitRead := func(c net.Conn) <-chan error {
			res := make(chan error, 1)
			go func() { res <- c.(*netpoll.Conn).WaitRead() }()
			return res
		}
		// atOnce runs WaitRead where something is queued: nil, no park.
		atOnce := func(what string, c net.Conn) {
			t.Helper()
			before := netpoll.Counters(g).Total.ReadParks
			// A wait on the edge alone would park for good here.
			if err := awaitResult(t, waitRead(c), expired, "WaitRead with "+what); err != nil {
				t.Fatalf("%s: WaitRead = %v", what, err)
			}
			if parks := netpoll.Counters(g).Total.ReadParks - before; parks != 0 {
				t.Errorf("%s: WaitRead parked %d times; want none", what, parks)
			}
		}
		read := func(c net.Conn, want string) {
			t.Helper()
			b := make([]byte, 64)
			if n, err := c.Read(b); err != nil || string(b[:n]) != want {
				t.Fatalf("Read = %q, %v; want %q", b[:n], err, want)
			}
		}

		client, server := netClient(t, l)
		if n, err := server.Read(nil); n != 0 || err != nil {
			t.Fatalf("Read(nil) with nothing queued = %d, %v; want 0, nil at once, as package net", n, err)
		}
		res := waitRead(server)
		if !netpoll.AwaitReadState(server, "waiting", expired) {
			t.Fatal("WaitRead did not park with nothing queued")
		}
		client.Write([]byte("x"))
		if err := awaitResult(t, res, expired, "WaitRead"); err != nil {
			t.Fatalf("WaitRead after a write = %v", err)
		}
		read(server, "x")

		// Data left by a Read that consumed the edge: no edge will come.
		client.Write([]byte("abcdef"))
		if !await(expired, func() bool { return inq(t, server) == 6 }) {
			t.Fatal("the server never had 6 bytes queued")
		}
		if n, err := server.Read(make([]byte, 3)); n != 3 || err != nil {
			t.Fatalf("Read of 3 = %d, %v", n, err)
		}
		atOnce("3 bytes left", server)
		read(server, "def")

		// After a short Read (drained), a wait parks with no syscall
		// (a short skip); the Read after it makes its syscall and
		// reads what came.
		skips := netpoll.Counters(g).Total.ShortSkips
		res = waitRead(server)
		if !netpoll.AwaitReadState(server, "waiting", expired) {
			t.Fatal("WaitRead after a short Read did not park")
		}
		client.Write([]byte("gh"))
		if err := awaitResult(t, res, expired, "WaitRead"); err != nil {
			t.Fatalf("WaitRead after a short Read = %v", err)
		}
		if n := netpoll.Counters(g).Total.ShortSkips - skips; n != 1 {
			t.Errorf("WaitRead after a short Read: %d short skips; want 1 (no poll: the socket was known drained)", n)
		}
		read(server, "gh")

		// A FIN queued, on a conn that has not read (nothing known).
		client, server = netClient(t, l)
		client.(*net.TCPConn).CloseWrite()
		awaitPollBits(t, server, unix.POLLRDHUP, expired)
		atOnce("a FIN queued", server)
		if n, err := server.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("Read after the FIN = %d, %v; want io.EOF", n, err)
		}

		// A reset queued: poll leaves the error for the Read.
		client, server = netClient(t, l)
		client.(*net.TCPConn).SetLinger(0)
		client.Close()
		awaitPollBits(t, server, unix.POLLERR, expired)
		atOnce("a reset queued", server)
		if _, err := server.Read(make([]byte, 8)); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("Read after the reset = %v; want ECONNRESET (the wait must not consume it)", err)
		}

		// The read deadline and Close, while it waits.
		_, server = netClient(t, l)
		res = waitRead(server)
		if !netpoll.AwaitReadState(server, "waiting", expired) {
			t.Fatal("WaitRead did not park")
		}
		server.SetReadDeadline(time.Now().Add(-time.Second))
		wantOpError(t, "WaitRead past its deadline", awaitResult(t, res, expired, "WaitRead"), "read", os.ErrDeadlineExceeded)
		wantOpError(t, "WaitRead with its deadline past", server.(*netpoll.Conn).WaitRead(), "read", os.ErrDeadlineExceeded)
		server.SetReadDeadline(time.Time{})
		res = waitRead(server)
		if !netpoll.AwaitReadState(server, "waiting", expired) {
			t.Fatal("WaitRead did not park")
		}
		server.Close()
		wantOpError(t, "WaitRead ended by Close", awaitResult(t, res, expired, "WaitRead"), "read", net.ErrClosed)
	})
}

// awaitPollBits yields until poll(2) reports bits on c's socket.
func awaitPollBits(t *testing.T, c net.Conn, bits int16, expired <-chan struct{}) {
	t.Helper()
	ok := await(expired, func() bool {
		fds := []unix.PollFd{{Fd: int32(netpoll.FD(c)), Events: unix.POLLIN | unix.POLLRDHUP}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n == 1 && fds[0].Revents&bits != 0
	})
	if !ok {
		t.Fatalf("poll never reported %#x", bits)
	}
}

// TestReadyReaderPattern: the pattern of grpc-go's readyreader works on
// netpoll's Conn: SyscallConn().Read whose callback takes a buffer from a
// pool, reads, and on EAGAIN gives the buffer back and returns false. No
// buffer is held while the Read parks, each wait costs one EAGAIN, data
// queued before the call is read with no park, and the read deadline ends
// the wait.
func TestReadyReaderPattern(t *testing.T) {
	const msgs = 50
	eachNestedWait(t, func(t *testing.T, g *netpoll.Group) {
		client, server := netClient(t, listen(t, g, "tcp"))
		done, expired := watchdog(t, time.Minute)
		defer done()
		rc, err := server.(*netpoll.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		pool := sync.Pool{New: func() any { return make([]byte, 4096) }}
		var held, eagains atomic.Int64 // buffers out of the pool; callbacks that found nothing
		readReady := func() ([]byte, error) {
			var (
				buf  []byte
				n    int
				rerr error
			)
			err := rc.Read(func(fd uintptr) bool {
				b := pool.Get().([]byte)
				held.Add(1)
				n, rerr = unix.Read(int(fd), b)
				if rerr == unix.EAGAIN {
					held.Add(-1)
					pool.Put(b)
					eagains.Add(1)
					return false
				}
				buf = b
				return true
			})
			if err == nil {
				err = rerr
			}
			if err != nil {
				return nil, err
			}
			defer func() { held.Add(-1); pool.Put(buf) }()
			return append([]byte(nil), buf[:n]...), nil
		}
		type result struct {
			b   []byte
			err error
		}
		base := netpoll.Counters(g).Total
		for i := range msgs {
			res := make(chan result, 1)
			go func() { b, err := readReady(); res <- result{b, err} }()
			if !netpoll.AwaitReadState(server, "waiting", expired) {
				t.Fatalf("message %d: the raw Read did not park", i)
			}
			if h := held.Load(); h != 0 {
				t.Fatalf("message %d: %d buffers held while parked; want none", i, h)
			}
			want := []byte{byte(i), byte(i + 1), byte(i + 2)}
			client.Write(want)
			r := awaitResult(t, res, expired, "the raw Read")
			if r.err != nil || string(r.b) != string(want) {
				t.Fatalf("message %d: raw Read = %v, %v; want %v", i, r.b, r.err, want)
			}
		}
		// One EAGAIN a wait, and one more for each stale ready token
		// (mode=lt re-reports an fd until it is read: a report
		// after the wake and before the read leaves one).
		stale := netpoll.Counters(g).Total.ReadyTokens - base.ReadyTokens
		if n := uint64(eagains.Load()); n < msgs || n > msgs+stale {
			t.Errorf("%d callbacks found nothing for %d waits and %d stale tokens; want one a wait, and one a token at most", n, msgs, stale)
		}
		// Queued before the call: read with no park.
		client.Write([]byte("queued"))
		if !await(expired, func() bool { return inq(t, server) == 6 }) {
			t.Fatal("the server never had 6 bytes queued")
		}
		before, e0 := netpoll.Counters(g).Total.ReadParks, eagains.Load()
		if b, err := readReady(); err != nil || string(b) != "queued" {
			t.Fatalf("raw Read of queued data = %q, %v", b, err)
		}
		if parks, e := netpoll.Counters(g).Total.ReadParks-before, eagains.Load()-e0; parks != 0 || e != 0 {
			t.Errorf("raw Read of queued data: %d parks, %d EAGAINs; want none", parks, e)
		}
		// The read deadline ends the wait.
		server.SetReadDeadline(time.Now().Add(-time.Second))
		if _, err := readReady(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("raw Read past the deadline = %v; want os.ErrDeadlineExceeded", err)
		}
		if h := held.Load(); h != 0 {
			t.Errorf("%d buffers held at the end; want none", h)
		}
	})
}
