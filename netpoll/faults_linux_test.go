package netpoll_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Faults: each test hits one connection (or the listener) of a group with a
// fault, checks the error it gets is the clear one package net would give,
// and checks that a bystander connection of the same group is still served.

// bystander is a connection of the group under test that must go on being
// served whatever happens to the others.
type bystander struct{ c net.Conn }

func newBystander(t *testing.T, g *netpoll.Group, l net.Listener) *bystander {
	t.Helper()
	client, server := pipe(t, g, l)
	// Echo until the test's cleanup closes it: io.Copy splices, through a
	// pipe that stays open as long as the echo runs.
	echoed := make(chan struct{})
	go func() {
		io.Copy(server, server)
		close(echoed)
	}()
	t.Cleanup(func() {
		server.Close()
		<-echoed // its pipe is closed: the next test's fd count holds
	})
	b := &bystander{client}
	b.check(t, "before the test") // the pipe is open: fd counts from here hold
	return b
}

// check makes eight 1 KiB round trips on the bystander.
func (b *bystander) check(t *testing.T, when string) {
	t.Helper()
	done, expired := watchdog(t, time.Minute)
	defer done()
	errc := make(chan error, 1)
	go func() {
		msg, back := make([]byte, 1024), make([]byte, 1024)
		for i := range 8 {
			for j := range msg {
				msg[j] = byte(i + j)
			}
			if _, err := b.c.Write(msg); err != nil {
				errc <- err
				return
			}
			if _, err := io.ReadFull(b.c, back); err != nil {
				errc <- err
				return
			}
			if !bytes.Equal(msg, back) {
				errc <- fmt.Errorf("echo %d corrupted", i)
				return
			}
		}
		errc <- nil
	}()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("%s: another connection of the group is not served: %v", when, err)
		}
	case <-expired:
		t.Fatalf("%s: another connection of the group hung", when)
	}
}

// wantOpError checks that err is a *net.OpError for op wrapping one of
// targets.
func wantOpError(t *testing.T, what string, err error, op string, targets ...error) {
	t.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != op {
		t.Errorf("%s: err = %v (%T), want a *net.OpError for %q", what, err, err, op)
		return
	}
	for _, target := range targets {
		if errors.Is(err, target) {
			return
		}
	}
	t.Errorf("%s: err = %v, want it to wrap one of %v", what, err, targets)
}

// awaitResult waits for a result from ch, or fails the test when expired closes.
func awaitResult[T any](t *testing.T, ch <-chan T, expired <-chan struct{}, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-expired:
		t.Fatalf("%s: still blocked", what)
		panic("unreachable")
	}
}

// randomBytes returns n pseudo-random bytes, the same for the same seed.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n+8)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	return b[:n]
}

type ioResult struct {
	n   int
	err error
}

// TestFaultPeerReset: the peer resets the connection (SO_LINGER 0, then
// Close) while ours is parked in the middle of reading a message, and while
// ours is parked in the middle of a large write. Both end with ECONNRESET
// (or EPIPE for the write) in a *net.OpError; what was read before the
// reset is kept; later calls fail at once without SIGPIPE.
func TestFaultPeerReset(t *testing.T) {
	eachNestedWait(t, func(t *testing.T, g *netpoll.Group) {
		l := listen(t, g, "tcp")
		by := newBystander(t, g, l)
		done, expired := watchdog(t, time.Minute)
		defer done()

		t.Run("mid-read", func(t *testing.T) {
			peer, c := pipe(t, g, l)
			if _, err := peer.Write(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			res := make(chan ioResult, 1)
			go func() {
				n, err := io.ReadFull(c, make([]byte, 200)) // the first half is there; parks for the rest
				res <- ioResult{n, err}
			}()
			if !netpoll.AwaitReadState(c, "waiting", expired) {
				t.Fatal("Read never parked")
			}
			resetByPeer(t, peer)
			r := awaitResult(t, res, expired, "Read after the peer's reset")
			if r.n != 100 {
				t.Errorf("read %d bytes before the reset, want the 100 sent", r.n)
			}
			wantOpError(t, "Read", r.err, "read", syscall.ECONNRESET)
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("Read after the reset succeeded")
			}
			_, err := c.Write([]byte("x"))
			wantOpError(t, "Write after the reset", err, "write", syscall.EPIPE, syscall.ECONNRESET)
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			by.check(t, "after a reset mid-read")
		})

		t.Run("mid-write", func(t *testing.T) {
			peer, c := pipe(t, g, l)
			const size = 64 << 20
			res := make(chan ioResult, 1)
			go func() {
				n, err := c.Write(make([]byte, size)) // the peer never reads: parks once the buffers fill
				res <- ioResult{n, err}
			}()
			if !netpoll.AwaitWriteState(c, "waiting", expired) {
				t.Fatal("Write never parked")
			}
			resetByPeer(t, peer)
			r := awaitResult(t, res, expired, "Write after the peer's reset")
			if r.n <= 0 || r.n >= size {
				t.Errorf("Write wrote %d of %d bytes before the reset, want some but not all", r.n, size)
			}
			wantOpError(t, "Write", r.err, "write", syscall.ECONNRESET, syscall.EPIPE)
			_, err := c.Write([]byte("x"))
			wantOpError(t, "Write after the reset", err, "write", syscall.EPIPE, syscall.ECONNRESET)
			by.check(t, "after a reset mid-write")
		})
	})
}

