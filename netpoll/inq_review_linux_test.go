package netpoll_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Review tests for the TCP_INQ read ahead (helper-29, of a15ed80..d566ef0).
// Each runs under dispatch=go (and, for the skip, as on a kernel without
// TCP_INQ: SetNoInq), where it passed, and hot with TCP_INQ, where it
// showed a defect, since fixed: the skip after a handler's own short read
// (hotWait.serve's counted) and the option seen by user code (dropInq).

// TestInqReviewHandlerReadUrgent: TCP_INQ tells the read ahead what it
// left behind, but the skip after a call also trusts a short Read of the
// handler's own, a read(2) that sees no count: when the read ahead fills
// its buffer, the handler's next Read reads the socket itself, and that
// read stops at the urgent mark (a short read: the direction is marked
// drained). Before TCP_INQ the watch had EPOLLPRI, and the poller made
// the urgent data sticky, which turned the skip off; with TCP_INQ the
// watch is EPOLLRDHUP alone, nothing is sticky, and the wait after the
// call skips its read and parks on the runtime's flag, which the wakeup
// that brought everything consumed: "def", queued behind the urgent byte,
// waits for a sweep (an hour here; 20-40 ms by default). Under wait=block
// it did not happen before either: without TCP_INQ a connection that
// reads ahead never skips there.
//
// The handler reads a request of aheadSize+3 bytes ("a"s, then "xyz"),
// with Reads of 64 KiB: under dispatch=hot the first takes the read
// ahead's full buffer and the second reads "xyz" from the socket; under
// dispatch=go the first reads all of it, stopping at the urgent mark.
//
// fin: the same with a FIN behind the request instead, which the
// handler's read(2) takes with "xyz": the next read finds EOF. When the
// review wrote it, the watch's EPOLLRDHUP was what turned the skip off
// there (ERR and HUP come with any arming, but a FIN reports neither);
// since the fix the wait does not trust that read at all.
func TestInqReviewHandlerReadUrgent(t *testing.T) {
	for _, end := range []string{"urgent", "fin"} {
		for _, dispatch := range []string{"go", "hot", "hot-block", "hot-noinq", "hot-block-noinq"} {
			t.Run(end+"/"+dispatch, func(t *testing.T) { inqReviewHandlerReadUrgent(t, dispatch, end) })
		}
	}
}

