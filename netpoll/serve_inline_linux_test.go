package netpoll_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Inline dispatch (serverole_linux.go): the Server's handler runs on the
// goroutine that polled. These tests count what each request costs and
// what passes the role on; none depends on time: demotion reads a clock the
// test drives.

// inlineStats is what the tests read: the Server's dispatch counters by
// name, and the poller counters that say which goroutines ran.
type inlineStats struct {
	inline, worker, demotions, promotions, spread uint64
	started, takeovers, arms, disarms, idleFires  uint64
	readParks, writeParks, wakeups                uint64
}

func readInline(t testing.TB, g *netpoll.Group, s *netpoll.Server) inlineStats {
	t.Helper()
	samples := []netpoll.Sample{
		{Name: "/server/inline-calls:calls"},
		{Name: "/server/worker-calls:calls"},
		{Name: "/server/demotions:conns"},
		{Name: "/server/promotions:conns"},
		{Name: "/server/batch-spread:calls"},
	}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	c := netpoll.Counters(g).Total
	return inlineStats{
		inline: samples[0].Value, worker: samples[1].Value, demotions: samples[2].Value,
		promotions: samples[3].Value, spread: samples[4].Value,
		started: c.WorkersStarted, takeovers: c.Takeovers, arms: c.WatchArms, disarms: c.WatchDisarms,
		idleFires: c.WatchIdleFires, readParks: c.ReadParks, writeParks: c.WriteParks, wakeups: c.Wakeups,
	}
}

func (a inlineStats) sub(b inlineStats) inlineStats {
	return inlineStats{
		a.inline - b.inline, a.worker - b.worker, a.demotions - b.demotions, a.promotions - b.promotions, a.spread - b.spread,
		a.started - b.started, a.takeovers - b.takeovers, a.arms - b.arms, a.disarms - b.disarms, a.idleFires - b.idleFires,
		a.readParks - b.readParks, a.writeParks - b.writeParks, a.wakeups - b.wakeups,
	}
}

// goroutinesCreated is the runtime's count of goroutines ever created.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// awaitRest waits until the Server's connections are all idle and the role
// is back with a goroutine that polls (not out): then the next request's
// edge is found by a poll, and nothing depends on how fast the client is.
func awaitRest(t *testing.T, g *netpoll.Group, s *netpoll.Server, stop <-chan struct{}) {
	t.Helper()
	if !await(stop, func() bool { return allServe(s) && !strings.HasPrefix(netpoll.ServeRole(g, 0), "out") }) {
		t.Fatalf("the server did not come to rest: role %s, stats %+v", netpoll.ServeRole(g, 0), s.Stats())
	}
}

// stopClock makes demotion's clock stand still for the test: no call
// counts as blocked however slow the machine (or the race detector) is.
func stopClock(t *testing.T) {
	t.Cleanup(netpoll.SetServeClock(func() time.Duration { return 0 }))
}

// serverSide finds the Server's connection whose peer is client c.
func serverSide(t *testing.T, s *netpoll.Server, c net.Conn) net.Conn {
	t.Helper()
	for sc := range s.Conns() {
		if sc.RemoteAddr().String() == c.LocalAddr().String() {
			return sc
		}
	}
	t.Fatalf("no connection of the Server is %v's peer", c.LocalAddr())
	return nil
}

// fixture is a Server on a fresh group that does not spin, with clients of
// package net, each served once, and the server at rest: the clients' next
// calls start from a poll. Demotion's clock stands still.
type fixture struct {
	g       *netpoll.Group
	s       *netpoll.Server
	clients []net.Conn
	stop    <-chan struct{}
}

