package netpoll_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// shortPath is one kernel path on which a stream read stops short while
// something is still pending (DESIGN.md, "Short reads"): send queues it from
// the peer's side, want says what the two reads that follow must return.
type shortPath struct {
	name    string
	network string
	queued  int                                 // if the peer is gone: bytes the server must have queued before it reads (else all the peer sent, acked)
	sticky  uint32                              // event bits the poller must have kept first (mode=et); 0: none
	setup   func(t *testing.T, server net.Conn) // on the server's fd, before the peer sends
	send    func(t *testing.T, peer net.Conn)   // from the peer (a package net conn)
	second  func(t *testing.T, n int, err error, b []byte)
}

func wantData(want string) func(t *testing.T, n int, err error, b []byte) {
	return func(t *testing.T, n int, err error, b []byte) {
		t.Helper()
		if err != nil || string(b[:n]) != want {
			t.Fatalf("second Read = %q, %v; want %q", b[:n], err, want)
		}
	}
}

func wantErr(target error) func(t *testing.T, n int, err error, b []byte) {
	return func(t *testing.T, n int, err error, b []byte) {
		t.Helper()
		if n != 0 || !errorsIs(err, target) {
			t.Fatalf("second Read = %q, %v; want %v", b[:n], err, target)
		}
	}
}

// sendOOB sends b with MSG_OOB on a package net conn.
func sendOOB(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Sendto(int(fd), b, unix.MSG_OOB, nil) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("send MSG_OOB: %v", serr)
	}
}

