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

// sharings are the ways pollers share a listener, as NETPOLL's sharing key
// spells them: Single, Exclusive, ReusePort are Config.Sharing, wakeall is
// the experiment string's alone.
var sharings = []string{"single", "exclusive", "wakeall", "reuseport"}

// streamResult is what a stream of connections to a listener of a group
// counted.
type streamResult struct {
	accepts []uint64 // per poller
	stats   netpoll.PollerStats
}

// acceptStream dials conns connections one after another to a listener of
// a group of pollers pollers sharing it by sharing, waiting by wait (both
// in the NETPOLL syntax), and checks what holds on any machine, however loaded:
// each connection is accepted exactly once (every client sends its index,
// the server marks it), the pollers' accepts add up to the connections
// dialed, every registration the listener's sharing mode makes is in its
// poller's epoll instance before and after (checkRegistrations), and closing
// the group leaves no goroutine and no fd. What the stream cost (wakeups,
// context switches per accept) moves with the machine's load and is
// bench.BenchmarkAcceptStream's to measure.
func acceptStream(t *testing.T, pollers int, sharing, wait string, conns int) streamResult {
	t.Helper()
	cfg := cfgOf(t, fmt.Sprintf("pollers=%d,sharing=%s,wait=%s", pollers, sharing, wait))
	initRuntimePoller(t) // its epoll fd is not the group's to close
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)
	g := newGroup(t, cfg)
	l := listen(t, g, "tcp")
	checkRegistrations(t, g, l.(*netpoll.Listener), pollers, sharing)
	dialEach(t, l, conns)
	s := netpoll.Counters(g)
	if testing.Verbose() {
		for i, p := range s.Pollers {
			t.Logf("poller %d: accepts %d wakeups %d empty %d hand-offs %d rotations %d epoll_wait %d", i, p.Accepts, p.Wakeups, p.EmptyWakeups, p.AcceptTurns, p.Rotations, p.EpollWaits)
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
	checkRegistrations(t, g, l.(*netpoll.Listener), pollers, sharing) // after the balancing's re-adds
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
// wakeall, the one socket on every poller, edge-triggered in every mode,
// with EPOLLEXCLUSIVE for Exclusive alone. This is what makes Exclusive
// wake fewer pollers than wakeall, which bench.BenchmarkAcceptStream
// measures (wakeups/op): the wakeups themselves move with the load, the
// flag does not. Exclusive's balancing re-adds a registration after an
// accept (DEL, then ADD): a failed ADD shows here as a poller missing.
// The group has pollers pollers sharing l by sharing (NETPOLL's spelling).
func checkRegistrations(t *testing.T, g *netpoll.Group, l *netpoll.Listener, pollers int, sharing string) {
	t.Helper()
	fds, on := netpoll.ListenerFDs(l), netpoll.ListenerPollers(l)
	shared := sharing == "exclusive" || sharing == "wakeall"
	wantRegs := 1
	if sharing != "single" {
		wantRegs = pollers
	}
	if len(fds) != wantRegs {
		t.Fatalf("sharing=%s: %d registrations, want %d", sharing, len(fds), wantRegs)
	}
	want := make(map[[2]int]bool) // {poller, fd}
	for j, fd := range fds {
		if shared && fd != fds[0] || sharing == "reuseport" && j > 0 && slices.Contains(fds[:j], fd) {
			t.Fatalf("sharing=%s: registrations on sockets %v", sharing, fds)
		}
		want[[2]int{on[j], fd}] = true
	}
	sockets := slices.Compact(slices.Sorted(slices.Values(fds)))
	for i := range pollers {
		watched := epollWatches(t, netpoll.PollerFD(g, i))
		for _, fd := range sockets {
			ev, ok := watched[fd]
			if ok != want[[2]int{i, fd}] {
				t.Errorf("sharing=%s: poller %d's epoll watches the listener's socket %d: %v, want %v", sharing, i, fd, ok, !ok)
				continue
			}
			if !ok {
				continue
			}
			if ev&unix.EPOLLIN == 0 {
				t.Errorf("sharing=%s: poller %d watches socket %d for %#x, without EPOLLIN", sharing, i, fd, ev)
			}
			if !shared {
				continue
			}
			if ev&unix.EPOLLET == 0 {
				t.Errorf("sharing=%s: poller %d watches the shared socket for %#x, not edge-triggered", sharing, i, ev)
			}
			if exclusive := ev&unix.EPOLLEXCLUSIVE != 0; exclusive != (sharing == "exclusive") {
				t.Errorf("sharing=%s: poller %d watches the shared socket for %#x: EPOLLEXCLUSIVE %v", sharing, i, ev, exclusive)
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
//   - wakeall: whichever woken acceptor runs first takes the connection,
//     so the spread is the scheduler's; only the sum is checked.
//
// What sharing costs and how evenly it spreads beyond these bounds
// (wakeups per accept, Exclusive's against wakeall's, context switches,
// the accepts' max/min) move with the machine's load: that comparison is
// bench.BenchmarkAcceptStream's (benchstat -col /sharing). Nested pollers
// (no Exclusive there, see doc.go) are goroutines parked in the runtime's
// one epoll instance, which merges the herd's thread wakeups into one.
func TestSharingAcceptStream(t *testing.T) {
	const conns, pollers = 2000, 8
	for _, wait := range []string{"nested", "block", "default"} {
		for _, sh := range sharings {
			if sh == "exclusive" && wait == "nested" {
				continue // refused by New: see TestExclusiveNeedsSleepingPollers
			}
			if sh != "exclusive" && wait == "default" {
				continue // the default is wait=nested there, run above
			}
			t.Run(fmt.Sprintf("wait=%s/sharing=%s", wait, sh), func(t *testing.T) {
				r := acceptStream(t, pollers, sh, wait, conns)
				s := r.stats
				t.Logf("accepts per poller %v; per accept: %.2f epoll_wait, %.2f accept EAGAIN, %.2f wakeups (%.2f empty); rotations %d, accept turns passed %d",
					r.accepts, float64(s.EpollWaits)/conns, float64(s.AcceptEAGAIN)/conns, float64(s.Wakeups)/conns, float64(s.EmptyWakeups)/conns, s.Rotations, s.AcceptTurns)
				a := r.accepts
				switch sh {
				case "single":
					if slices.Max(a) != conns {
						t.Errorf("accepts per poller %v; want all %d on one poller", a, conns)
					}
				case "exclusive":
					if hi, limit := slices.Max(a), uint64(conns/pollers+2); hi > limit {
						t.Errorf("accepts per poller %v; want none above %d, two above the mean", a, limit)
					}
				case "reuseport":
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
			set := "pollers=3,sharing=" + sh
			if sh == "exclusive" {
				set += ",wait=block"
			}
			cfg := cfgOf(t, set)
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
// wait=block.
func TestExclusiveNeedsSleepingPollers(t *testing.T) {
	_, err := netpoll.New(netpoll.Config{Pollers: 4, Sharing: netpoll.Exclusive, Experiment: "wait=nested"})
	var ce *netpoll.ConfigError
	if !errors.As(err, &ce) || ce.Key != "sharing" || !strings.Contains(ce.Reason, "epoll_wait") {
		t.Fatalf("New(exclusive, nested) = %v; want a *ConfigError for sharing explaining epoll_wait", err)
	}
	for _, w := range []string{"default", "block"} {
		g, err := netpoll.New(netpoll.Config{Pollers: 4, Sharing: netpoll.Exclusive, Experiment: "wait=" + w})
		if err != nil {
			t.Fatalf("New(exclusive, wait=%s): %v", w, err)
		}
		g.Close()
	}
}