func newFixture(t *testing.T, s *netpoll.Server, clients int) *fixture {
	t.Helper()
	stopClock(t)
	g := newGroup(t, cfgOf(t, "spin=off,dispatch=inline"))
	l := listen(t, g, "tcp")
	serveOn(t, s, l)
	done, stop := watchdog(t, time.Minute)
	t.Cleanup(done)
	f := &fixture{g: g, s: s, stop: stop}
	got := make([]byte, 1)
	for range clients {
		c := dialT(t, l)
		t.Cleanup(func() { c.Close() })
		if err := echo1(c, []byte("x"), got); err != nil {
			t.Fatal(err)
		}
		f.clients = append(f.clients, c)
	}
	f.rest(t)
	return f
}

// rest waits until the server is at rest (awaitRest).
func (f *fixture) rest(t *testing.T) {
	t.Helper()
	awaitRest(t, f.g, f.s, f.stop)
}

// stats reads the server's and the group's counters.
func (f *fixture) stats(t *testing.T) inlineStats {
	t.Helper()
	return readInline(t, f.g, f.s)
}

// dialT dials l with package net.
func dialT(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// echo1 writes msg on c and reads the echo into got.
func echo1(c net.Conn, msg, got []byte) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs: " + string(got))
	}
	return nil
}

// TestServeInlineHops: a handler that never parks runs inline on every
// request: no goroutine started, no park, no takeover, and the port armed
// and disarmed once per request with spinning off (at most that with
// adaptive spinning, whose holder stays out across queued connections
// only). The process's own count of goroutines created checks
// WorkersStarted: nothing else starts one per request.
func TestServeInlineHops(t *testing.T) {
	for _, spin := range []string{"off", "auto"} {
		t.Run("spin="+spin, func(t *testing.T) {
			stopClock(t)
			g := newGroup(t, cfgOf(t, "spin="+spin+",dispatch=inline"))
			l := listen(t, g, "tcp")
			s := &netpoll.Server{Handler: echoHandler}
			serveOn(t, s, l)
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			done, stop := watchdog(t, time.Minute)
			defer done()
			msg, got := []byte("inline"), make([]byte, 6)
			for range 10 { // the watcher is made at the first go-out
				if err := echo1(c, msg, got); err != nil {
					t.Fatal(err)
				}
			}
			awaitRest(t, g, s, stop)
			// A warm-up request that reached the port still armed (the
			// client is quicker than the holder's come-back) made a
			// takeover, and the goroutine it displaced becomes the watcher
			// once its handler returns, which may come after the count
			// began: a go-out before that finds no watcher and starts one
			// (CI saw "workers started 1"). The count is of the steady
			// state: a watcher waits before it begins.
			if !await(stop, func() bool { return netpoll.ServeRole(g, 0) == "loop+watching" }) {
				t.Fatalf("no watcher after the warm-up: role %s", netpoll.ServeRole(g, 0))
			}
			// The accept loop's next Accept parks once: before the count.
			if !netpoll.AwaitReadState(l, "waiting", stop) {
				t.Fatal("the Server's Accept never parked")
			}
			// The runtime starts a GC's mark workers at its first cycle:
			// one before the count, so that they are not counted.
			runtime.GC()
			const n = 2000
			before, created := readInline(t, g, s), goroutinesCreated()
			for range n {
				if err := echo1(c, msg, got); err != nil {
					t.Fatal(err)
				}
				awaitRest(t, g, s, stop)
				// The role is back once its CAS is done, the port disarmed
				// just after: a request sent between the two reaches the
				// port, and what follows depends on the client's speed.
				// Wait for the disarm as well (an arm the watcher's takeover
				// used up is never disarmed: the assertions below count it).
				if !await(stop, func() bool { d := readInline(t, g, s).sub(before); return d.arms == d.disarms+d.takeovers }) {
					t.Fatalf("the port was never disarmed: %+v since the count began", readInline(t, g, s).sub(before))
				}
			}
			d, createdNow := readInline(t, g, s).sub(before), goroutinesCreated()
			t.Logf("%d requests: %+v; goroutines created %d", n, d, createdNow-created)
			if d.inline != n || d.worker != 0 {
				t.Errorf("inline calls %d, worker calls %d: want %d and 0", d.inline, d.worker, n)
			}
			if d.started != 0 || d.takeovers != 0 || d.readParks+d.writeParks != 0 {
				t.Errorf("workers started %d, takeovers %d, parks %d: want 0 each", d.started, d.takeovers, d.readParks+d.writeParks)
			}
			if d.arms != d.disarms || d.arms > n || spin == "off" && d.arms != n {
				t.Errorf("port armed %d, disarmed %d times in %d requests", d.arms, d.disarms, n)
			}
			// The test's own goroutines (the watchdog) are made before.
			if createdNow != created {
				t.Errorf("%d goroutines created during %d requests, want 0", createdNow-created, n)
			}
		})
	}
}