// sendAroundOOB sends "abc", the urgent byte "X" and "def".
func sendAroundOOB(t *testing.T, p net.Conn) {
	write(t, p, "abc")
	sendOOB(t, p, []byte("X"))
	write(t, p, "def")
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

var shortPaths = []shortPath{
	{
		name: "tcp urgent mark", network: "tcp", sticky: unix.EPOLLPRI,
		send:   sendAroundOOB,
		second: wantData("def"), // the urgent byte is out of band
	},
	{
		name: "tcp urgent mark inline", network: "tcp", sticky: unix.EPOLLPRI,
		setup: func(t *testing.T, s net.Conn) {
			if err := unix.SetsockoptInt(netpoll.FD(s), unix.SOL_SOCKET, unix.SO_OOBINLINE, 1); err != nil {
				t.Fatal(err)
			}
		},
		send:   sendAroundOOB,
		second: wantData("Xdef"),
	},
	{
		name: "tcp end of input", network: "tcp", sticky: unix.EPOLLRDHUP,
		send: func(t *testing.T, p net.Conn) {
			write(t, p, "abc")
			if err := p.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
		},
		second: wantErr(io.EOF),
	},
	{
		name: "tcp reset", network: "tcp", queued: 3, sticky: unix.EPOLLERR,
		send: func(t *testing.T, p net.Conn) {
			write(t, p, "abc")
			p.(*net.TCPConn).SetLinger(0)
			p.Close()
		},
		second: wantErr(syscall.ECONNRESET),
	},
	{
		name: "unix message with fds", network: "unix",
		send: func(t *testing.T, p net.Conn) {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, _, err := p.(*net.UnixConn).WriteMsgUnix([]byte("abc"), unix.UnixRights(int(f.Fd())), nil); err != nil {
				t.Fatal(err)
			}
			write(t, p, "def")
		},
		second: wantData("def"),
	},
	{
		name: "unix urgent byte", network: "unix", sticky: unix.EPOLLPRI,
		send:   sendAroundOOB,
		second: wantData("def"),
	},
	{
		name: "unix end of input", network: "unix", sticky: unix.EPOLLRDHUP,
		send: func(t *testing.T, p net.Conn) {
			write(t, p, "abc")
			if err := p.(*net.UnixConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
		},
		second: wantErr(io.EOF),
	},
}

// TestShortReadPending queues, for each mode and each path on which the
// kernel ends a read short while something is still pending, the data, EOF
// or error before the server reads, and shows that the Read after the short
// one returns it with no new traffic: it does not park on the skip. In
// mode=et the test waits until the poller has delivered the edge and kept
// its sticky bits, so the short read consumes the only edge that will
// ever come (the case #8891 hung on). Under wait=inline nobody polls
// while nobody waits: the edge stays in epoll's ready list, no sticky bit
// is kept, and the second Read's park polls it.
func TestShortReadPending(t *testing.T) {
	for _, wait := range nestedWaits {
		for _, mode := range modes {
			for _, p := range shortPaths {
				t.Run(fmt.Sprintf("%s/%s/%s", wait, mode, p.name), func(t *testing.T) {
					shortReadPending(t, mode, wait, p)
				})
			}
		}
	}
}

// shortReadPending runs p on a group of mode and wait, with short reads on.
func shortReadPending(t *testing.T, mode, wait string, p shortPath) {
	g := newGroup(t, cfgOf(t, "mode="+mode+",wait="+wait+",shortread=on"))
	peer, server := stdPipeTo(t, g, p.network)
	done, expired := watchdog(t, time.Minute)
	defer done()
	if p.setup != nil {
		p.setup(t, server)
	}
	p.send(t, peer)
	// Everything the peer sent must be queued at the server
	// before it reads: a unix send queues it, a TCP peer's
	// send queue empties once the server acked it all
	// (SIOCINQ would not do: it stops at an urgent mark).
	if p.queued > 0 {
		if !await(expired, func() bool { return inq(t, server) >= p.queued }) {
			t.Fatalf("the server never had %d bytes queued", p.queued)
		}
	} else if p.network == "tcp" && !await(expired, func() bool { return outq(t, peer) == 0 }) {
		t.Fatal("the peer's data was never all acked")
	}
	if wait == "inline" {
		// Nothing to wait for: the edge waits in epoll.
	} else if mode != "oneshot" && !netpoll.AwaitReadState(server, "ready", expired) {
		t.Fatal("the poller never delivered the edge")
	} else if mode == "et" && !await(expired, func() bool { return netpoll.Sticky(server)&p.sticky == p.sticky }) {
		t.Fatalf("the poller never kept sticky bits %#x (has %#x)", p.sticky, netpoll.Sticky(server))
	}
	b := make([]byte, 64)
	n, err := server.Read(b)
	if err != nil || string(b[:n]) != "abc" {
		t.Fatalf("first Read = %q, %v; want the short %q", b[:n], err, "abc")
	}
	// A lost wake would park the second Read for good: the
	// deadline only turns that hang into a failure.
	server.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err = server.Read(b)
	if errorsIs(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second Read parked with something pending (sticky %#x, stats %+v)", netpoll.Sticky(server), netpoll.Counters(g).Total)
	}
	p.second(t, n, err, b)
}

// stdPipeTo returns a package net peer and a server conn on g, over network.
func stdPipeTo(t *testing.T, g *netpoll.Group, network string) (peer, server net.Conn) {
	t.Helper()
	return stdPipe(t, listen(t, g, network))
}

// inq is how many bytes the socket of c has queued to read (SIOCINQ), read
// on the fd directly: RawConn would turn skipping off.
func inq(t *testing.T, c net.Conn) int {
	n, err := unix.IoctlGetInt(netpoll.FD(c), unix.SIOCINQ)
	if err != nil {
		t.Fatalf("SIOCINQ: %v", err)
	}
	return n
}

// outq is how many bytes a package net TCP conn has sent and not had acked.
func outq(t *testing.T, c net.Conn) int {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatalf("SIOCOUTQ: %v", ierr)
	}
	return n
}

// TestShortReadSkips counts the skips of a ping-pong: every Read that
// follows a short one goes to wait without a syscall (ShortSkips counts it
// whether it then parks or finds an edge), none with shortread=off, and none
// once user code has had the fd (RawConn) or a unix socket passes
// credentials (every recvmsg then reports MSG_CTRUNC).
func TestShortReadSkips(t *testing.T) {
	const rounds = 300
	for _, network := range []string{"tcp", "unix"} {
		for _, tc := range []struct {
			name      string
			shortread string // the NETPOLL shortread value
			prepare   func(t *testing.T, server net.Conn)
			wantSkips uint64
		}{
			// rounds data reads plus the EOF read, each but the first after
			// a short read; the EOF read skips unless the peer's FIN (its
			// sticky EPOLLRDHUP) got there first.
			{"on", "on", nil, rounds},
			{"default", "default", nil, rounds},
			{"off", "off", nil, 0},
			{"rawconn", "on", func(t *testing.T, s net.Conn) {
				rc, err := s.(syscall.Conn).SyscallConn()
				if err != nil {
					t.Fatal(err)
				}
				rc.Control(func(uintptr) {})
			}, 0},
			{"passcred", "on", func(t *testing.T, s net.Conn) {
				if network != "unix" {
					return
				}
				if err := unix.SetsockoptInt(netpoll.FD(s), unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
					t.Fatal(err)
				}
			}, 0},
		} {
			if tc.name == "passcred" && network != "unix" {
				continue
			}
			t.Run(network+"/"+tc.name, func(t *testing.T) {
				// Cold reads: a hot Read never skips (hotread_linux.go).
				g := newGroup(t, cfgOf(t, "shortread="+tc.shortread+",hotread=off"))
				peer, server := stdPipeTo(t, g, network)
				if tc.prepare != nil {
					tc.prepare(t, server)
				}
				done, expired := watchdog(t, time.Minute)
				defer done()
				errc := make(chan error, 1)
				go func() { // echo with a 4 KiB buffer: every read is short
					b := make([]byte, 4096)
					for {
						n, err := server.Read(b)
						if err == io.EOF {
							errc <- nil
							return
						}
						if err != nil {
							errc <- err
							return
						}
						if _, err := server.Write(b[:n]); err != nil {
							errc <- err
							return
						}
					}
				}()
				msg := bytes.Repeat([]byte("m"), 64)
				got := make([]byte, 64)
				for i := range rounds {
					msg[0] = byte(i)
					if _, err := peer.Write(msg); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, msg) {
						t.Fatalf("round %d: echo %q, %v", i, got, err)
					}
				}
				closeWrite(t, peer)
				select {
				case err := <-errc:
					if err != nil {
						t.Fatal(err)
					}
				case <-expired:
					t.Fatal("the echo goroutine never saw EOF")
				}
				st := netpoll.Counters(g).Total
				if st.ShortSkips != tc.wantSkips && (tc.wantSkips == 0 || st.ShortSkips != tc.wantSkips-1 || netpoll.Sticky(server)&unix.EPOLLRDHUP == 0) {
					t.Errorf("ShortSkips = %d, want %d (EAGAIN %d, parks %d, sticky %#x)", st.ShortSkips, tc.wantSkips, st.EAGAIN, st.ReadParks, netpoll.Sticky(server))
				}
			})
		}
	}
}

func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// TestShortWrite fills the send buffer: the first write returns short, the
// next one waits for EPOLLOUT without the write that would return EAGAIN,
// and once the peer reads, everything arrives intact. Then the same with the
// peer resetting the connection while the writer is parked: the Write
// returns the error, it does not hang.
func TestShortWrite(t *testing.T) {
	const size = 16 << 20
	for _, mode := range modes {
		for _, reset := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reset=%v", mode, reset), func(t *testing.T) {
				g := newGroup(t, cfgOf(t, "mode="+mode+",shortread=on"))
				peer, server := stdPipeTo(t, g, "tcp")
				done, expired := watchdog(t, time.Minute)
				defer done()
				src := make([]byte, size)
				for i := range src {
					src[i] = byte(i * 7)
				}
				type res struct {
					n   int
					err error
				}
				wc := make(chan res, 1)
				go func() {
					n, err := server.Write(src)
					wc <- res{n, err}
				}()
				if !netpoll.AwaitWriteState(server, "waiting", expired) {
					t.Fatal("the writer never parked")
				}
				if s := netpoll.Counters(g).Total.ShortSkips; s == 0 {
					t.Errorf("ShortSkips = 0 after a short write, want the write after it to wait first (EAGAIN %d)", netpoll.Counters(g).Total.EAGAIN)
				}
				if reset {
					peer.(*net.TCPConn).SetLinger(0)
					peer.Close()
					select {
					case r := <-wc:
						if r.err == nil || r.n >= size {
							t.Fatalf("Write after reset = %d, %v; want an error", r.n, r.err)
						}
					case <-expired:
						t.Fatal("the parked Write never saw the reset")
					}
					return
				}
				got, err := io.ReadAll(io.LimitReader(peer, size))
				if err != nil || !bytes.Equal(got, src) {
					t.Fatalf("peer read %d bytes (%v), equal=%v", len(got), err, bytes.Equal(got, src))
				}
				if r := <-wc; r.n != size || r.err != nil {
					t.Fatalf("Write = %d, %v", r.n, r.err)
				}
			})
		}
	}
}

