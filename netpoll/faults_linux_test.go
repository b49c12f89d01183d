package netpoll_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
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
				cfg := netpoll.Config{Mode: mode, Pollers: 2, Sharing: sh, Wait: wait}
				if sh == netpoll.Exclusive {
					if wait == netpoll.WaitInline {
						continue // New refuses exclusive with a nested wait
					}
					cfg.Wait = netpoll.WaitBlock
				}
				t.Run(fmt.Sprintf("sharing=%s/mode=%s/wait=%s", sh, mode, cfg.Wait), func(t *testing.T) {
					g := newGroup(t, cfg)
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
		t.Run("mode="+mode.String(), func(t *testing.T) {
			g := newGroup(t, netpoll.Config{Mode: mode, Pollers: 2})
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
	for _, mode := range []netpoll.Mode{netpoll.OneShot, netpoll.LevelTriggered} {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			g := newGroup(t, netpoll.Config{Mode: mode, Pollers: 2})
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
					t.Fatalf("dial %d: %v, want ECONNREFUSED (stats %+v)", i, err, g.Stats().Total)
				}
			}
		})
	}
}