// TestServeInlineAllocs: a request served inline allocates nothing, in
// the server or in the client (package net's).
func TestServeInlineAllocs(t *testing.T) {
	stopClock(t)
	g := newGroup(t, cfgOf(t, "spin=off,dispatch=inline"))
	l := listen(t, g, "tcp")
	s := &netpoll.Server{Handler: echoHandler}
	serveOn(t, s, l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg, got := []byte("alloc"), make([]byte, 5)
	request := func() {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		request()
	}
	before := readInline(t, g, s)
	if n := testing.AllocsPerRun(1000, request); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
	if d := readInline(t, g, s).sub(before); d.inline < 1000 {
		t.Errorf("%d of 1001 requests ran inline", d.inline)
	}
}

// TestServeBlockedHandler: connection S's handler blocks outside netpoll
// (on a channel the test holds) while it holds the role out; connection F
// is served meanwhile, its first request by the watcher's takeover. Once
// released after the clock moved past DemoteAfter, S is demoted: its next
// DemoteRuns calls run on workers, then it is promoted and runs inline.
// A variant blocks S in its own Read instead (parked in netpoll).
func TestServeBlockedHandler(t *testing.T) {
	for _, how := range []string{"channel", "read"} {
		t.Run("block="+how, func(t *testing.T) {
			var clock atomic.Int64
			defer netpoll.SetServeClock(func() time.Duration { return time.Duration(clock.Load()) })()
			g := newGroup(t, cfgOf(t, "spin=off,dispatch=inline"))
			l := listen(t, g, "tcp")
			release := make(chan struct{})
			var blockNext atomic.Bool
			s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
				b := make([]byte, 64)
				n, err := c.Read(b)
				if err != nil {
					return err
				}
				if b[0] == 'S' && blockNext.CompareAndSwap(true, false) {
					if how == "channel" {
						<-release
					} else if _, err := io.ReadFull(c, b[n:n+1]); err != nil { // the rest comes later
						return err
					} else {
						n++
					}
				}
				_, err = c.Write(b[:n])
				return err
			})}
			serveOn(t, s, l)
			cs, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			cf, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer cf.Close()
			done, stop := watchdog(t, time.Minute)
			defer done()
			got := make([]byte, 8)
			for range 3 {
				if err := echo1(cs, []byte("S"), got[:1]); err != nil {
					t.Fatal(err)
				}
				if err := echo1(cf, []byte("F"), got[:1]); err != nil {
					t.Fatal(err)
				}
			}
			awaitRest(t, g, s, stop)
			before := readInline(t, g, s)

			blockNext.Store(true)
			if _, err := cs.Write([]byte("S")); err != nil {
				t.Fatal(err)
			}
			if !await(stop, func() bool { return s.Stats().Running == 1 && strings.HasPrefix(netpoll.ServeRole(g, 0), "out") }) {
				t.Fatalf("S's handler is not running out: role %s", netpoll.ServeRole(g, 0))
			}
			for range 100 { // served while S's handler blocks
				if err := echo1(cf, []byte("F"), got[:1]); err != nil {
					t.Fatal(err)
				}
				// F's next request finds the role back in loop.
				if !await(stop, func() bool {
					return netpoll.ReadState(serverSide(t, s, cf)) == "serve" && !strings.HasPrefix(netpoll.ServeRole(g, 0), "out")
				}) {
					t.Fatalf("F's connection did not come to rest: role %s", netpoll.ServeRole(g, 0))
				}
			}
			mid := readInline(t, g, s).sub(before)
			if mid.takeovers != 1 || mid.inline != 100 || mid.worker != 0 {
				t.Errorf("while S blocked: takeovers %d, inline calls %d, worker calls %d; want 1, 100, 0", mid.takeovers, mid.inline, mid.worker)
			}
			if mid.started > 1 {
				t.Errorf("%d workers started while S blocked, want at most 1 (a watcher for the new holder)", mid.started)
			}
			clock.Add(int64(netpoll.DemoteAfter)) // S has blocked for DemoteAfter since the takeover
			if how == "channel" {
				close(release)
				if _, err := io.ReadFull(cs, got[:1]); err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := cs.Write([]byte("s")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(cs, got[:2]); err != nil || string(got[:2]) != "Ss" {
					t.Fatalf("S's echo %q, %v; want \"Ss\"", got[:2], err)
				}
			}
			awaitRest(t, g, s, stop)
			after := readInline(t, g, s).sub(before)
			if after.demotions != 1 {
				t.Fatalf("demotions %d after S blocked past DemoteAfter, want 1", after.demotions)
			}
			// The next DemoteRuns calls of S run on workers, then it is promoted.
			for i := range netpoll.DemoteRuns + 1 {
				b0 := readInline(t, g, s)
				if err := echo1(cs, []byte("S"), got[:1]); err != nil {
					t.Fatal(err)
				}
				awaitRest(t, g, s, stop)
				d := readInline(t, g, s).sub(b0)
				wantWorker := uint64(1)
				if i == netpoll.DemoteRuns {
					wantWorker = 0
				}
				if d.worker != wantWorker || d.inline != 1-wantWorker {
					t.Errorf("S's call %d after the demotion: worker %d, inline %d; want worker %d", i+1, d.worker, d.inline, wantWorker)
				}
			}
			if p := readInline(t, g, s).sub(before).promotions; p != 1 {
				t.Errorf("promotions %d, want 1", p)
			}
		})
	}
}

