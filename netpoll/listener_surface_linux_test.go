package netpoll_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// The Listener's surface beyond net.Listener, as *net.TCPListener has it:
// SetDeadline, SyscallConn and File, in every Sharing mode.

// surfacePollers is the group size of the shared-listener cases.
const surfacePollers = 3

// listenerCase is a listener to test: a group configuration, its pollers
// and sharing (NETPOLL's spelling: wakeall is not a Config.Sharing), and a
// network.
type listenerCase struct {
	name    string
	cfg     netpoll.Config
	pollers int
	sharing string
	network string
}

// listenerCases covers every sharing mode with tcp, and unix where the mode
// allows it (not reuseport); single also in each mode, whose listeners park
// on their own registration.
func listenerCases(t testing.TB) []listenerCase {
	var cases []listenerCase
	for _, network := range []string{"tcp", "unix"} {
		for _, mode := range modes {
			cases = append(cases, listenerCase{
				name:    fmt.Sprintf("sharing=single/mode=%s/net=%s", mode, network),
				cfg:     cfgOf(t, "mode="+mode),
				pollers: 1,
				sharing: "single",
				network: network,
			})
		}
		for _, sh := range []string{"exclusive", "wakeall", "reuseport"} {
			if sh == "reuseport" && network == "unix" {
				continue // refused by Listen: see TestReusePortUnix
			}
			cases = append(cases, listenerCase{
				name:    fmt.Sprintf("sharing=%s/net=%s", sh, network),
				cfg:     cfgOf(t, fmt.Sprintf("pollers=%d,sharing=%s", surfacePollers, sh)),
				pollers: surfacePollers,
				sharing: sh,
				network: network,
			})
		}
	}
	return cases
}

// sockets is how many listening sockets a listener of tt has.
func (tt listenerCase) sockets() int {
	if tt.sharing == "reuseport" {
		return tt.pollers
	}
	return 1
}

// surfaceListener listens on a fresh address for tt, as a *netpoll.Listener.
func surfaceListener(t *testing.T, g *netpoll.Group, network string) *netpoll.Listener {
	t.Helper()
	l, ok := listen(t, g, network).(*netpoll.Listener)
	if !ok {
		t.Fatalf("Listen returned %T, want *netpoll.Listener", l)
	}
	return l
}

// wantDeadlineError checks that err is Accept failing on its deadline: a
// *net.OpError for accept wrapping os.ErrDeadlineExceeded, and a net.Error
// whose Timeout is true.
func wantDeadlineError(t *testing.T, what string, err error) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "accept" || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: err = %v (%T), want an accept *net.OpError wrapping os.ErrDeadlineExceeded", what, err, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: err = %v, want a net.Error with Timeout() true", what, err)
	}
}

// dialSend dials l with package net and sends i as one byte.
func dialSend(t *testing.T, l net.Listener, i int) net.Conn {
	t.Helper()
	c, err := net.Dial(l.Addr().Network(), l.Addr().String())
	if err != nil {
		t.Fatalf("dial %d: %v", i, err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte{byte(i)}); err != nil {
		t.Fatalf("write to connection %d: %v", i, err)
	}
	return c
}

// readIndex reads the byte a dialSend client sent on an accepted conn.
func readIndex(t *testing.T, c net.Conn) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a watchdog, not a timing
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading the client's index: %v", err)
	}
	return int(b[0])
}

// TestListenerDeadlinePast: with a deadline that has passed, Accept fails
// at once, even with connections waiting (an acceptor of a shared listener
// may hold one); cleared, Accept returns every connection dialed meanwhile,
// each once, with its data.
func TestListenerDeadlinePast(t *testing.T) {
	const conns = surfacePollers + 2 // more than the acceptors can hold
	for _, tt := range listenerCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := surfaceListener(t, g, tt.network)
			if err := l.SetDeadline(time.Now().Add(-time.Second)); err != nil {
				t.Fatalf("SetDeadline: %v", err)
			}
			_, err := l.Accept()
			wantDeadlineError(t, "Accept with a past deadline", err)
			for i := range conns {
				dialSend(t, l, i)
				_, err := l.Accept()
				wantDeadlineError(t, fmt.Sprintf("Accept with a past deadline and %d connections waiting", i+1), err)
			}
			if err := l.SetDeadline(time.Time{}); err != nil {
				t.Fatalf("SetDeadline(zero): %v", err)
			}
			done, expired := watchdog(t, time.Minute)
			defer done()
			accepted := make(chan net.Conn, conns)
			go func() {
				for range conns {
					c, err := l.Accept()
					if err != nil {
						t.Errorf("Accept after clearing the deadline: %v", err)
						return
					}
					accepted <- c
				}
			}()
			seen := make([]bool, conns)
			for range conns {
				c := awaitResult(t, accepted, expired, "Accept of a connection dialed while the deadline had passed")
				defer c.Close()
				if i := readIndex(t, c); i >= conns || seen[i] {
					t.Fatalf("accepted a connection that sent %d; seen so far %v", i, seen)
				} else {
					seen[i] = true
				}
			}
		})
	}
}