// resetByPeer closes c with SO_LINGER 0, so the kernel sends RST.
func resetByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(*netpoll.Conn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFaultHalfClose shuts one direction down from either end. The other
// end's parked Read gets a bare io.EOF, and every time after; the side that
// shut its writing down gets EPIPE if it writes, but still reads what the
// other end sends. CloseRead makes a parked Read return io.EOF too.
func TestFaultHalfClose(t *testing.T) {
	type closeWriter interface{ CloseWrite() error }
	eachNestedWait(t, func(t *testing.T, g *netpoll.Group) {
		l := listen(t, g, "tcp")
		by := newBystander(t, g, l)
		done, expired := watchdog(t, time.Minute)
		defer done()

		for _, closer := range []string{"client", "server"} {
			t.Run("closewrite="+closer, func(t *testing.T) {
				shut, other := pipe(t, g, l)
				if closer == "server" {
					shut, other = other, shut
				}
				res := make(chan ioResult, 1)
				go func() { n, err := other.Read(make([]byte, 8)); res <- ioResult{n, err} }()
				if !netpoll.AwaitReadState(other, "waiting", expired) {
					t.Fatal("Read never parked")
				}
				if err := shut.(closeWriter).CloseWrite(); err != nil {
					t.Fatalf("CloseWrite: %v", err)
				}
				if r := awaitResult(t, res, expired, "Read after the peer's CloseWrite"); r.n != 0 || r.err != io.EOF {
					t.Fatalf("parked Read after the peer's CloseWrite = %d, %v; want 0, bare io.EOF", r.n, r.err)
				}
				if n, err := other.Read(make([]byte, 8)); n != 0 || err != io.EOF {
					t.Errorf("Read again = %d, %v; want 0, io.EOF", n, err)
				}
				_, err := shut.Write([]byte("x"))
				wantOpError(t, "Write after CloseWrite", err, "write", syscall.EPIPE)

				// The other direction still works, with a parked reader.
				go func() { n, err := io.ReadFull(shut, make([]byte, 5)); res <- ioResult{n, err} }()
				if !netpoll.AwaitReadState(shut, "waiting", expired) {
					t.Fatal("Read on the shut side never parked")
				}
				if _, err := other.Write([]byte("reply")); err != nil {
					t.Fatalf("writing back: %v", err)
				}
				if r := awaitResult(t, res, expired, "Read of the reply"); r.err != nil {
					t.Fatalf("reading the reply on the side that shut its writing: %v", r.err)
				}
				if err := other.Close(); err != nil {
					t.Fatal(err)
				}
				if n, err := shut.Read(make([]byte, 8)); n != 0 || err != io.EOF {
					t.Errorf("Read after the peer closed = %d, %v; want 0, io.EOF", n, err)
				}
				by.check(t, "after a half-close by the "+closer)
			})
		}

		t.Run("closeread", func(t *testing.T) {
			c, _ := pipe(t, g, l)
			res := make(chan ioResult, 1)
			go func() { n, err := c.Read(make([]byte, 8)); res <- ioResult{n, err} }()
			if !netpoll.AwaitReadState(c, "waiting", expired) {
				t.Fatal("Read never parked")
			}
			if err := c.(*netpoll.Conn).CloseRead(); err != nil {
				t.Fatalf("CloseRead: %v", err)
			}
			if r := awaitResult(t, res, expired, "Read after CloseRead"); r.n != 0 || r.err != io.EOF {
				t.Fatalf("parked Read after CloseRead = %d, %v; want 0, io.EOF", r.n, r.err)
			}
			by.check(t, "after CloseRead")
		})
	})
}

// TestFaultCloseWhileBlocked closes, from another goroutine, a conn with a
// Read parked, a conn with a Write parked on a full buffer and a listener
// with an Accept blocked, in every Sharing mode (TestCloseReleasesBlocked
// covers every Mode with Single). Each returns a *net.OpError wrapping
// net.ErrClosed; the listener's address then refuses connections, and the
// connections it accepted before go on being served.
func TestFaultCloseWhileBlocked(t *testing.T) {
	for _, sh := range sharings {
		for _, mode := range modes {
			for _, wait := range nestedWaits {
				if sh == "exclusive" {
					if wait == "inline" {
						continue // New refuses exclusive with a nested wait
					}
					wait = "block"
				}
				t.Run(fmt.Sprintf("sharing=%s/mode=%s/wait=%s", sh, mode, wait), func(t *testing.T) {
					g := newGroup(t, cfgOf(t, "mode="+mode+",pollers=2,sharing="+sh+",wait="+wait))
					l := listen(t, g, "tcp")
					by := newBystander(t, g, l)
					reader, _ := pipe(t, g, l)
					writer, _ := pipe(t, g, l)
					done, expired := watchdog(t, time.Minute)
					defer done()

					readRes, writeRes, acceptRes := make(chan error, 1), make(chan error, 1), make(chan error, 1)
					go func() { _, err := reader.Read(make([]byte, 1)); readRes <- err }()
					go func() { _, err := writer.Write(make([]byte, 64<<20)); writeRes <- err }()
					go func() {
						c, err := l.Accept()
						if c != nil {
							c.Close()
						}
						acceptRes <- err
					}()
					if !netpoll.AwaitReadState(reader, "waiting", expired) || !netpoll.AwaitWriteState(writer, "waiting", expired) ||
						!netpoll.AwaitReadState(l, "waiting", expired) {
						t.Fatal("the operations never parked")
					}
					var closing sync.WaitGroup
					for _, c := range []io.Closer{reader, writer, l} {
						closing.Go(func() {
							if err := c.Close(); err != nil {
								t.Errorf("Close: %v", err)
							}
						})
					}
					closing.Wait()
					wantOpError(t, "Read", awaitResult(t, readRes, expired, "Read after Close"), "read", net.ErrClosed)
					wantOpError(t, "Write", awaitResult(t, writeRes, expired, "Write after Close"), "write", net.ErrClosed)
					wantOpError(t, "Accept", awaitResult(t, acceptRes, expired, "Accept after Close"), "accept", net.ErrClosed)
					_, err := g.Dial(context.Background(), "tcp", l.Addr().String())
					wantOpError(t, "Dial to the closed listener", err, "dial", syscall.ECONNREFUSED)
					by.check(t, "after closing the listener and two conns")
				})
			}
		}
	}
}

// TestFaultDialRefused dials a closed port many times: each Dial fails at
// once with ECONNREFUSED in a dial *net.OpError naming the address, and no
// fd or goroutine is left behind.
func TestFaultDialRefused(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",pollers=2"))
			by := newBystander(t, g, listen(t, g, "tcp"))
			pl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := pl.Addr().String()
			pl.Close()
			goroutines, fds := runtime.NumGoroutine(), countFDs(t)
			for range 100 {
				_, err := g.Dial(context.Background(), "tcp", closed)
				wantOpError(t, "Dial to a closed port", err, "dial", syscall.ECONNREFUSED)
				var oe *net.OpError
				if errors.As(err, &oe) && (oe.Addr == nil || oe.Addr.String() != closed) {
					t.Fatalf("Dial error %v does not name the address %s", err, closed)
				}
			}
			if n := countFDs(t); n != fds {
				t.Errorf("%d fds open after 100 refused dials, want %d", n, fds)
			}
			awaitGoroutines(t, goroutines)
			by.check(t, "after refused dials")
		})
	}
}

