package netpoll_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

var sharings = []netpoll.Sharing{netpoll.Single, netpoll.Exclusive, netpoll.WakeAll, netpoll.ReusePort}

// streamResult is what a stream of connections to a listener of a group
// counted.
type streamResult struct {
	accepts []uint64 // per poller
	stats   netpoll.PollerStats
}

// acceptStream dials conns connections one after another to a listener of
// a group with cfg and checks what holds on any machine, however loaded:
// each connection is accepted exactly once (every client sends its index,
// the server marks it), the pollers' accepts add up to the connections
// dialed, every registration the listener's sharing mode makes is in its
// poller's epoll instance before and after (checkRegistrations), and closing
// the group leaves no goroutine and no fd. What the stream cost (wakeups,
// context switches per accept) moves with the machine's load and is
// bench.BenchmarkAcceptStream's to measure.
func acceptStream(t *testing.T, cfg netpoll.Config, conns int) streamResult {
	t.Helper()
	initRuntimePoller(t) // its epoll fd is not the group's to close
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)
	g := newGroup(t, cfg)
	l := listen(t, g, "tcp")
	checkRegistrations(t, g, l.(*netpoll.Listener), cfg)
	dialEach(t, l, conns)
	s := g.Stats()
	if testing.Verbose() {
		for i, p := range s.Pollers {
			t.Logf("poller %d: accepts %d wakeups %d empty %d hand-offs %d rotations %d epoll_wait %d", i, p.Accepts, p.Wakeups, p.EmptyWakeups, p.HandOffs, p.Rotations, p.EpollWaits)
		}
	}
	r := streamResult{stats: s.Total}
	var sum uint64
	for _, p := range s.Pollers {
		r.accepts = append(r.accepts, p.Accepts)
		sum += p.Accepts
	}
	if sum != uint64(conns) || s.Total.Accepts != sum {
		t.Errorf("pollers counted %d accepts (%v), total %d; want %d", sum, r.accepts, s.Total.Accepts, conns)
	}
	checkRegistrations(t, g, l.(*netpoll.Listener), cfg) // after the balancing's re-adds
	if err := g.Close(); err != nil {
		t.Errorf("Group.Close: %v", err)
	}
	if n := countFDs(t); n != fds {
		t.Errorf("open fds = %d after Group.Close, want %d as before New", n, fds)
	}
	awaitGoroutines(t, goroutines)
	return r
}

// dialEach dials conns connections to l one after another (package net),
// each sending its index, and checks that l accepts each exactly once.
func dialEach(t *testing.T, l net.Listener, conns int) {
	t.Helper()
	done, expired := watchdog(t, 2*time.Minute)
	defer done()

	seen := make([]int, conns)
	var mu sync.Mutex
	served := make(chan struct{})
	go func() {
		defer close(served)
		var wg sync.WaitGroup
		defer wg.Wait()
		for range conns {
			c, err := l.Accept()
			if err != nil {
				t.Errorf("Accept: %v", err)
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				var b [4]byte
				if _, err := io.ReadFull(c, b[:]); err != nil {
					t.Errorf("reading the client's index: %v", err)
					return
				}
				mu.Lock()
				seen[binary.LittleEndian.Uint32(b[:])]++
				mu.Unlock()
			}()
		}
	}()
	for i := range conns {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(i))
		if _, err := c.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	select {
	case <-served:
	case <-expired:
		t.Fatalf("accepting %d connections hung", conns)
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("connection %d accepted %d times, want exactly once", i, n)
		}
	}
}