// TestListenerDeadlineWakesAccept: a deadline set, from another goroutine,
// while Accept is blocked applies at once: Accept fails with the deadline
// error. It holds with no deadline before and with a far one.
func TestListenerDeadlineWakesAccept(t *testing.T) {
	for _, tt := range listenerCases(t) {
		for _, before := range []time.Duration{0, time.Hour} {
			t.Run(fmt.Sprintf("%s/before=%v", tt.name, before), func(t *testing.T) {
				g := newGroup(t, tt.cfg)
				l := surfaceListener(t, g, tt.network)
				if before != 0 {
					l.SetDeadline(time.Now().Add(before))
				}
				done, expired := watchdog(t, time.Minute)
				defer done()
				res := make(chan error, 1)
				go func() {
					c, err := l.Accept()
					if c != nil {
						c.Close()
					}
					res <- err
				}()
				if !awaitBlockedInAccept(expired) {
					t.Fatal("Accept never blocked")
				}
				set := make(chan error, 1)
				go func() { set <- l.SetDeadline(time.Now().Add(-time.Second)) }()
				if err := awaitResult(t, set, expired, "SetDeadline"); err != nil {
					t.Fatalf("SetDeadline: %v", err)
				}
				wantDeadlineError(t, "blocked Accept after SetDeadline", awaitResult(t, res, expired, "blocked Accept after SetDeadline in the past"))
			})
		}
	}
}

// awaitBlockedInAccept yields until some goroutine is blocked (in a
// channel receive or a select) inside Listener.Accept, or stop closes. A
// shared listener's Accept waits in a select, with no descriptor state to
// watch; its goroutine's stack is what shows it waiting.
func awaitBlockedInAccept(stop <-chan struct{}) bool {
	buf := make([]byte, 1<<20)
	return await(stop, func() bool {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			blocked := strings.Contains(head, "[select") || strings.Contains(head, "[chan receive") || strings.Contains(head, "[IO wait") // IO wait: wait=inline
			if blocked && strings.Contains(g, "netpoll.(*Listener).Accept(") {
				return true
			}
		}
		return false
	})
}

// TestListenerDeadlineFuture: with a deadline 50ms ahead and no dialer,
// Accept returns the deadline error (when is not checked).
func TestListenerDeadlineFuture(t *testing.T) {
	for _, tt := range listenerCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := surfaceListener(t, g, tt.network)
			done, expired := watchdog(t, time.Minute)
			defer done()
			if err := l.SetDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
				t.Fatalf("SetDeadline: %v", err)
			}
			res := make(chan error, 1)
			go func() {
				_, err := l.Accept()
				res <- err
			}()
			wantDeadlineError(t, "Accept with a 50ms deadline", awaitResult(t, res, expired, "Accept with a 50ms deadline"))
			// Cleared, the listener serves again.
			l.SetDeadline(time.Time{})
			dialSend(t, l, 7)
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					t.Errorf("Accept after clearing the deadline: %v", err)
				}
				accepted <- c
			}()
			c := awaitResult(t, accepted, expired, "Accept after clearing the deadline")
			if c == nil {
				return
			}
			defer c.Close()
			if i := readIndex(t, c); i != 7 {
				t.Errorf("accepted connection read %d, want 7", i)
			}
		})
	}
}

// TestListenerSetDeadlineAfterClose: SetDeadline on a closed listener is a
// set *net.OpError wrapping net.ErrClosed.
func TestListenerSetDeadlineAfterClose(t *testing.T) {
	for _, tt := range listenerCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := surfaceListener(t, g, tt.network)
			l.Close()
			wantOpError(t, "SetDeadline after Close", l.SetDeadline(time.Now()), "set", net.ErrClosed)
			wantOpError(t, "SetDeadline(zero) after Close", l.SetDeadline(time.Time{}), "set", net.ErrClosed)
		})
	}
}

