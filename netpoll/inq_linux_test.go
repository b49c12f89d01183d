package netpoll_test

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// TestServeHotWatch: what a hot connection's own registration watches
// while its goroutine waits on the runtime's netpoller, as the kernel
// lists it (/proc/self/fdinfo of the poller's epoll fd), and its TCP_INQ
// option, under each wait, with TCP_INQ and as on a kernel that refuses
// it. With TCP_INQ the read ahead sees urgent data and a FIN behind what
// it read, and the watch is EPOLLRDHUP alone, which no segment's wakeup
// matches. Without, EPOLLPRI is watched too under the nested wait (every
// segment's wakeup matches it, and the runtime's netpoller then polls the
// poller's epoll fd for nothing), and nothing under wait=block. Errors and
// hang-ups come with any registration. Once the connection is cold again
// TCP_INQ is off: user code's recvmsg(2) gets only what it asked for.
func TestServeHotWatch(t *testing.T) {
	const flags = unix.EPOLLERR | unix.EPOLLHUP | unix.EPOLLONESHOT | unix.EPOLLET
	for _, tc := range []struct {
		wait  string
		inq   bool
		watch uint32
	}{
		{"nested", true, unix.EPOLLRDHUP},
		{"block", true, unix.EPOLLRDHUP},
		{"nested", false, unix.EPOLLPRI | unix.EPOLLRDHUP},
		{"block", false, 0},
	} {
		t.Run(fmt.Sprintf("wait=%s/inq=%v", tc.wait, tc.inq), func(t *testing.T) {
			if !tc.inq {
				t.Cleanup(netpoll.SetNoInq())
			}
			g, s, c, stop, _ := hotFixtureOf(t, "dispatch=hot,spin=off,wait="+tc.wait, echoHandler)
			heatAhead(t, s, c, stop)
			sc := serverSide(t, s, c)
			fd := netpoll.FD(sc)
			ev, ok := epollWatches(t, netpoll.PollerFD(g, 0))[fd]
			if !ok {
				t.Fatalf("fd %d is not registered with the poller", fd)
			}
			if got := ev &^ flags; got != tc.watch {
				t.Errorf("hot and waiting, the registration watches %#x (all: %#x), want %#x", got, ev, tc.watch)
			}
			want := 0
			if tc.inq {
				want = 1
			}
			if got := tcpInq(t, fd); got != want {
				t.Errorf("hot: TCP_INQ is %d, want %d", got, want)
			}
			echoN(t, c, "watch", 10) // the watch is armed again after each call
			if got := epollWatches(t, netpoll.PollerFD(g, 0))[fd] &^ flags; got != tc.watch {
				t.Errorf("after 10 hot echoes the registration watches %#x, want %#x", got, tc.watch)
			}
			goCold(t, s, stop)
			if got := tcpInq(t, fd); got != 0 {
				t.Errorf("cold: TCP_INQ is %d, want 0", got)
			}
			echoN(t, c, "cold", 1)
		})
	}
}

// TestServeHotInqRaw: user code that has a hot connection's fd (a
// RawConn's Control, here) finds TCP_INQ off from the start: it is
// cleared before the function runs (exposeRaw), so that code never sees
// the library's option. The connection stays hot, reads nothing ahead
// from then on, and a later hot period sets the option no more.
func TestServeHotInqRaw(t *testing.T) {
	inControl := make(chan int, 1)
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) == "raw" {
			rc, err := c.(syscall.Conn).SyscallConn()
			if err != nil {
				return err
			}
			v := -1
			if err := rc.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ) }); err != nil {
				return err
			}
			inControl <- v
		}
		_, err = c.Write(buf[:n])
		return err
	})
	_, s, c, stop, _ := hotFixtureOf(t, "dispatch=hot,spin=off", h)
	heatAhead(t, s, c, stop)
	fd := netpoll.FD(serverSide(t, s, c))
	if got := tcpInq(t, fd); got != 1 {
		t.Fatalf("hot: TCP_INQ is %d, want 1", got)
	}
	echoN(t, c, "raw", 1)
	if v := <-inControl; v != 0 {
		t.Errorf("inside Control TCP_INQ is %d, want 0: user code sees the library's option", v)
	}
	if got := tcpInq(t, fd); got != 0 {
		t.Errorf("after Control TCP_INQ is %d, want 0", got)
	}
	if netpoll.HotConns(s) != 1 {
		t.Fatalf("%d hot connections, want the one, still hot", netpoll.HotConns(s))
	}
	goCold(t, s, stop)
	_, aheads0, _ := aheadSkips(t, s)
	echoN(t, c, "after", 20) // hot again after two calls
	if netpoll.HotConns(s) != 1 {
		t.Fatalf("%d hot connections after 20 echoes, want 1", netpoll.HotConns(s))
	}
	if got := tcpInq(t, fd); got != 0 {
		t.Errorf("hot again: TCP_INQ is %d, want 0", got)
	}
	goCold(t, s, stop)
	if _, aheads, _ := aheadSkips(t, s); aheads != aheads0 {
		t.Errorf("%d reads ahead after user code had the fd, want none", aheads-aheads0)
	}
}

// tcpInq returns fd's TCP_INQ option.
func tcpInq(t *testing.T, fd int) int {
	t.Helper()
	v, err := unix.GetsockoptInt(fd, unix.SOL_TCP, unix.TCP_INQ)
	if err != nil {
		t.Fatalf("getsockopt(TCP_INQ): %v", err)
	}
	return v
}

// fileInq returns the TCP_INQ option of f's socket, through its RawConn:
// f.Fd would put the socket in blocking mode.
func fileInq(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	v := -1
	if err := rc.Control(func(fd uintptr) { v = tcpInq(t, int(fd)) }); err != nil {
		t.Fatal(err)
	}
	return v
}