// checkRegistrations reads each poller's epoll instance (the kernel lists
// what one watches in /proc/self/fdinfo) and checks it holds what l's
// sharing mode registers there, and nothing more of l: Single, its socket
// on one poller; ReusePort, socket i on poller i alone; Exclusive and
// WakeAll, the one socket on every poller, edge-triggered in every Mode,
// with EPOLLEXCLUSIVE for Exclusive alone. This is what makes Exclusive
// wake fewer pollers than WakeAll, which bench.BenchmarkAcceptStream
// measures (wakeups/op): the wakeups themselves move with the load, the
// flag does not. Exclusive's balancing re-adds a registration after an
// accept (DEL, then ADD): a failed ADD shows here as a poller missing.
func checkRegistrations(t *testing.T, g *netpoll.Group, l *netpoll.Listener, cfg netpoll.Config) {
	t.Helper()
	fds, on := netpoll.ListenerFDs(l), netpoll.ListenerPollers(l)
	shared := cfg.Sharing == netpoll.Exclusive || cfg.Sharing == netpoll.WakeAll
	wantRegs := 1
	if cfg.Sharing != netpoll.Single {
		wantRegs = cfg.Pollers
	}
	if len(fds) != wantRegs {
		t.Fatalf("sharing=%s: %d registrations, want %d", cfg.Sharing, len(fds), wantRegs)
	}
	want := make(map[[2]int]bool) // {poller, fd}
	for j, fd := range fds {
		if shared && fd != fds[0] || cfg.Sharing == netpoll.ReusePort && j > 0 && slices.Contains(fds[:j], fd) {
			t.Fatalf("sharing=%s: registrations on sockets %v", cfg.Sharing, fds)
		}
		want[[2]int{on[j], fd}] = true
	}
	sockets := slices.Compact(slices.Sorted(slices.Values(fds)))
	for i := range cfg.Pollers {
		watched := epollWatches(t, netpoll.PollerFD(g, i))
		for _, fd := range sockets {
			ev, ok := watched[fd]
			if ok != want[[2]int{i, fd}] {
				t.Errorf("sharing=%s: poller %d's epoll watches the listener's socket %d: %v, want %v", cfg.Sharing, i, fd, ok, !ok)
				continue
			}
			if !ok {
				continue
			}
			if ev&unix.EPOLLIN == 0 {
				t.Errorf("sharing=%s: poller %d watches socket %d for %#x, without EPOLLIN", cfg.Sharing, i, fd, ev)
			}
			if !shared {
				continue
			}
			if ev&unix.EPOLLET == 0 {
				t.Errorf("sharing=%s: poller %d watches the shared socket for %#x, not edge-triggered", cfg.Sharing, i, ev)
			}
			if exclusive := ev&unix.EPOLLEXCLUSIVE != 0; exclusive != (cfg.Sharing == netpoll.Exclusive) {
				t.Errorf("sharing=%s: poller %d watches the shared socket for %#x: EPOLLEXCLUSIVE %v", cfg.Sharing, i, ev, exclusive)
			}
		}
	}
}

// epollWatches returns the events epoll instance epfd watches each fd of
// this process for, from the kernel's list in /proc/self/fdinfo, one line
// a registration:
//
//	tfd:        3 events: 80000019 data:   300000003  pos:0 ino:3427 sdev:9
//
// A registration whose fd number now names another file (ino, in hex,
// differs from the fd's) is left out: it is not the fd's.
func epollWatches(t *testing.T, epfd int) map[int]uint32 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", epfd))
	if err != nil {
		t.Fatal(err)
	}
	watched := make(map[int]uint32)
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "tfd:" || f[2] != "events:" {
			continue
		}
		fd, err1 := strconv.Atoi(f[1])
		ev, err2 := strconv.ParseUint(f[3], 16, 32)
		var ino uint64
		var err3 error = fmt.Errorf("no ino")
		for _, kv := range f[4:] {
			if v, ok := strings.CutPrefix(kv, "ino:"); ok {
				ino, err3 = strconv.ParseUint(v, 16, 64)
			}
		}
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatalf("epoll fdinfo line %q: %v", line, err)
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Ino != ino {
			continue
		}
		watched[fd] = uint32(ev)
	}
	return watched
}