// TestListenerDeadlineEndsBackoff: Accept (Single) backing off while the
// process is out of fds ends with the deadline error when a deadline that
// has passed is set, instead of backing off on.
func TestListenerDeadlineEndsBackoff(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l := surfaceListener(t, g, "tcp")
	done, expired := watchdog(t, time.Minute)
	defer done()
	res := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if c != nil {
			c.Close()
		}
		res <- err
	}()
	if !netpoll.AwaitReadState(l, "waiting", expired) {
		t.Fatal("Accept never parked")
	}
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)

	// Out of fds, as in TestFaultAcceptOutOfFDs: until free, nothing here
	// may open one.
	free := exhaustFDs(t, sock, 0)
	defer free()
	before := netpoll.Counters(g).Total.AcceptBackoffs
	sa := &unix.SockaddrInet4{Port: l.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Connect(sock, sa); err != nil {
		free()
		t.Fatalf("connect: %v", err)
	}
	// Two back-offs: the second is under way, 10ms long, and later ones
	// grow to a second; without the deadline they would go on for good.
	if !await(expired, func() bool { return netpoll.Counters(g).Total.AcceptBackoffs >= before+2 }) {
		free()
		t.Fatal("Accept never backed off: the process did not run out of fds?")
	}
	if err := l.SetDeadline(time.Now().Add(-time.Second)); err != nil {
		free()
		t.Fatalf("SetDeadline: %v", err)
	}
	err = awaitResult(t, res, expired, "Accept backing off after a past deadline was set")
	free()
	wantDeadlineError(t, "Accept backing off after a past deadline was set", err)

	// The connection is still queued: the next Accept gets it.
	l.SetDeadline(time.Time{})
	go func() {
		c, err := l.Accept()
		if c != nil {
			c.Close()
		}
		res <- err
	}()
	if err := awaitResult(t, res, expired, "Accept after the back-off"); err != nil {
		t.Fatalf("Accept after the back-off: %v", err)
	}
}

// listenerFDs returns the fds Control runs f on, checking that each is a
// listening socket (SO_ACCEPTCONN 1).
func listenerFDs(t *testing.T, l *netpoll.Listener) []int {
	t.Helper()
	rc, err := l.SyscallConn()
	if err != nil {
		t.Fatalf("SyscallConn: %v", err)
	}
	var fds []int
	err = rc.Control(func(fd uintptr) {
		fds = append(fds, int(fd))
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
			t.Errorf("fd %d: SO_ACCEPTCONN = %d, %v; want 1", fd, v, err)
		}
	})
	if err != nil {
		t.Fatalf("Control: %v", err)
	}
	return fds
}

// TestListenerSyscallConn: Control runs on every distinct listening socket
// (one, or one per poller with ReusePort). With Single, Read parks until a
// connection is pending and its f can accept it; shared listeners refuse
// Read and Write. After Close every method fails with net.ErrClosed.
func TestListenerSyscallConn(t *testing.T) {
	for _, tt := range listenerCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := surfaceListener(t, g, tt.network)
			fds := listenerFDs(t, l)
			distinct := map[int]bool{}
			for _, fd := range fds {
				distinct[fd] = true
			}
			if len(fds) != tt.sockets() || len(distinct) != len(fds) {
				t.Fatalf("Control ran on fds %v, want %d distinct", fds, tt.sockets())
			}
			rc, err := l.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			noop := func(uintptr) bool { return true }
			if tt.sharing == "single" {
				rawAccept(t, l, rc)
				if err := rc.Write(noop); err != nil {
					t.Errorf("raw Write whose f is done: %v", err)
				}
			} else {
				for op, err := range map[string]error{"raw-read": rc.Read(noop), "raw-write": rc.Write(noop)} {
					wantOpError(t, op+" on a shared listener", err, op, netpoll.ErrSharedListener)
					if !errors.Is(err, errors.ErrUnsupported) {
						t.Errorf("%s on a shared listener: %v, want it to wrap errors.ErrUnsupported", op, err)
					}
				}
			}
			l.Close()
			wantOpError(t, "Control after Close", rc.Control(func(uintptr) { t.Error("Control ran f after Close") }), "raw-control", net.ErrClosed)
			if tt.sharing == "single" {
				wantOpError(t, "raw Read after Close", rc.Read(noop), "raw-read", net.ErrClosed)
				wantOpError(t, "raw Write after Close", rc.Write(noop), "raw-write", net.ErrClosed)
			}
		})
	}
}