// TestFaultUnixPathRemoved removes a unix listener's socket file under it.
// Dialing the path then fails with ENOENT; the listener's blocked Accept
// stays blocked (no spurious return, no spin) until Close ends it with
// net.ErrClosed; its accepted connections are still served; and a new
// listener can take the path meanwhile.
func TestFaultUnixPathRemoved(t *testing.T) {
	eachNestedWait(t, func(t *testing.T, g *netpoll.Group) {
		path := filepath.Join(t.TempDir(), "s")
		l, err := g.Listen(context.Background(), "unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		by := newBystander(t, g, l)
		done, expired := watchdog(t, time.Minute)
		defer done()
		acceptRes := make(chan error, 1)
		go func() {
			c, err := l.Accept()
			if c != nil {
				c.Close()
			}
			acceptRes <- err
		}()
		if !netpoll.AwaitReadState(l, "waiting", expired) {
			t.Fatal("Accept never parked")
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		_, err = g.Dial(context.Background(), "unix", path)
		wantOpError(t, "Dial to the removed path", err, "dial", syscall.ENOENT)
		by.check(t, "after the path was removed")

		// A new listener takes the path and serves it.
		l2, err := g.Listen(context.Background(), "unix", path)
		if err != nil {
			t.Fatalf("Listen on the freed path: %v", err)
		}
		defer l2.Close()
		c2, s2 := pipe(t, g, l2)
		if _, err := c2.Write([]byte("new")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 3)
		if _, err := io.ReadFull(s2, b); err != nil || string(b) != "new" {
			t.Fatalf("through the new listener: %q, %v", b, err)
		}
		select {
		case err := <-acceptRes:
			t.Fatalf("the old listener's Accept returned %v", err)
		default:
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close of the listener whose path was removed: %v", err)
		}
		wantOpError(t, "Accept after Close", awaitResult(t, acceptRes, expired, "Accept after Close"), "accept", net.ErrClosed)
		by.check(t, "after the old listener closed")
	})
}

// TestRearmAfterCloseFDReuse dials a closed port thousands of times in the
// modes that re-arm after an event, with two pollers. Each refused dial's
// fd number is reused at once by the next dial. A poller that re-armed a
// descriptor after an event without holding a reference could issue its
// EPOLL_CTL_MOD after the descriptor was destroyed, on the next dial's
// registration of the same fd number: it overwrote the new registration
// with the old generation and no EPOLLOUT, every event for the new dial
// was dropped as stale, and its connect parked for good (seen once in a few
// thousand dials under -race). Every dial must fail with ECONNREFUSED.
func TestRearmAfterCloseFDReuse(t *testing.T) {
	const dials = 3000
	for _, mode := range []string{"oneshot", "lt"} {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",pollers=2"))
			pl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := pl.Addr().String()
			pl.Close()
			for i := range dials {
				// The timeout only turns a lost wake into a failure.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := g.Dial(ctx, "tcp", closed)
				cancel()
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("dial %d: %v, want ECONNREFUSED (stats %+v)", i, err, netpoll.Counters(g).Total)
				}
			}
		})
	}
}