// TestServeDisplacedNotBlocked: a handler displaced by a takeover but
// returning before DemoteAfter (on the test's clock) is not demoted.
func TestServeDisplacedNotBlocked(t *testing.T) {
	release := make(chan struct{})
	var blockNext atomic.Bool
	f := newFixture(t, &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		if b[0] == 'S' && blockNext.CompareAndSwap(true, false) {
			<-release
		}
		_, err := c.Write(b[:])
		return err
	})}, 2)
	cs, cf, got := f.clients[0], f.clients[1], make([]byte, 1)
	before := f.stats(t)
	blockNext.Store(true)
	cs.Write([]byte("S"))
	if !await(f.stop, func() bool { return f.s.Stats().Running == 1 }) {
		t.Fatal("S's handler did not start")
	}
	if err := echo1(cf, []byte("F"), got); err != nil {
		t.Fatal(err)
	}
	close(release)
	if _, err := io.ReadFull(cs, got); err != nil {
		t.Fatal(err)
	}
	f.rest(t)
	if err := echo1(cs, []byte("S"), got); err != nil {
		t.Fatal(err)
	}
	f.rest(t)
	d := f.stats(t).sub(before)
	if d.takeovers != 1 || d.demotions != 0 || d.worker != 0 || d.inline != 3 {
		t.Errorf("%+v: want 1 takeover, no demotion, 3 inline calls", d)
	}
}