// TestShortReadListenerOptions sets SO_RCVLOWAT (64) on a listener, through
// its SyscallConn's Control or Read or through its File, in each Sharing that
// allows it and each Mode. An accepted socket inherits the mark, and below
// it the kernel posts no EPOLLIN while a read returns the data: after a
// short read (100 bytes into 4 KiB) and 10 more bytes, a Read that skipped
// its syscall would park for good. The connection must not skip (no
// ShortSkips, StickyRaw kept), and the Read returns the 10 bytes at once.
// A listener whose raw surface was not used still skips (ShortSkips 1), so
// the mark is not set for every listener.
func TestShortReadListenerOptions(t *testing.T) {
	const lowat = 64
	setLowat := func(t *testing.T, fd uintptr) {
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, lowat); err != nil {
			t.Errorf("SO_RCVLOWAT on the listener: %v", err)
		}
	}
	vias := []struct {
		name  string
		set   func(t *testing.T, l *netpoll.Listener) // nil: the plain listener
		lowat int                                     // the accepted socket's SO_RCVLOWAT
	}{
		{"plain", nil, 1},
		{"control", func(t *testing.T, l *netpoll.Listener) {
			rc, err := l.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Control(func(fd uintptr) { setLowat(t, fd) }); err != nil {
				t.Fatal(err)
			}
		}, lowat},
		{"file", func(t *testing.T, l *netpoll.Listener) {
			f, err := l.File()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// The file's SyscallConn, not Fd: Fd would make the
			// shared socket blocking for the listener too.
			rc, err := f.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Control(func(fd uintptr) { setLowat(t, fd) }); err != nil {
				t.Fatal(err)
			}
		}, lowat},
		{"rawread", func(t *testing.T, l *netpoll.Listener) {
			rc, err := l.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Read(func(fd uintptr) bool { setLowat(t, fd); return true }); err != nil {
				t.Fatal(err)
			}
		}, lowat},
	}
	for _, sh := range []string{"single", "exclusive", "reuseport"} {
		for _, mode := range modes {
			for _, via := range vias {
				if via.name == "file" && sh == "reuseport" {
					continue // File refuses a listener of several sockets
				}
				if via.name == "rawread" && sh != "single" {
					continue // a shared listener refuses raw Read
				}
				t.Run(fmt.Sprintf("sharing=%s/mode=%s/%s", sh, mode, via.name), func(t *testing.T) {
					set := "mode=" + mode + ",sharing=" + sh + ",shortread=on"
					if sh != "single" {
						set += ",pollers=2"
					}
					g := newGroup(t, cfgOf(t, set))
					l := listen(t, g, "tcp").(*netpoll.Listener)
					if via.set != nil {
						via.set(t, l)
					}
					peer, server := stdPipe(t, l)
					done, expired := watchdog(t, time.Minute)
					defer done()
					// On the fd directly: RawConn would turn skipping off.
					if v, err := unix.GetsockoptInt(netpoll.FD(server), unix.SOL_SOCKET, unix.SO_RCVLOWAT); err != nil || v != via.lowat {
						t.Fatalf("accepted SO_RCVLOWAT = %d, %v; want %d inherited", v, err, via.lowat)
					}
					shortReadBelowMark(t, g, mode, peer, server, expired)
					wantSkips, wantRaw := uint64(1), false
					if via.set != nil {
						wantSkips, wantRaw = 0, true
					}
					if s := netpoll.Counters(g).Total.ShortSkips; s != wantSkips {
						t.Errorf("ShortSkips = %d, want %d", s, wantSkips)
					}
					if raw := netpoll.Sticky(server)&netpoll.StickyRaw != 0; raw != wantRaw {
						t.Errorf("StickyRaw kept = %v, want %v (sticky %#x)", raw, wantRaw, netpoll.Sticky(server))
					}
				})
			}
		}
	}
}