// TestFaultAcceptOutOfFDs runs the process out of fds (a low RLIMIT_NOFILE,
// the rest taken by dups) with connections waiting to be accepted. The
// listener must back off (Stats.AcceptBackoffs grows) without a busy loop:
// its poller's epoll_wait calls and wakeups stay bounded while back-offs go
// on. Existing connections are still served, and once fds are freed every
// waiting connection is accepted and works.
func TestFaultAcceptOutOfFDs(t *testing.T) {
	type tc struct {
		name string
		cfg  netpoll.Config
	}
	var cases []tc
	for _, mode := range modes {
		for _, wait := range []string{"nested", "block"} {
			// hotread=off: a hot connection's dup, which the sweeper
			// closes when it idles, would free an fd in the window the
			// test needs none free (TestHotReadOutOfFDs has its own).
			cases = append(cases, tc{fmt.Sprintf("mode=%s/wait=%s", mode, wait), cfgOf(t, "mode="+mode+",wait="+wait+",hotread=off")})
		}
	}
	cases = append(cases,
		tc{"sharing=exclusive/pollers=2", cfgOf(t, "pollers=2,sharing=exclusive,wait=block")},
		tc{"sharing=wakeall/pollers=2", cfgOf(t, "pollers=2,sharing=wakeall")},
		tc{"sharing=reuseport/pollers=2", cfgOf(t, "pollers=2,sharing=reuseport,mode=lt")})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := listen(t, g, "tcp")
			by := newBystander(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()
			accepted := make(chan net.Conn, 16)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			if !netpoll.AwaitReadState(l, "waiting", expired) {
				t.Fatal("Accept never parked")
			}
			const pending = 4
			var socks []int
			for range pending {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				socks = append(socks, fd)
				defer unix.Close(fd)
			}
			sa := &unix.SockaddrInet4{Port: l.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}

			// Out of fds: the soft limit just above what is open, and the
			// gap filled. From here until the fds are freed, nothing in the
			// test may open one (no countFDs, no t.TempDir).
			free := exhaustFDs(t, socks[0], 0)
			defer free()

			before := netpoll.Counters(g).Total
			for _, fd := range socks {
				if err := unix.Connect(fd, sa); err != nil { // the kernel completes it into the backlog
					free()
					t.Fatalf("connect: %v", err)
				}
			}
			awaitBackoffs := func(want uint64) netpoll.PollerStats {
				for {
					s := netpoll.Counters(g).Total
					if s.AcceptBackoffs >= want {
						return s
					}
					select {
					case <-expired:
						free()
						t.Fatalf("accept back-offs %d, want %d: the listener never ran out of fds? (stats %+v)", s.AcceptBackoffs, want, s)
					default:
						runtime.Gosched()
					}
				}
			}
			// Back-offs double from 5ms: the third starts after 35ms, when
			// a level-triggered poller has long stopped repeating the event.
			s1 := awaitBackoffs(before.AcceptBackoffs + 3)
			s2 := awaitBackoffs(s1.AcceptBackoffs + 2)
			backoffs, waits, wakeups := s2.AcceptBackoffs-s1.AcceptBackoffs, s2.EpollWaits-s1.EpollWaits, s2.Wakeups-s1.Wakeups
			if waits > 2*backoffs+4 || wakeups > 2*backoffs+4 {
				t.Errorf("during %d accept back-offs the pollers made %d epoll_wait calls and %d wakeups: a busy loop", backoffs, waits, wakeups)
			}
			select {
			case <-accepted:
				t.Error("accepted a connection while out of fds")
			default:
			}
			by.check(t, "while out of fds")
			free()

			for i, fd := range socks {
				if _, err := unix.Write(fd, []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			seen := make([]bool, pending)
			for i := range pending {
				c := awaitResult(t, accepted, expired, fmt.Sprintf("Accept of waiting connection %d after fds were freed", i))
				c.SetReadDeadline(time.Now().Add(time.Minute))
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err != nil || int(b[0]) >= pending || seen[b[0]] {
					t.Errorf("accepted connection %d: read %v, %v; want a byte one of the waiting clients sent", i, b, err)
				} else {
					seen[b[0]] = true
				}
				c.Close()
			}
			after := netpoll.Counters(g).Total
			if got := after.Accepts - before.Accepts; got != pending {
				t.Errorf("Stats: %d accepts after recovery, want %d", got, pending)
			}
			t.Logf("out of fds: %d back-offs, %d epoll_wait calls in all (%d during the last %d back-offs, %d wakeups); %d connections accepted after recovery",
				s2.AcceptBackoffs-before.AcceptBackoffs, s2.EpollWaits-before.EpollWaits, waits, backoffs, wakeups, pending)
		})
	}
}