// TestServeBatchParallel: at GOMAXPROCS=2 one poll's batch of two ready
// connections runs on two workers at once, the holder staying in loop:
// each handler waits at a barrier for the other, which passes only if both
// run.
func TestServeBatchParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var stop <-chan struct{} // the fixture's watchdog, set before the barrier is used
	var barrier sync.WaitGroup
	var useBarrier atomic.Bool
	f := newFixture(t, &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		if useBarrier.Load() {
			barrier.Done()
			waited := make(chan struct{})
			go func() { barrier.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-stop:
				return errors.New("the other handler of the batch never ran")
			}
		}
		_, err := c.Write(b[:])
		return err
	})}, 2)
	stop = f.stop
	ca, cb, got := f.clients[0], f.clients[1], make([]byte, 1)
	before := f.stats(t)

	var armed atomic.Bool
	entered, releasePoll := make(chan struct{}), make(chan struct{})
	defer netpoll.SetServePollHook(func() {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-releasePoll
		}
	})()
	useBarrier.Store(true)
	barrier.Add(2)
	armed.Store(true)
	ca.Write([]byte("a"))
	<-entered // the holder is about to poll: both edges will be in it
	cb.Write([]byte("b"))
	close(releasePoll)
	for _, c := range []net.Conn{ca, cb} {
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
	}
	f.rest(t)
	d := f.stats(t).sub(before)
	if d.spread != 2 || d.inline != 0 || d.worker != 2 || d.takeovers != 0 {
		t.Errorf("%+v: want the batch of two spread to workers above one P, none inline, no takeover", d)
	}
}

// TestServeGoexit: a handler that ends its goroutine (runtime.Goexit, as
// t.FailNow does) while it holds the role out closes its connection only;
// the watcher takes the role, and the other connections are served.
func TestServeGoexit(t *testing.T) {
	sl := newStateLog()
	f := newFixture(t, &netpoll.Server{ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		if b[0] == 'X' {
			runtime.Goexit()
		}
		_, err := c.Write(b[:])
		return err
	})}, 2)
	cx, cy, got := f.clients[0], f.clients[1], make([]byte, 1)
	before := f.stats(t)
	cx.Write([]byte("X"))
	if _, err := cx.Read(got); err != io.EOF && !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("X's client read %v, want EOF: the connection of a handler that called Goexit is closed", err)
	}
	if !await(f.stop, func() bool { return f.s.Stats().Conns == 1 }) {
		t.Fatalf("stats %+v: want X's connection gone", f.s.Stats())
	}
	for range 10 {
		// At rest first, the port disarmed too (as TestServeInlineHops
		// waits): a request that reaches a port still armed fires it,
		// and its takeover is the client's speed, not the Goexit's.
		f.rest(t)
		if !await(f.stop, func() bool { d := f.stats(t).sub(before); return d.arms == d.disarms+d.takeovers }) {
			t.Fatalf("the port was never disarmed: %+v since the Goexit", f.stats(t).sub(before))
		}
		if err := echo1(cy, []byte("y"), got); err != nil {
			t.Fatal(err)
		}
	}
	if d := f.stats(t).sub(before); d.takeovers != 1 {
		t.Errorf("%d takeovers after the Goexit, want 1 (the kick)", d.takeovers)
	}
	f.s.Close()
	if !await(f.stop, func() bool { return f.s.Stats().Conns == 0 }) {
		t.Fatalf("stats %+v after Close", f.s.Stats())
	}
	sl.check(t)
}

// TestServeGroupCloseFromHandler: Group.Close called by a handler running
// inline returns (the watcher takes the role, sees the stop and ends the
// loop), and every goroutine and fd of the group is gone after.
func TestServeGroupCloseFromHandler(t *testing.T) {
	stopClock(t)
	done, stop := watchdog(t, time.Minute)
	defer done()
	initRuntimePoller(t)
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)
	g := newGroup(t, cfgOf(t, "spin=off,dispatch=inline"))
	l := listen(t, g, "tcp")
	closed := make(chan error, 1)
	s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		if b[0] == 'C' {
			closed <- g.Close()
			return nil
		}
		_, err := c.Write(b[:])
		return err
	})}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := echo1(c, []byte("x"), make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("C"))
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Group.Close from a handler: %v", err)
		}
	case <-stop:
		t.Fatal("Group.Close from a handler running inline did not return")
	}
	s.Close()
	<-served
	c.Close()
	awaitGoroutines(t, goroutines)
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds open, want %d as before the group", n, fds)
	}
}