// TestSharingAcceptStream streams 2,000 connections to a listener shared
// by 8 pollers in every Sharing mode and Wait, and checks what holds
// whatever else runs on the machine. Besides acceptStream's checks (each
// connection accepted once, the accepts accounted for, the registrations
// in place, nothing left after Close), the spread of accepts over the
// pollers:
//
//   - Single: one poller, the one registration's, accepts every connection.
//   - Exclusive: the listener's balance (listener_linux.go) lets a
//     registration accept only while its accepts times the pollers are at
//     most the total plus the pollers, then it counts one more; so no
//     poller ends more than two above the mean, and none at zero, in any
//     scheduling. (The kernel alone would give nearly every connection to
//     the first waiter on the socket's queue.)
//   - ReusePort: the kernel picks a socket by a hash of the connection's
//     addresses (reuseport_select_sock), whoever is awake: no poller is
//     left at zero, short of odds of 8·(7/8)^2000, under 1e-115.
//   - WakeAll: whichever woken acceptor runs first takes the connection,
//     so the spread is the scheduler's; only the sum is checked.
//
// What sharing costs and how evenly it spreads beyond these bounds
// (wakeups per accept, Exclusive's against WakeAll's, context switches,
// the accepts' max/min) move with the machine's load: that comparison is
// bench.BenchmarkAcceptStream's (benchstat -col /sharing). Nested pollers
// (no Exclusive there, see doc.go) are goroutines parked in the runtime's
// one epoll instance, which merges the herd's thread wakeups into one.
func TestSharingAcceptStream(t *testing.T) {
	const conns, pollers = 2000, 8
	for _, wait := range []netpoll.Wait{netpoll.WaitNested, netpoll.WaitBlock, netpoll.WaitDefault} {
		for _, sh := range sharings {
			if sh == netpoll.Exclusive && wait == netpoll.WaitNested {
				continue // refused by New: see TestExclusiveNeedsSleepingPollers
			}
			if sh != netpoll.Exclusive && wait == netpoll.WaitDefault {
				continue // the default is WaitNested there, run above
			}
			t.Run(fmt.Sprintf("wait=%s/sharing=%s", wait, sh), func(t *testing.T) {
				r := acceptStream(t, netpoll.Config{Pollers: pollers, Sharing: sh, Wait: wait}, conns)
				s := r.stats
				t.Logf("accepts per poller %v; per accept: %.2f epoll_wait, %.2f accept EAGAIN, %.2f wakeups (%.2f empty); rotations %d, hand-offs %d",
					r.accepts, float64(s.EpollWaits)/conns, float64(s.AcceptEAGAIN)/conns, float64(s.Wakeups)/conns, float64(s.EmptyWakeups)/conns, s.Rotations, s.HandOffs)
				a := r.accepts
				switch sh {
				case netpoll.Single:
					if slices.Max(a) != conns {
						t.Errorf("accepts per poller %v; want all %d on one poller", a, conns)
					}
				case netpoll.Exclusive:
					if hi, limit := slices.Max(a), uint64(conns/pollers+2); hi > limit {
						t.Errorf("accepts per poller %v; want none above %d, two above the mean", a, limit)
					}
				case netpoll.ReusePort:
					if slices.Min(a) == 0 {
						t.Errorf("accepts per poller %v; want none at zero", a)
					}
				}
			})
		}
	}
}

// TestSharingConformance: every Sharing mode serves the http.Server test
// (dropin.TestSharingNetConn runs nettest's suite on each).
func TestSharingConformance(t *testing.T) {
	for _, sh := range sharings {
		t.Run(fmt.Sprintf("sharing=%s", sh), func(t *testing.T) {
			cfg := netpoll.Config{Pollers: 3, Sharing: sh}
			if sh == netpoll.Exclusive {
				cfg.Wait = netpoll.WaitBlock
			}
			t.Run("http", func(t *testing.T) {
				g := newGroup(t, cfg)
				l := listen(t, g, "tcp")
				serveHTTP(t, l)
				tr := &http.Transport{MaxIdleConnsPerHost: httpClients, MaxConnsPerHost: httpClients}
				defer tr.CloseIdleConnections()
				hammer(t, &http.Client{Transport: tr}, "http://"+l.Addr().String(), 1)
			})
		})
	}
}

// TestSpinForever: with Spin < 0 the poller never blocks while traffic
// runs; it finds the events of a 10,000-round-trip ping-pong by polling.
func TestSpinForever(t *testing.T) {
	const rounds = 10000
	g := newGroup(t, netpoll.Config{Spin: -1})
	client, server := pipe(t, g, listen(t, g, "tcp"))
	before := g.Stats().Total
	pingPongConn(t, client, server, rounds)
	after := g.Stats().Total
	if n := after.BlockingWaits - before.BlockingWaits; n != 0 {
		t.Errorf("spinning poller blocked %d times during %d round trips, want 0", n, rounds)
	}
	if after.SpinHits-before.SpinHits == 0 || after.SpinPolls <= before.SpinPolls {
		t.Errorf("spin polls %d, hits %d: the events were not found by spinning", after.SpinPolls-before.SpinPolls, after.SpinHits-before.SpinHits)
	}
}