// TestNewOutOfFDs: New run out of fds returns an error wrapping EMFILE,
// whether it fails at its first poller or midway (free fds for two of
// three pollers), and leaves no goroutine, fd or adaptive spinning refresher
// behind; with fds back, New works again. The default config (adaptive spinning)
// opens two pipes to measure the wakeup cost before its first poller.
func TestNewOutOfFDs(t *testing.T) {
	warm, err := netpoll.New(netpoll.Config{}) // the runtime's poller and W, initialised
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	for _, tt := range []struct {
		name string
		cfg  netpoll.Config
		free int // fds left free: 0 fails at once; 5 lets two auto pollers start
	}{
		{"auto/first", netpoll.Config{}, 0},
		{"auto/midway", netpoll.Config{Pollers: 3}, 5},
		{"fixed/first", netpoll.Config{DisableSpin: true}, 0},
		{"fixed/midway", netpoll.Config{Pollers: 3, DisableSpin: true}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			goroutines, fds := runtime.NumGoroutine(), countFDs(t)
			release := exhaustFDs(t, 0, tt.free)
			g, err := netpoll.New(tt.cfg)
			release()
			if g != nil {
				g.Close()
			}
			if !errors.Is(err, unix.EMFILE) {
				t.Fatalf("New with %d free fds: %v, want an error wrapping EMFILE", tt.free, err)
			}
			awaitGoroutines(t, goroutines)
			if n := countFDs(t); n != fds {
				t.Errorf("%d fds open after the failed New, %d before", n, fds)
			}
			g, err = netpoll.New(tt.cfg)
			if err != nil {
				t.Fatalf("New with fds back: %v", err)
			}
			g.Close()
		})
	}
}