func inqReviewHandlerReadUrgent(t *testing.T, dispatch, end string) {
	t.Cleanup(netpoll.SetHotTick(time.Hour))
	aheadSize := netpoll.ReadAheadSize
	request := strings.Repeat("a", aheadSize) + "xyz"
	reads := make(chan reviewRead, 8)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64<<10)
		n, err := c.Read(buf)
		if err == nil && buf[0] == 'a' {
			// A request of the big kind: read all of it.
			got := append([]byte(nil), buf[:n]...)
			for err == nil && len(got) < len(request) {
				n, err = c.Read(buf)
				got = append(got, buf[:n]...)
			}
			if err == nil && string(got) != request {
				reads <- reviewRead{fmt.Sprintf("a request of %d bytes, not the %d sent", len(got), len(request)), nil}
				return nil
			}
			reads <- reviewRead{"request", err}
			return err
		}
		reads <- reviewRead{string(buf[:n]), err}
		if err == nil && string(buf[:n]) == "block" {
			entered <- struct{}{}
			<-release
		}
		return err
	})
	s, c, stop, next := reviewServe(t, dispatch, h, reads)
	reviewHeat(t, dispatch, s, c, stop, next)
	reviewBlock(t, c, next, entered)
	// While the handler runs, the peer queues the big request, the urgent
	// byte and "def"; all of it reaches the server before the handler
	// returns, so one wakeup of the runtime's covers it all.
	sc := serverSide(t, s, c)
	write(t, c, request)
	ev, want := int16(unix.POLLPRI), reviewRead{"def", nil}
	if end == "urgent" {
		sendOOB(t, c, []byte("!"))
		write(t, c, "def")
	} else {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		ev, want = unix.POLLRDHUP, reviewRead{"", io.EOF}
	}
	if !await(stop, func() bool { return outq(t, c) == 0 }) {
		t.Fatal("the peer's data was never all acked")
	}
	if !await(stop, func() bool {
		fds := []unix.PollFd{{Fd: int32(netpoll.FD(sc)), Events: unix.POLLIN | ev}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n == 1 && fds[0].Revents&ev != 0
	}) {
		t.Fatalf("poll never reported %#x", ev)
	}
	close(release)
	if r := next("the request"); r.s != "request" || r.err != nil {
		t.Fatalf("Read of the request: %q, %v", r.s, r.err)
	}
	// A bound only a hang reaches: what follows is queued already.
	select {
	case r := <-reads:
		if r != want {
			t.Fatalf("after the request the handler read %q, %v; want %q, %v", r.s, r.err, want.s, want.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("dispatch=%s: the handler was never called for what is queued behind the request (%s): hot %d, waiting hot %d, sticky %#x",
			dispatch, end, netpoll.HotConns(s), netpoll.HotWaiting(s), netpoll.Sticky(sc))
	}
}

// TestInqReviewUserFd: TCP_INQ is the library's, set while a connection
// is hot, and user code that has the fd must not see it, nor lose an
// option of its own to it, as with package net (and dispatch=go):
//   - set: the handler of a hot call sets TCP_INQ itself (Control) for
//     its own recvmsg(2)s; the owner's clearInq, after that call, turned
//     it off under it: the next call found it 0.
//   - recvmsg: the handler's first RawConn.Read on a hot connection, a
//     recvmsg(2) with a control buffer, got a TCP_CM_INQ message it
//     never asked for.
//   - file-close: the handler takes File and closes the Conn; clearInq
//     then found it closing and left TCP_INQ on, and the socket lived
//     on in the file (a hand-over to another process, say) with it set.
//
// exposeRaw now clears the option before user code has the fd (dropInq).
func TestInqReviewUserFd(t *testing.T) {
	for _, dispatch := range []string{"go", "hot"} {
		for _, step := range []string{"set", "recvmsg", "file-close"} {
			t.Run(dispatch+"/"+step, func(t *testing.T) { inqReviewUserFd(t, dispatch, step) })
		}
	}
}

func inqReviewUserFd(t *testing.T, dispatch, step string) {
	files := make(chan *os.File, 1)
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			return err
		}
		var reply string
		switch cmd := string(buf[:n]); cmd {
		case "set", "get":
			var v int
			var serr error
			if err := rc.Control(func(fd uintptr) {
				if cmd == "set" {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ, 1)
					v = 1
				} else {
					v, serr = unix.GetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ)
				}
			}); err != nil {
				return err
			}
			if serr != nil {
				return serr
			}
			reply = fmt.Sprintf("inq=%d", v)
		case "raw":
			if _, err := c.Write([]byte("go")); err != nil {
				return err
			}
			oob := make([]byte, 64)
			var rn, oobn int
			var rerr error
			if err := rc.Read(func(fd uintptr) bool {
				rn, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
				return rerr != unix.EAGAIN
			}); err != nil {
				return err
			}
			if rerr != nil {
				return rerr
			}
			reply = fmt.Sprintf("%s/oob=%d", buf[:rn], oobn)
		case "file":
			f, err := c.(*netpoll.Conn).File()
			if err != nil {
				return err
			}
			files <- f
			return c.Close()
		default:
			reply = cmd
		}
		_, err = c.Write([]byte(reply))
		return err
	})
	_, s, c, stop, closed := hotFixtureOf(t, "dispatch="+dispatch+",spin=off", h)
	if dispatch == "hot" {
		heatAhead(t, s, c, stop)
	} else {
		echoN(t, c, "heat", 3)
	}
	ask := func(msg string) string {
		t.Helper()
		write(t, c, msg)
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err != nil {
			t.Fatalf("reply to %q: %v", msg, err)
		}
		return string(b[:n])
	}
	switch step {
	case "set":
		if got := ask("set"); got != "inq=1" {
			t.Fatalf("set: %q", got)
		}
		if got := ask("get"); got != "inq=1" {
			t.Errorf("the handler set TCP_INQ in one call and found %q in the next: the library turned the user's option off", got)
		}
	case "recvmsg":
		if got := ask("raw"); got != "go" {
			t.Fatalf("raw: %q", got)
		}
		write(t, c, "data")
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b[:n]); got != "data/oob=0" {
			t.Errorf("the handler's recvmsg with a control buffer returned %q, want %q: control bytes it never asked for", got, "data/oob=0")
		}
	case "file-close":
		write(t, c, "file")
		var f *os.File
		select {
		case f = <-files:
		case <-stop:
			t.Fatal("the handler never took the file")
		}
		defer f.Close()
		// The handler closed the Conn, and the Server is done with it
		// (StateClosed), before the file's socket is looked at.
		if !await(stop, func() bool { return closed.Load() == 1 }) {
			t.Fatal("the connection never closed")
		}
		if v := fileInq(t, f); v != 0 {
			t.Errorf("the file taken from a hot connection, its Conn closed, has TCP_INQ %d, want 0", v)
		}
	}
}
