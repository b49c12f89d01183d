package netpoll_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Review tests for the TCP_INQ read ahead (a15ed80..d566ef0): each runs
// under dispatch=go or as on a kernel without TCP_INQ, where it passes,
// and with TCP_INQ, where it shows a defect.

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
func TestInqReviewHandlerReadUrgent(t *testing.T) {
	for _, dispatch := range []string{"go", "hot", "hot-block", "hot-noinq", "hot-block-noinq"} {
		t.Run(dispatch, func(t *testing.T) { inqReviewHandlerReadUrgent(t, dispatch) })
	}
}

func inqReviewHandlerReadUrgent(t *testing.T, dispatch string) {
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
	cfg, hot := "dispatch=hot", dispatch != "go"
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
	g := newGroup(t, cfgOf(t, cfg+",spin=off,shortread=on"))
	l := listen(t, g, "tcp")
	s := &netpoll.Server{Handler: h}
	serveOn(t, s, l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done, stop := watchdog(t, time.Minute)
	defer done()
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
	for range 2 { // the second call makes the connection busy: hot
		write(t, c, "hi")
		if r := next("hi"); r.s != "hi" || r.err != nil {
			t.Fatalf("first Reads: %q, %v", r.s, r.err)
		}
	}
	if hot && !await(stop, func() bool { return netpoll.HotWaiting(s) == 1 }) {
		t.Fatal("the connection never waited hot")
	}
	write(t, c, "block")
	if r := next("block"); r.s != "block" || r.err != nil {
		t.Fatalf("Read of block: %q, %v", r.s, r.err)
	}
	<-entered
	// While the handler runs, the peer queues the big request, the urgent
	// byte and "def"; all of it reaches the server before the handler
	// returns, so one wakeup of the runtime's covers it all.
	sc := serverSide(t, s, c)
	write(t, c, request)
	sendOOB(t, c, []byte("!"))
	write(t, c, "def")
	if !await(stop, func() bool { return outq(t, c) == 0 }) {
		t.Fatal("the peer's data was never all acked")
	}
	if !await(stop, func() bool {
		fds := []unix.PollFd{{Fd: int32(netpoll.FD(sc)), Events: unix.POLLIN | unix.POLLPRI}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n == 1 && fds[0].Revents&unix.POLLPRI != 0
	}) {
		t.Fatal("poll never reported the urgent data")
	}
	close(release)
	if r := next("the request"); r.s != "request" || r.err != nil {
		t.Fatalf("Read of the request: %q, %v", r.s, r.err)
	}
	// A bound only a hang reaches: "def" is queued already.
	select {
	case r := <-reads:
		if r.s != "def" || r.err != nil {
			t.Fatalf("after the request the handler read %q, %v; want %q", r.s, r.err, "def")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("dispatch=%s: the handler was never called for the \"def\" queued behind the urgent byte, behind the request: hot %d, waiting hot %d, sticky %#x",
			dispatch, netpoll.HotConns(s), netpoll.HotWaiting(s), netpoll.Sticky(sc))
	}
}