// exhaustFDs puts the process out of fds: the soft RLIMIT_NOFILE just above
// what is open, and the gap filled with dups of sock but for keep fds left
// free. Until free is called, nothing may open an fd (no countFDs, no
// t.TempDir) but what the caller means to. free closes the fillers and
// restores the limit; it may be called more than once.
func exhaustFDs(t *testing.T, sock, keep int) (free func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: uint64(countFDs(t) + 16), Max: old.Max}
	var fillers []int
	freed := false
	free = func() {
		if freed {
			return
		}
		freed = true
		for _, fd := range fillers {
			unix.Close(fd)
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for {
		fd, err := unix.Dup(sock)
		if err == unix.EMFILE {
			for range min(keep, len(fillers)) {
				unix.Close(fillers[len(fillers)-1])
				fillers = fillers[:len(fillers)-1]
			}
			return free
		}
		if err != nil {
			free()
			t.Fatalf("dup: %v", err)
		}
		fillers = append(fillers, fd)
	}
}

// TestFaultDeadlineStorm moves the deadlines of parked readers (and of a
// parked writer) thousands of times a second. Each move wakes the park, which
// re-checks and parks again; no data may be lost, no timeout may come while
// every deadline is in the future, and when the last deadline is near, each
// reader times out after it, not before, then still reads what comes next.
func TestFaultDeadlineStorm(t *testing.T) {
	const readers, messages = 8, 50
	moves := 20000
	if raceEnabled {
		moves = 4000
	}
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode))
			l := listen(t, g, "tcp")
			by := newBystander(t, g, l)
			done, expired := watchdog(t, 2*time.Minute)
			defer done()
			clients, servers := make([]net.Conn, readers), make([]net.Conn, readers)
			for i := range readers {
				clients[i], servers[i] = pipe(t, g, l)
			}

			// storm moves every server's read deadline, far in the future
			// (or clears it), until stop is closed and it has made at least
			// least moves per conn, and reports how many moves it made and how
			// many times the readers parked meanwhile (each move that finds
			// a reader parked wakes it, and it parks again).
			storm := func(least int, stop <-chan struct{}) (n int, rate float64, parks uint64) {
				start, before := time.Now(), netpoll.Counters(g).Total.ReadParks
				for i := 0; ; i++ {
					if i >= least {
						select {
						case <-stop:
							return i * readers, float64(i*readers) / time.Since(start).Seconds(), netpoll.Counters(g).Total.ReadParks - before
						default:
						}
					}
					runtime.Gosched() // let the woken readers park again
					for _, s := range servers {
						dl := time.Now().Add(time.Hour + time.Duration(i))
						if i%7 == 0 {
							dl = time.Time{}
						}
						s.SetReadDeadline(dl)
					}
				}
			}

			// Phase 1: messages reach parked readers through the storm.
			var wg sync.WaitGroup
			errc := make(chan error, readers+1)
			for i, s := range servers {
				wg.Go(func() {
					var b [8]byte
					for k := range messages {
						if _, err := io.ReadFull(s, b[:]); err != nil {
							errc <- fmt.Errorf("reader %d, message %d: %w", i, k, err)
							return
						}
						if got := int(b[0]) | int(b[1])<<8; got != k {
							errc <- fmt.Errorf("reader %d: message %d arrived as %d", i, k, got)
							return
						}
					}
				})
			}
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				for k := range messages {
					for i, c := range clients {
						// Each message goes to a reader that is parked.
						if !netpoll.AwaitReadState(servers[i], "waiting", expired) {
							return
						}
						if _, err := c.Write([]byte{byte(k), byte(k >> 8), 0, 0, 0, 0, 0, 0}); err != nil {
							errc <- err
							return
						}
					}
				}
			}()
			n, rate, parks := storm(moves, sent)
			if !waitAll(&wg, expired) {
				t.Fatalf("readers hung in the storm (%d moves)", n)
			}
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			t.Logf("phase 1: %d messages to each of %d parked readers through %d deadline moves (%.0f/s, %d read parks)", messages, readers, n, rate, parks)

			// Phase 2: parked readers, a storm, then a near deadline.
			type result struct {
				err error
				at  time.Time
			}
			results := make(chan result, readers)
			var parkedOnce sync.WaitGroup
			for _, s := range servers {
				go func() {
					_, err := s.Read(make([]byte, 1))
					results <- result{err, time.Now()}
				}()
				parkedOnce.Go(func() { netpoll.AwaitReadState(s, "waiting", expired) })
			}
			parkedOnce.Wait()
			stop := make(chan struct{})
			close(stop)
			n, rate, parks = storm(moves, stop)
			select {
			case r := <-results:
				t.Fatalf("a Read returned during a storm of future deadlines: %v", r.err)
			default:
			}
			final := time.Now().Add(20 * time.Millisecond)
			for _, s := range servers {
				s.SetReadDeadline(final)
			}
			for range readers {
				r := awaitResult(t, results, expired, "Read past its deadline")
				var ne net.Error
				if !errors.As(r.err, &ne) || !ne.Timeout() || !errors.Is(r.err, os.ErrDeadlineExceeded) {
					t.Errorf("Read past its deadline: %v, want a timeout wrapping os.ErrDeadlineExceeded", r.err)
				}
				wantOpError(t, "Read past its deadline", r.err, "read", os.ErrDeadlineExceeded)
				if r.at.Before(final) {
					t.Errorf("Read timed out %v before its deadline", final.Sub(r.at))
				}
			}
			t.Logf("phase 2: %d readers timed out after, not before, their deadline, following %d moves (%.0f/s, %d read parks)", readers, n, rate, parks)

			// Phase 3: with the deadline cleared, data still arrives.
			for i, s := range servers {
				s.SetReadDeadline(time.Time{})
				if _, err := clients[i].Write([]byte("after")); err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 5)
				if _, err := io.ReadFull(s, b); err != nil || string(b) != "after" {
					t.Fatalf("Read after the timeouts = %q, %v", b, err)
				}
			}

			// A parked writer through a storm of write deadlines: every
			// byte arrives once the peer reads.
			w, r := servers[0], clients[0]
			payload := randomBytes(8<<20, 1)
			wres := make(chan ioResult, 1)
			go func() { n, err := w.Write(payload); wres <- ioResult{n, err} }()
			if !netpoll.AwaitWriteState(w, "waiting", expired) {
				t.Fatal("Write never parked")
			}
			start := time.Now()
			for i := range moves {
				w.SetWriteDeadline(time.Now().Add(time.Hour + time.Duration(i)))
			}
			rate = float64(moves) / time.Since(start).Seconds()
			got := make([]byte, len(payload))
			if _, err := io.ReadFull(r, got); err != nil {
				t.Fatal(err)
			}
			if res := awaitResult(t, wres, expired, "Write"); res.err != nil || res.n != len(payload) {
				t.Fatalf("Write through the storm = %d, %v; want %d, nil", res.n, res.err, len(payload))
			}
			if crc32.ChecksumIEEE(got) != crc32.ChecksumIEEE(payload) {
				t.Fatal("the parked writer's bytes arrived corrupted")
			}
			t.Logf("writer: %d MiB through %d write deadline moves (%.0f/s), intact", len(payload)>>20, moves, rate)
			by.check(t, "after the storms")
		})
	}
}