// rawAccept runs a raw Read on a Single listener whose f accepts with
// accept4: the first call finds no connection and parks, a dial wakes it,
// and f accepts the dialed connection.
func rawAccept(t *testing.T, l *netpoll.Listener, rc syscall.RawConn) {
	t.Helper()
	done, expired := watchdog(t, time.Minute)
	defer done()
	var calls atomic.Int32
	accepted := -1
	res := make(chan error, 1)
	go func() {
		res <- rc.Read(func(fd uintptr) bool {
			calls.Add(1)
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_CLOEXEC)
			if err == unix.EAGAIN {
				return false
			}
			if err != nil {
				t.Errorf("accept4 in raw Read: %v", err)
			}
			accepted = nfd
			return true
		})
	}()
	if !netpoll.AwaitReadState(l, "waiting", expired) {
		t.Fatal("raw Read never parked")
	}
	dialSend(t, l, 42)
	if err := awaitResult(t, res, expired, "raw Read after a dial"); err != nil {
		t.Fatalf("raw Read: %v", err)
	}
	if n := calls.Load(); n < 2 {
		t.Errorf("raw Read called f %d times, want a call that parked and one after the dial", n)
	}
	if accepted < 0 {
		t.Fatal("raw Read's f accepted nothing")
	}
	defer unix.Close(accepted)
	b := make([]byte, 1)
	if n, err := unix.Read(accepted, b); n != 1 || b[0] != 42 { // blocking: the byte was sent before
		t.Errorf("read on the raw-accepted fd: %d %v %v, want the client's byte 42", n, b, err)
	}
}

// TestListenerFile: File is a dup with package net's name. Closed, it
// leaves the listener serving; the listener closed, the file still
// listens and net.FileListener accepts on it. No fd is left over. A
// ReusePort listener with several sockets refuses File; with one it works.
func TestListenerFile(t *testing.T) {
	cases := listenerCases(t)
	cases = append(cases, listenerCase{
		name:    "sharing=reuseport/pollers=1/net=tcp",
		cfg:     netpoll.Config{Pollers: 1, Sharing: netpoll.ReusePort},
		pollers: 1,
		sharing: "reuseport",
		network: "tcp",
	})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			goroutines, fds := runtime.NumGoroutine(), countFDs(t)
			g, err := netpoll.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			// An abstract unix address: it stays bound while the file
			// holds the socket after the listener's Close, which would
			// unlink a path.
			addr := "127.0.0.1:0"
			if tt.network == "unix" {
				addr = fmt.Sprintf("@netpoll-file-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
			}
			l, err := g.Listen(context.Background(), tt.network, addr)
			if err != nil {
				t.Fatal(err)
			}
			if tt.sockets() > 1 {
				_, err := l.File()
				wantOpError(t, "File of a reuseport listener with several sockets", err, "file", netpoll.ErrSharedListener)
				l.Close()
				return
			}
			lfd := listenerFDs(t, l)[0]

			f, err := l.File()
			if err != nil {
				t.Fatalf("File: %v", err)
			}
			if want := tt.network + ":" + l.Addr().String() + "->"; f.Name() != want {
				t.Errorf("File name %q, want %q", f.Name(), want)
			}
			ffd := fileFD(t, f)
			if ffd == lfd {
				t.Fatalf("File's fd %d is the listener's", ffd)
			}
			if v, err := unix.GetsockoptInt(ffd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || v != 1 {
				t.Errorf("File's fd: SO_ACCEPTCONN = %d, %v; want 1", v, err)
			}
			if err := f.Close(); err != nil {
				t.Fatalf("closing the file: %v", err)
			}
			client, server := stdPipe(t, l)
			if _, err := client.Write([]byte{9}); err != nil {
				t.Fatal(err)
			}
			if i := readIndex(t, server); i != 9 {
				t.Fatalf("after the file was closed, the listener's connection read %d, want 9", i)
			}
			client.Close()
			server.Close()

			// The listener closed, a file taken before still listens. (Not
			// while the listener is open: a shared listener's acceptors
			// would race net's Accept for the connection.)
			f, err = l.File()
			if err != nil {
				t.Fatalf("File: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_, err = l.File()
			wantOpError(t, "File after Close", err, "file", net.ErrClosed)
			fl, err := net.FileListener(f)
			f.Close()
			if err != nil {
				t.Fatalf("net.FileListener: %v", err)
			}
			c := dialSend(t, fl, 5)
			sc, err := fl.Accept()
			if err != nil {
				t.Fatalf("Accept on net.FileListener: %v", err)
			}
			if i := readIndex(t, sc); i != 5 {
				t.Errorf("connection accepted by net.FileListener read %d, want 5", i)
			}
			sc.Close()
			c.Close()
			fl.Close()

			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			awaitGoroutines(t, goroutines)
			if n := countFDs(t); n != fds {
				t.Errorf("%d fds open at the end, %d before", n, fds)
			}
		})
	}
}

// fileFD returns f's fd without Fd, which would put the socket, shared
// with the listener, in blocking mode.
func fileFD(t *testing.T, f *os.File) int {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		t.Fatal(err)
	}
	return fd
}