// shortReadBelowMark has the peer send 100 bytes, which the server reads
// short into 4 KiB, then 10 more, and reads them: the second Read must
// return the 10 bytes, with SO_RCVLOWAT above 10 as without.
func shortReadBelowMark(t *testing.T, g *netpoll.Group, mode string, peer, server net.Conn, expired <-chan struct{}) {
	t.Helper()
	write(t, peer, string(bytes.Repeat([]byte("a"), 100)))
	if !await(expired, func() bool { return inq(t, server) == 100 }) {
		t.Fatal("the server never had the 100 bytes queued")
	}
	// The edge delivered first, so the short read consumes it (oneshot
	// registers disarmed: no edge until a park arms it).
	if mode != "oneshot" && !netpoll.AwaitReadState(server, "ready", expired) {
		t.Fatal("the poller never delivered the edge")
	}
	b := make([]byte, 4096)
	if n, err := server.Read(b); n != 100 || err != nil {
		t.Fatalf("first Read = %d, %v; want the short 100", n, err)
	}
	write(t, peer, "0123456789")
	if !await(expired, func() bool { return inq(t, server) == 10 }) {
		t.Fatal("the server never had the 10 bytes queued")
	}
	// A Read that skipped its syscall would park for good: the deadline
	// only turns that hang into a failure.
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := server.Read(b)
	if errorsIs(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second Read parked with 10 bytes queued below the mark (sticky %#x, stats %+v)", netpoll.Sticky(server), netpoll.Counters(g).Total)
	}
	if n != 10 || err != nil || string(b[:n]) != "0123456789" {
		t.Fatalf("second Read = %q, %v; want the 10 bytes", b[:n], err)
	}
}

// TestShortReadListenerOptionsLater sets SO_RCVLOWAT on a listener between
// two accepts. The kernel copies a listener's options into a connection
// before accept4 returns it, so the first connection keeps the old mark
// (1) and goes on skipping, while the second inherits the new one and does
// not skip: the Listener's flag is set before user code runs and read after
// accept4.
func TestShortReadListenerOptionsLater(t *testing.T) {
	g := newGroup(t, cfgOf(t, "shortread=on"))
	l := listen(t, g, "tcp").(*netpoll.Listener)
	done, expired := watchdog(t, time.Minute)
	defer done()
	peer1, before := stdPipe(t, l)
	rc, err := l.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 64) }); err != nil || serr != nil {
		t.Fatalf("Control: %v, SO_RCVLOWAT: %v", err, serr)
	}
	peer2, after := stdPipe(t, l)
	for _, c := range []struct {
		name       string
		peer, conn net.Conn
		lowat      int
		skips      uint64 // ShortSkips added by its reads
		raw        bool
	}{
		{"accepted before", peer1, before, 1, 1, false},
		{"accepted after", peer2, after, 64, 0, true},
	} {
		if v, err := unix.GetsockoptInt(netpoll.FD(c.conn), unix.SOL_SOCKET, unix.SO_RCVLOWAT); err != nil || v != c.lowat {
			t.Fatalf("%s: SO_RCVLOWAT = %d, %v; want %d", c.name, v, err, c.lowat)
		}
		skips := netpoll.Counters(g).Total.ShortSkips
		shortReadBelowMark(t, g, "et", c.peer, c.conn, expired)
		if got := netpoll.Counters(g).Total.ShortSkips - skips; got != c.skips {
			t.Errorf("%s: ShortSkips += %d, want %d", c.name, got, c.skips)
		}
		if raw := netpoll.Sticky(c.conn)&netpoll.StickyRaw != 0; raw != c.raw {
			t.Errorf("%s: StickyRaw kept = %v, want %v", c.name, raw, c.raw)
		}
	}
}