// TestFaultSlowReader: a peer that reads only once our writer has parked
// makes every write wait for EPOLLOUT. Stats count the write parks, and
// every byte arrives in order.
func TestFaultSlowReader(t *testing.T) {
	const size = 4 << 20
	payload := randomBytes(size, 2)
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode))
			l := listen(t, g, "tcp")
			by := newBystander(t, g, l)
			reader, writer := stdPipe(t, l) // the slow reader is package net's, so the group counts only the writer
			done, expired := watchdog(t, 2*time.Minute)
			defer done()
			if err := writer.(*netpoll.Conn).SetWriteBuffer(32 << 10); err != nil {
				t.Fatal(err)
			}
			if err := reader.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
				t.Fatal(err)
			}
			before := netpoll.Counters(g).Total
			res := make(chan ioResult, 1)
			var written atomic.Bool
			go func() {
				n, err := writer.Write(payload)
				written.Store(true)
				res <- ioResult{n, err}
			}()
			got, reads := 0, 0
			buf := make([]byte, 16<<10)
			for got < size {
				// Read only once the writer has parked (or finished).
				for netpoll.WriteState(writer) != "waiting" && !written.Load() {
					select {
					case <-expired:
						t.Fatalf("writer neither parked nor finished, %d of %d bytes read", got, size)
					default:
						runtime.Gosched()
					}
				}
				n, err := reader.Read(buf)
				if err != nil {
					t.Fatalf("after %d bytes: %v", got, err)
				}
				if !bytes.Equal(buf[:n], payload[got:got+n]) {
					t.Fatalf("bytes %d..%d arrived corrupted", got, got+n)
				}
				got += n
				reads++
			}
			if r := awaitResult(t, res, expired, "Write"); r.err != nil || r.n != size {
				t.Fatalf("Write = %d, %v; want %d, nil", r.n, r.err, size)
			}
			after := netpoll.Counters(g).Total
			parks := after.WriteParks - before.WriteParks
			if parks == 0 {
				t.Fatalf("no write parked for EPOLLOUT (stats %+v)", after)
			}
			t.Logf("%d MiB to a slow reader: %d write parks for EPOLLOUT, %d reads, EPOLL_CTL_MOD %d, all bytes intact",
				size>>20, parks, reads, after.CtlMod-before.CtlMod)
			by.check(t, "after the slow reader")
		})
	}
}

// TestDefaultRetriesAfterEMFILE: the first package-level Listen, made with
// no fd free, fails with an error wrapping EMFILE; once fds are free again
// the next Listen and Dial build the default group and work. (The default
// group's first error used to be kept for the life of the process.)
func TestDefaultRetriesAfterEMFILE(t *testing.T) {
	warm, err := netpoll.New(netpoll.Config{}) // the runtime's poller and W, initialised
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	t.Setenv(netpoll.EnvVar, "")
	netpoll.ResetDefault()
	defer netpoll.ResetDefault()
	release := exhaustFDs(t, 0, 0)
	l, err := netpoll.Listen("tcp", "127.0.0.1:0")
	release()
	if err == nil {
		l.Close()
		t.Fatal("Listen with no fd free succeeded")
	}
	if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("Listen with no fd free: %v, want an error wrapping EMFILE", err)
	}
	l, err = netpoll.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen with fds free again: %v", err)
	}
	defer l.Close()
	c, err := netpoll.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	s.Close()
}