// TestServeInlineArmFails: an epoll_ctl that fails on the watch port ends
// inline dispatch for the poller: the call runs on a worker, every later
// one too, nothing is lost and the error is kept.
func TestServeInlineArmFails(t *testing.T) {
	f := newFixture(t, &netpoll.Server{Handler: echoHandler}, 1)
	c, got := f.clients[0], make([]byte, 1)
	before := f.stats(t)
	port := netpoll.ServePortFD(f.g, 0)
	var faults atomic.Int32
	restore := netpoll.SetCtlFault(func(epfd, op, _ int, events uint32) unix.Errno {
		if epfd == port && op == unix.EPOLL_CTL_MOD && events != 0 {
			faults.Add(1)
			return unix.ENOMEM
		}
		return 0
	})
	defer restore()
	for range 20 {
		if err := echo1(c, []byte("y"), got); err != nil {
			t.Fatal(err)
		}
		f.rest(t)
	}
	d := f.stats(t).sub(before)
	if faults.Load() != 1 || !errors.Is(netpoll.ServeWatchLost(f.g, 0), unix.ENOMEM) {
		t.Errorf("%d failed arms, lost %v: want 1, ENOMEM", faults.Load(), netpoll.ServeWatchLost(f.g, 0))
	}
	if d.inline != 0 || d.worker != 20 {
		t.Errorf("inline calls %d, worker calls %d after the port was lost: want 0, 20", d.inline, d.worker)
	}
}

// TestServeInlineLabels: a call's labels do not outlive it. Connection A's
// handler sets a label and returns; B's next call, inline on the same
// goroutine, has only netpoll=handler.
func TestServeInlineLabels(t *testing.T) {
	profile := make(chan string, 1)
	f := newFixture(t, &netpoll.Server{Handler: labelProbe(profile)}, 2)
	ca, cb, got := f.clients[0], f.clients[1], make([]byte, 1)
	before := f.stats(t)
	if err := echo1(ca, []byte("A"), got); err != nil {
		t.Fatal(err)
	}
	f.rest(t)
	if err := echo1(cb, []byte("B"), got); err != nil {
		t.Fatal(err)
	}
	p := <-profile
	f.rest(t)
	if d := f.stats(t).sub(before); d.inline != 2 || d.takeovers != 0 {
		t.Fatalf("%+v: want both calls inline, on the goroutine that holds the role", d)
	}
	checkOnlyHandlerLabel(t, p)
}

// labelProbe echoes one byte per call: after 'A' it sets a label it does
// not clear, and on 'B' it sends the goroutine profile on profile.
func labelProbe(profile chan<- string) netpoll.Handler {
	return netpoll.HandlerFunc(func(c net.Conn) error {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		switch b[0] {
		case 'A':
			pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("leak", "A")))
		case 'B':
			var p bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&p, 1)
			profile <- p.String()
		}
		_, err := c.Write(b[:])
		return err
	})
}

// checkOnlyHandlerLabel checks, in a goroutine profile labelProbe took,
// that its call ran with netpoll=handler and no other label.
func checkOnlyHandlerLabel(t *testing.T, p string) {
	t.Helper()
	i := strings.Index(p, "labelProbe.func1")
	if i < 0 {
		t.Fatalf("the handler is not in the goroutine profile:\n%s", p)
	}
	head := p[:i]
	head = head[strings.LastIndex(head, "\n\n")+1:]
	if !strings.Contains(head, `"netpoll":"handler"`) || strings.Contains(head, "leak") {
		t.Errorf("B's call has labels other than netpoll=handler:\n%s", head)
	}
}