// TestSpinBudget: with Spin = 1ms the poller spins while traffic runs and
// blocks again once it stops.
func TestSpinBudget(t *testing.T) {
	for _, wait := range []netpoll.Wait{netpoll.WaitNested, netpoll.WaitBlock} {
		t.Run("wait="+wait.String(), func(t *testing.T) {
			g := newGroup(t, netpoll.Config{Spin: time.Millisecond, Wait: wait})
			client, server := pipe(t, g, listen(t, g, "tcp"))
			pingPongConn(t, client, server, 1000)
			spun := g.Stats().Total
			if spun.SpinHits == 0 {
				t.Errorf("no spin poll found events during the ping-pong (spin polls %d)", spun.SpinPolls)
			}
			// Idle now: the budget runs out and the poller blocks. A poller is
			// blocked exactly when it has blocked once more than it has woken.
			done, expired := watchdog(t, time.Minute)
			defer done()
			blocked := func() bool { s := g.Stats().Total; return s.BlockingWaits == s.Wakeups+1 }
			if !await(expired, blocked) {
				t.Fatalf("poller never blocked after traffic stopped: %+v", g.Stats().Total)
			}
		})
	}
}

// TestSpinAuto: with SpinAuto and back-to-back traffic the poller spins
// through idle periods and finds the events by spinning; once the traffic
// stops it gives up within its budget and blocks. The wakeup cost and the
// cost of a block are set to 500µs (budget 1ms), so that a ping-pong's
// gaps are inside the budget even under the race detector on a loaded
// machine. A WaitBlock poller never spins under SpinAuto: on its locked
// thread a yield between spin polls is a thread hand-off, which costs what
// the block it would save costs (TestSpinAutoSeveralPollers). Under
// WaitInline the operation waiting on the epoll fd spins; it gives its
// spinning slot up whenever it leaves the role, so none is held once the
// connections are closed and nobody waits.
func TestSpinAuto(t *testing.T) {
	defer netpoll.SetSpinCosts(500*time.Microsecond, 500*time.Microsecond)()
	for _, wait := range []netpoll.Wait{netpoll.WaitNested, netpoll.WaitBlock, netpoll.WaitInline} {
		t.Run("wait="+wait.String(), func(t *testing.T) {
			g := newGroup(t, netpoll.Config{SpinPolicy: netpoll.SpinAuto, Wait: wait})
			var client, server net.Conn
			if wait == netpoll.WaitInline {
				// A client on package net: with both ends on the group, each
				// park finds the peer's event already there and steps aside,
				// so no idle moment comes to spin through.
				client, server = netClient(t, listen(t, g, "tcp"))
			} else {
				client, server = pipe(t, g, listen(t, g, "tcp"))
			}
			pingPongConn(t, client, server, 2000)
			s := g.Stats()
			if wait == netpoll.WaitBlock {
				if s.Total.SpinPolls != 0 || s.Total.SpinDecisions != 0 || s.WakeCost != 0 {
					t.Errorf("a thread poller under SpinAuto: %d spin polls, %d spins, wake cost %v; want none", s.Total.SpinPolls, s.Total.SpinDecisions, s.WakeCost)
				}
				return
			}
			if s.SpinBudget != netpoll.AutoSpinMax || s.WakeCost != 500*time.Microsecond {
				t.Errorf("Stats: wake cost %v, budget %v; want 500µs, %v", s.WakeCost, s.SpinBudget, netpoll.AutoSpinMax)
			}
			if s.Total.SpinDecisions == 0 || s.Total.SpinFound == 0 {
				t.Errorf("no spin found an event in 2000 round trips: %d spins, %d found, %d gave up",
					s.Total.SpinDecisions, s.Total.SpinFound, s.Total.SpinGaveUp)
			}
			done, expired := watchdog(t, time.Minute)
			defer done()
			// The poller's goroutine blocks at the end; under WaitInline
			// nobody waits once the server's goroutine has returned.
			parked := uint64(1)
			if wait == netpoll.WaitInline {
				parked = 0
			}
			settled := func() bool {
				s := g.Stats().Total
				return s.BlockingWaits == s.Wakeups+parked && s.SpinFound+s.SpinGaveUp == s.SpinDecisions
			}
			if !await(expired, settled) {
				t.Fatalf("poller never stopped spinning and blocked after traffic stopped: %+v", g.Stats().Total)
			}
			if s := g.Stats().Total; s.SpinTime <= 0 || s.SpinGaveUp == 0 {
				t.Errorf("after idle: spin time %v, %d spins gave up; want the last spin given up", s.SpinTime, s.SpinGaveUp)
			}
			if wait == netpoll.WaitInline {
				client.Close()
				server.Close()
				if n := netpoll.Spinners(); n != 0 {
					t.Errorf("%d spinning slots held with every connection closed, want 0", n)
				}
			}
		})
	}
}

