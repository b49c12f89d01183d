package netpoll_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestPingPongStress runs 100 connections × 1,000 ping-pongs in every mode
// and wait strategy. A lost edge hangs a connection, so a watchdog fails
// the test instead of letting it hang.
func TestPingPongStress(t *testing.T) {
	conns, rounds := 100, 1000
	if testing.Short() {
		conns, rounds = 20, 200
	}
	for _, mode := range modes {
		for _, wait := range []string{"nested", "block", "inline"} {
			t.Run(fmt.Sprintf("mode=%s/wait=%s", mode, wait), func(t *testing.T) {
				g := newGroup(t, cfgOf(t, "mode="+mode+",wait="+wait))
				pingPong(t, g, conns, rounds)
			})
		}
	}
}

// pingPong echoes 8-byte counters over conns connections, rounds times each,
// checking every reply.
func pingPong(t *testing.T, g *netpoll.Group, conns, rounds int) {
	t.Helper()
	l := listen(t, g, "tcp")
	done, expired := watchdog(t, 2*time.Minute)
	defer done()

	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	var wg sync.WaitGroup
	errc := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := g.Dial(context.Background(), "tcp", l.Addr().String())
			if err != nil {
				errc <- err
				return
			}
			defer c.Close()
			var out, in [8]byte
			for r := range rounds {
				v := uint64(i)<<32 | uint64(r)
				binary.LittleEndian.PutUint64(out[:], v)
				if _, err := c.Write(out[:]); err != nil {
					errc <- err
					return
				}
				if _, err := io.ReadFull(c, in[:]); err != nil {
					errc <- err
					return
				}
				if got := binary.LittleEndian.Uint64(in[:]); got != v {
					errc <- fmt.Errorf("conn %d round %d: got %#x, want %#x", i, r, got, v)
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-expired:
		t.Fatalf("ping-pong hung: a wakeup was lost (stats %+v)", netpoll.Counters(g).Total)
	}
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestCloseLeavesNothing: after Group.Close, the goroutines and fds the
// group used are gone, even with connections and listeners left open and
// operations blocked.
func TestCloseLeavesNothing(t *testing.T) {
	type config struct{ name, set string }
	var cfgs []config
	for _, wait := range []string{"nested", "block"} {
		for _, sh := range []string{"single", "exclusive", "wakeall", "reuseport"} {
			if sh == "exclusive" && wait == "nested" {
				continue // refused by New
			}
			for _, sp := range spins {
				cfgs = append(cfgs, config{
					fmt.Sprintf("wait=%s/sharing=%s/spin=%s", wait, sh, sp.name),
					join("wait="+wait, "pollers=3", "sharing="+sh, sp.set),
				})
			}
		}
	}
	for _, c := range cfgs {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfgOf(t, c.set)
			goroutines, fds := runtime.NumGoroutine(), countFDs(t)
			g, err := netpoll.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			// Connections to a package net listener that keeps them open,
			// so only Group.Close can end their reads.
			peer, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var peerConns []net.Conn
			blocked := make(chan error, 8)
			go func() { _, err := l.Accept(); blocked <- fmt.Errorf("accept: %w", err) }()
			for i := range 3 {
				c, err := g.Dial(context.Background(), "tcp", peer.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				pc, err := peer.Accept()
				if err != nil {
					t.Fatal(err)
				}
				peerConns = append(peerConns, pc)
				go func() { _, err := c.Read(make([]byte, 1)); blocked <- fmt.Errorf("read %d: %w", i, err) }()
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			for range 4 {
				if err := <-blocked; !errorsIs(err, net.ErrClosed) {
					t.Errorf("blocked op after Group.Close: %v, want net.ErrClosed", err)
				}
			}
			if _, err := g.Dial(context.Background(), "tcp", l.Addr().String()); !errorsIs(err, net.ErrClosed) {
				t.Errorf("Dial after Close: %v, want net.ErrClosed", err)
			}
			for _, pc := range peerConns {
				pc.Close()
			}
			peer.Close()
			// Exactly as many as before New: more is a leak of this
			// group's, and fewer an earlier test's fd that outlived its
			// Close (Server.Close waits for the dups of hot connections,
			// hotSet.awaitCold).
			if n := countFDs(t); n != fds {
				t.Errorf("open fds = %d after Close, want %d as before New", n, fds)
			}
			awaitGoroutines(t, goroutines)
		})
	}
}

func countFDs(t testing.TB) int {
	t.Helper()
	// The wakeup-cost meter of a group that outlives the test (the
	// default group's) opens two pipes for a moment each second.
	release := netpoll.HoldWakeMeter()
	ents, err := os.ReadDir("/proc/self/fd")
	release()
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own fd
}

// awaitGoroutines waits (yielding, bounded) for goroutines that are ending
// to finish, then checks the count is back to want.
func awaitGoroutines(t testing.TB, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > want {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, want %d:\n%s", n, want, buf[:runtime.Stack(buf, true)])
	}
}

// TestCloseRacesDial closes a group while goroutines keep dialing and
// accepting on it. Every conn a Dial returned is closed by Group.Close (or
// was never registered), and no fd or goroutine is left.
func TestCloseRacesDial(t *testing.T) {
	for round := range 20 {
		goroutines, fds := runtime.NumGoroutine(), countFDs(t)
		g, err := netpoll.New(netpoll.Config{Pollers: 2})
		if err != nil {
			t.Fatal(err)
		}
		l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		started := make(chan struct{}, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				started <- struct{}{}
				for {
					c, err := g.Dial(context.Background(), "tcp", l.Addr().String())
					if err != nil {
						if !errorsIs(err, net.ErrClosed) && !errorsIs(err, syscall.ECONNREFUSED) && !errorsIs(err, syscall.ECONNRESET) {
							t.Errorf("round %d: Dial: %v", round, err)
						}
						return
					}
					defer c.Close()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		for range 4 {
			<-started
		}
		g.Close()
		wg.Wait()
		if n := countFDs(t); n != fds {
			t.Fatalf("round %d: %d fds after Close, want %d", round, n, fds)
		}
		awaitGoroutines(t, goroutines)
	}
}