// TestSpinAutoSeveralPollers streams connections, one at a time, to a
// listener shared by 8 pollers with the default spinning (SpinAuto) in
// every Sharing × Wait, and counts what issue 21 found adaptive spinning
// doing there:
//
//   - Thread pollers (WaitBlock, the default with Exclusive) spun: each
//     spin poll yields the P of a locked thread, a thread hand-off, and
//     spinning took Exclusive from 4 context switches per accept to 20. A
//     thread poller must make no spin poll at all.
//   - Nested pollers each saw a fraction of the accepts, so gaps several
//     times one accept's; their measure of what a block costs (C) took in
//     the CPU of other pollers and of the dialing client, read up to 3.5ms,
//     and lifted the budget to its 1ms cap; blocked periods inside that
//     budget kept counting as hits, and the pollers went on spinning
//     through gaps that went to another poller: with the client in the
//     process, 907 spins gave up against 52 that found an event. A poller
//     spins through idle periods only while its own spins find an event
//     at least one time in 4 (a moving average, weight 1/8, from 1/2), and
//     otherwise on probes only, one idle moment in 64: so spins that gave
//     up are at most three times those that found one, plus what the
//     average takes to fall and the probes: here one accept in 8.
//     (TestAutoSpinCleanCostSamples and TestAutoSpinWhenSpinningDelaysThePeer
//     check the causes deterministically.)
//
// Every connection is accepted exactly once (acceptStream). The herd's
// cost per accept is logged; BenchmarkAcceptStream measures it against
// spin=0.
func TestSpinAutoSeveralPollers(t *testing.T) {
	const conns, pollers = 2000, 8
	for _, wait := range []netpoll.Wait{netpoll.WaitDefault, netpoll.WaitNested, netpoll.WaitBlock} {
		for _, sh := range sharings {
			if sh == netpoll.Exclusive && wait == netpoll.WaitNested || sh != netpoll.Exclusive && wait == netpoll.WaitDefault {
				continue // refused, or the same as nested
			}
			t.Run(fmt.Sprintf("wait=%s/sharing=%s", wait, sh), func(t *testing.T) {
				r := acceptStream(t, netpoll.Config{Pollers: pollers, Sharing: sh, Wait: wait}, conns)
				s := r.stats
				t.Logf("per accept: %.2f epoll_wait (%.2f empty), %.2f wakeups, %.2f woken, %.2f accept EAGAIN, %.2f spin polls; %d spins, %d found, %d gave up",
					float64(s.EpollWaits)/conns, float64(s.EmptyPolls)/conns, float64(s.Wakeups)/conns, float64(s.Woken)/conns,
					float64(s.AcceptEAGAIN)/conns, float64(s.SpinPolls)/conns, s.SpinDecisions, s.SpinFound, s.SpinGaveUp)
				if wait != netpoll.WaitNested {
					if s.SpinPolls != 0 || s.SpinDecisions != 0 {
						t.Errorf("thread pollers made %d spin polls (%d spins) for %d accepts; want none", s.SpinPolls, s.SpinDecisions, conns)
					}
					return
				}
				if limit := 3*s.SpinFound + conns/8; s.SpinGaveUp > limit {
					t.Errorf("%d spins gave up for %d accepts (%d found); want at most %d: three per spin that found an event, and one accept in 8", s.SpinGaveUp, conns, s.SpinFound, limit)
				}
			})
		}
	}
}

// pingPongConn sends rounds one-byte round trips from client to server and
// back.
func pingPongConn(t *testing.T, client, server net.Conn, rounds int) {
	t.Helper()
	pingPongOne(t, client, server, rounds, false)
}

// pingPongParked is pingPongConn where the client sends each byte only once
// server's read direction is waiting, so that every request parks the
// server's Read once: a client that raced ahead of the Read let 35-99% of
// 2,000 requests park, by the machine's speed.
func pingPongParked(t *testing.T, client, server net.Conn, rounds int) {
	t.Helper()
	pingPongOne(t, client, server, rounds, true)
}

// pingPongOne is pingPongConn, and with afterPark pingPongParked.
func pingPongOne(t *testing.T, client, server net.Conn, rounds int, afterPark bool) {
	t.Helper()
	done, expired := watchdog(t, 2*time.Minute)
	defer done()
	errc := make(chan error, 1)
	go func() { errc <- echoBytes(server, rounds) }()
	b := make([]byte, 1)
	for i := range rounds {
		if afterPark && !netpoll.AwaitReadState(server, "waiting", expired) {
			t.Fatalf("round %d: the server's Read did not park", i)
		}
		b[0] = byte(i)
		if _, err := client.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, b); err != nil || b[0] != byte(i) {
			t.Fatalf("round %d: %v, got %d", i, err, b[0])
		}
		select {
		case <-expired:
			t.Fatal("ping-pong hung")
		default:
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// echoBytes reads rounds single bytes from c and writes each back.
func echoBytes(c net.Conn, rounds int) error {
	b := make([]byte, 1)
	for range rounds {
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if _, err := c.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// TestBusyPoll: the kernel's per-epoll busy polling is set on every poller
// (it needs NAPI to do anything; loopback has none, so only the setting is
// checked).
func TestBusyPoll(t *testing.T) {
	g, err := netpoll.New(netpoll.Config{Pollers: 2, BusyPoll: 50 * time.Microsecond})
	var ce *netpoll.ConfigError
	if errors.As(err, &ce) && strings.Contains(ce.Reason, "lacks") {
		t.Skipf("kernel without EPIOCSPARAMS: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range 2 {
		usecs, budget, err := netpoll.BusyPollParams(g, i)
		if err != nil || usecs != 50 || budget == 0 {
			t.Errorf("poller %d: busy poll %dus budget %d, %v; want 50us", i, usecs, budget, err)
		}
	}
}

// TestReusePortUnix: SO_REUSEPORT cannot share a unix socket path; Listen
// says so.
func TestReusePortUnix(t *testing.T) {
	g := newGroup(t, netpoll.Config{Pollers: 2, Sharing: netpoll.ReusePort})
	_, err := g.Listen(context.Background(), "unix", filepath.Join(t.TempDir(), "s"))
	var ce *netpoll.ConfigError
	if !errors.As(err, &ce) || ce.Key != "sharing" {
		t.Fatalf("Listen unix with sharing=reuseport: %v, want a *ConfigError for sharing", err)
	}
}

// TestExclusiveNeedsSleepingPollers: New refuses Exclusive sharing with
// nested pollers asked for, saying why; with no wait strategy set it picks
// WaitBlock.
func TestExclusiveNeedsSleepingPollers(t *testing.T) {
	_, err := netpoll.New(netpoll.Config{Pollers: 4, Sharing: netpoll.Exclusive, Wait: netpoll.WaitNested})
	var ce *netpoll.ConfigError
	if !errors.As(err, &ce) || ce.Key != "sharing" || !strings.Contains(ce.Reason, "epoll_wait") {
		t.Fatalf("New(exclusive, nested) = %v; want a *ConfigError for sharing explaining epoll_wait", err)
	}
	for _, w := range []netpoll.Wait{netpoll.WaitDefault, netpoll.WaitBlock} {
		g, err := netpoll.New(netpoll.Config{Pollers: 4, Sharing: netpoll.Exclusive, Wait: w})
		if err != nil {
			t.Fatalf("New(exclusive, wait=%s): %v", w, err)
		}
		g.Close()
	}
}
