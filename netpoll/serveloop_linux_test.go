package netpoll_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// loopStats are the counters the loop's tests read.
type loopStats struct {
	runs, inline, worker, demotions, promotions uint64
	takeovers, passes, ticks                    uint64
	readParks, writeParks                       uint64
}

func readLoop(t testing.TB, g *netpoll.Group, s *netpoll.Server) loopStats {
	t.Helper()
	samples := []netpoll.Sample{
		{Name: "/server/handler-runs:calls"},
		{Name: "/server/inline-calls:calls"},
		{Name: "/server/worker-calls:calls"},
		{Name: "/server/demotions:conns"},
		{Name: "/server/promotions:conns"},
	}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	c := netpoll.Counters(g).Total
	return loopStats{samples[0].Value, samples[1].Value, samples[2].Value, samples[3].Value, samples[4].Value,
		c.LoopTakeovers, c.LoopPasses, c.LoopTicks, c.ReadParks, c.WriteParks}
}

func (a loopStats) sub(b loopStats) loopStats {
	return loopStats{a.runs - b.runs, a.inline - b.inline, a.worker - b.worker, a.demotions - b.demotions,
		a.promotions - b.promotions, a.takeovers - b.takeovers, a.passes - b.passes, a.ticks - b.ticks,
		a.readParks - b.readParks, a.writeParks - b.writeParks}
}

// loopFixture is a Server on a fresh group whose handlers run on the loop
// (wait=block, dispatch=loop), with clients of package net each served
// once, and the loop back to polling. The watchdog ticks only when the
// test sends on tick; demotion's clock stands still.
type loopFixture struct {
	g       *netpoll.Group
	s       *netpoll.Server
	clients []net.Conn
	tick    chan time.Time
	stop    <-chan struct{}
}

func newLoopFixture(t *testing.T, h netpoll.Handler, clients int) *loopFixture {
	t.Helper()
	return newLoopFixtureOf(t, &netpoll.Server{Handler: h}, clients)
}

// newLoopFixtureOf is newLoopFixture serving s.
func newLoopFixtureOf(t *testing.T, s *netpoll.Server, clients int) *loopFixture {
	t.Helper()
	stopClock(t)
	f := &loopFixture{tick: make(chan time.Time)}
	restore := netpoll.SetLoopTick(f.tick)
	f.g = newGroup(t, cfgOf(t, "wait=block,dispatch=loop"))
	restore() // the group's watchdog has its clock
	l := listen(t, f.g, "tcp")
	f.s = s
	serveOn(t, f.s, l)
	done, stop := watchdog(t, time.Minute)
	t.Cleanup(done)
	f.stop = stop
	got := make([]byte, 2)
	for range clients {
		c := dialT(t, l)
		t.Cleanup(func() { c.Close() })
		// A bound on every call of the test's, so that a lost wakeup
		// fails it instead of hanging it.
		c.SetDeadline(time.Now().Add(time.Minute))
		if err := echo1(c, []byte("xy"), got); err != nil {
			t.Fatal(err)
		}
		f.clients = append(f.clients, c)
	}
	f.rest(t)
	return f
}

// rest waits until every connection is idle and the loop polls.
func (f *loopFixture) rest(t *testing.T) {
	t.Helper()
	if !await(f.stop, func() bool { return allServe(f.s) && netpoll.LoopState(f.g, 0) == "poll" }) {
		t.Fatalf("the server did not come to rest: loop %s, stats %+v", netpoll.LoopState(f.g, 0), f.s.Stats())
	}
}

// tickUntil sends ticks to the watchdog until cond holds.
func (f *loopFixture) tickUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case f.tick <- time.Time{}:
		case <-f.stop:
			t.Fatalf("%s: never, after the watchdog's ticks", what)
		}
	}
}

// blockingEcho echoes what one Read gets; a message starting with "block"
// first reports on entered and waits for release.
func blockingEcho(entered chan<- struct{}, release <-chan struct{}) netpoll.Handler {
	return netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(buf[:n], []byte("block")) {
			entered <- struct{}{}
			<-release
		}
		_, err = c.Write(buf[:n])
		return err
	})
}

// TestServeLoopHops counts the loop's path over 2,000 requests on two
// connections in turn: every call runs on the loop (no goroutine created,
// no park, no worker call), and the watchdog, which gets no tick here,
// takes nothing.
func TestServeLoopHops(t *testing.T) {
	f := newLoopFixture(t, echoHandler, 2)
	msg, got := []byte("loop"), make([]byte, 4)
	runtime.GC() // the mark workers of the first cycle are not counted
	const n = 2000
	before, created := readLoop(t, f.g, f.s), goroutinesCreated()
	for i := range n {
		if err := echo1(f.clients[i%2], msg, got); err != nil {
			t.Fatal(err)
		}
	}
	f.rest(t)
	d, createdNow := readLoop(t, f.g, f.s).sub(before), goroutinesCreated()
	t.Logf("%d requests: %+v; goroutines created %d", n, d, createdNow-created)
	if d.runs != n || d.inline != n || d.worker != 0 {
		t.Errorf("handler runs %d, on the loop %d, on workers %d: want %d, %d, 0", d.runs, d.inline, d.worker, n, n)
	}
	if d.readParks+d.writeParks != 0 || d.takeovers != 0 || d.passes != 0 {
		t.Errorf("parks %d, takeovers %d, passes %d: want 0 each", d.readParks+d.writeParks, d.takeovers, d.passes)
	}
	if createdNow != created {
		t.Errorf("%d goroutines created during %d requests, want 0", createdNow-created, n)
	}
}

// TestServeLoopBlocked: a handler that blocks outside netpoll holds the
// loop until the watchdog has seen its run through a whole tick; then a
// new goroutine runs the loop and serves the other connection while the
// handler still blocks. The blocked connection is demoted: its next
// demoteRuns (4) calls run on goroutines of their own, then it is
// promoted and runs on the loop again.
func TestServeLoopBlocked(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	f := newLoopFixture(t, blockingEcho(entered, release), 2)
	a, b := f.clients[0], f.clients[1]
	before := readLoop(t, f.g, f.s)
	if _, err := a.Write([]byte("block")); err != nil {
		t.Fatal(err)
	}
	<-entered
	if _, err := b.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	f.tickUntil(t, "the watchdog took the loop", func() bool { return readLoop(t, f.g, f.s).takeovers != before.takeovers })
	got := make([]byte, 1)
	if _, err := io.ReadFull(b, got); err != nil || got[0] != 'b' {
		t.Fatalf("b's echo while a's handler blocks: %q, %v", got, err)
	}
	close(release)
	got = make([]byte, 5)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "block" {
		t.Fatalf("a's echo after the release: %q, %v", got, err)
	}
	f.rest(t)
	d := readLoop(t, f.g, f.s).sub(before)
	if d.takeovers != 1 || d.demotions != 1 || d.passes != 0 {
		t.Errorf("takeovers %d, demotions %d, passes %d: want 1, 1, 0", d.takeovers, d.demotions, d.passes)
	}
	// Demoted: four calls on goroutines of their own, then the loop.
	got = got[:1]
	for i := range 6 {
		w := readLoop(t, f.g, f.s)
		if err := echo1(a, []byte("a"), got); err != nil {
			t.Fatal(err)
		}
		f.rest(t)
		d := readLoop(t, f.g, f.s).sub(w)
		wantWorker := uint64(0)
		if i < 4 {
			wantWorker = 1
		}
		if d.worker != wantWorker || d.inline != 1-wantWorker {
			t.Errorf("call %d after the block: on workers %d, on the loop %d; want %d, %d", i, d.worker, d.inline, wantWorker, 1-wantWorker)
		}
	}
	if p := readLoop(t, f.g, f.s).sub(before).promotions; p != 1 {
		t.Errorf("promotions %d, want 1", p)
	}
}

// TestServeLoopPark: a handler whose Read of its own connection parks (the
// rest of the request has not come) passes the loop to a new goroutine at
// once, with no tick: the other connection is served meanwhile, and the
// parked handler is woken by the new loop's poll. A park is not a block:
// nothing is demoted.
func TestServeLoopPark(t *testing.T) {
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 6)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) == "abc" {
			if _, err := io.ReadFull(c, buf[3:]); err != nil {
				return err
			}
			n = 6
		}
		_, err = c.Write(buf[:n])
		return err
	})
	f := newLoopFixture(t, h, 2)
	a, b := f.clients[0], f.clients[1]
	before := readLoop(t, f.g, f.s)
	if _, err := a.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if !await(f.stop, func() bool { return readLoop(t, f.g, f.s).passes != before.passes }) {
		t.Fatal("the loop never passed on")
	}
	got := make([]byte, 1)
	if err := echo1(b, []byte("b"), got); err != nil || got[0] != 'b' {
		t.Fatalf("b's echo while a's handler is parked: %q, %v", got, err)
	}
	if _, err := a.Write([]byte("def")); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, 6)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "abcdef" {
		t.Fatalf("a's echo: %q, %v", got, err)
	}
	f.rest(t)
	d := readLoop(t, f.g, f.s).sub(before)
	if d.passes != 1 || d.takeovers != 0 || d.demotions != 0 || d.ticks != 0 {
		t.Errorf("passes %d, takeovers %d, demotions %d, ticks %d: want 1, 0, 0, 0", d.passes, d.takeovers, d.demotions, d.ticks)
	}
	if d.readParks != 1 {
		t.Errorf("read parks %d, want 1", d.readParks)
	}
}

// TestServeLoopGoexit: a handler that ends its goroutine (runtime.Goexit,
// as t.FailNow does) on the loop closes only its connection, and the loop
// goes on in a new goroutine.
func TestServeLoopGoexit(t *testing.T) {
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 8)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) == "exit" {
			runtime.Goexit()
		}
		_, err = c.Write(buf[:n])
		return err
	})
	f := newLoopFixture(t, h, 2)
	a, b := f.clients[0], f.clients[1]
	before := readLoop(t, f.g, f.s)
	if _, err := a.Write([]byte("exit")); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a after its handler's Goexit: %d, %v; want EOF", n, err)
	}
	got := make([]byte, 1)
	for range 3 {
		if err := echo1(b, []byte("b"), got); err != nil {
			t.Fatal(err)
		}
	}
	f.rest(t) // the last call returned
	d := readLoop(t, f.g, f.s).sub(before)
	if d.passes != 1 || d.takeovers != 0 {
		t.Errorf("passes %d, takeovers %d: want 1, 0", d.passes, d.takeovers)
	}
	if d.runs != 4 || d.inline != 3 || d.worker != 0 {
		t.Errorf("handler runs %d, returned on the loop %d, on workers %d: want 4, 3, 0 (the exit never returns)", d.runs, d.inline, d.worker)
	}
}

// TestServeLoopCloseBlocked: Server.Close, then Group.Close, return while a
// handler blocks on the loop, with the watchdog's real clock: the watchdog
// takes the loop, and the new holder sees the stop.
func TestServeLoopCloseBlocked(t *testing.T) {
	stopClock(t) // no call counts as slow: the blocking one runs on the loop
	g := newGroup(t, cfgOf(t, "wait=block,dispatch=loop"))
	l := listen(t, g, "tcp")
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	s := &netpoll.Server{Handler: blockingEcho(entered, release)}
	serveOn(t, s, l)
	done, stop := watchdog(t, time.Minute)
	defer done()
	c := dialT(t, l)
	defer c.Close()
	// Served once and idle first: a connection's first call may run on
	// the accepting goroutine, not on the loop.
	if err := echo1(c, []byte("xy"), make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return allServe(s) && netpoll.LoopState(g, 0) == "poll" }) {
		t.Fatal("the server did not come to rest")
	}
	if _, err := c.Write([]byte("block")); err != nil {
		t.Fatal(err)
	}
	<-entered
	s.Close() // does not wait for the handler
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Group.Close: %v", err)
		}
	case <-stop:
		t.Fatal("Group.Close never returned while a handler blocked on the loop")
	}
	if n := netpoll.Counters(g).Total.LoopTakeovers; n != 1 {
		t.Errorf("takeovers %d, want 1", n)
	}
}

// TestLoopConfig: dispatch=loop needs wait=block.
func TestLoopConfig(t *testing.T) {
	wantConfigErrors(t, "dispatch", "dispatch=loop", "dispatch=loop,wait=nested", "dispatch=loop,wait=inline", "dispatch=loops")
	c, err := netpoll.ParseConfig("wait=block,dispatch=loop")
	if err != nil {
		t.Fatal(err)
	}
	g, err := netpoll.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := netpoll.LoopState(g, 0); got != "poll" {
		t.Errorf("loop %q, want poll", got)
	}
	if s := c.String(); s != "wait=block,dispatch=loop" {
		t.Errorf("String() = %q", s)
	}
}

// loopAheads reads the loop's reads ahead and the hand-off's socket checks.
func loopAheads(t *testing.T, g *netpoll.Group, s *netpoll.Server) (aheads, checks uint64) {
	t.Helper()
	samples := []netpoll.Sample{{Name: "/server/hand-off-checks:calls"}}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	return netpoll.Counters(g).Total.LoopReadsAhead, samples[0].Value
}

// TestServeLoopReadAhead: the loop reads each request ahead before its
// run, so no run asks the socket (poll(2)) first: 500 echoes make 500
// reads ahead and no hand-off check, every call on the loop.
func TestServeLoopReadAhead(t *testing.T) {
	f := newLoopFixture(t, echoHandler, 1)
	c := f.clients[0]
	const n = 500
	before := readLoop(t, f.g, f.s)
	aheads0, checks0 := loopAheads(t, f.g, f.s)
	msg, got := []byte("ahead"), make([]byte, 5)
	for range n {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	f.rest(t)
	d := readLoop(t, f.g, f.s).sub(before)
	aheads, checks := loopAheads(t, f.g, f.s)
	if aheads-aheads0 != n || checks-checks0 != 0 {
		t.Errorf("reads ahead %d, hand-off checks %d: want %d and 0", aheads-aheads0, checks-checks0, n)
	}
	if d.runs != n || d.inline != n || d.readParks != 0 {
		t.Errorf("handler runs %d, on the loop %d, read parks %d: want %d, %d, 0", d.runs, d.inline, d.readParks, n, n)
	}
}

// TestServeLoopSmallReads: a handler that reads 7 bytes per call gets a
// 1,000-byte message whole and in order, called again with no syscall
// while input read ahead is left: 143 calls per read ahead's worth.
func TestServeLoopSmallReads(t *testing.T) {
	f := newLoopFixture(t, sevenByteEcho, 1)
	c := f.clients[0]
	before := readLoop(t, f.g, f.s)
	aheads0, checks0 := loopAheads(t, f.g, f.s)
	msg := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 28)[:1000]
	got := make([]byte, len(msg))
	if err := echo1(c, msg, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo differs: %q", got)
	}
	f.rest(t)
	d := readLoop(t, f.g, f.s).sub(before)
	aheads, checks := loopAheads(t, f.g, f.s)
	aheads, checks = aheads-aheads0, checks-checks0
	t.Logf("calls %d, reads ahead %d, checks %d", d.runs, aheads, checks)
	// Each read ahead ends in one short call at most: 143 calls if one
	// read took the message, one more per extra read (a split segment).
	if aheads == 0 || d.runs < 143 || d.runs > 142+aheads {
		t.Errorf("calls %d, reads ahead %d: want 143 to %d", d.runs, aheads, 142+aheads)
	}
	if checks != 0 {
		t.Errorf("hand-off checks %d, want 0: the calls take what was read ahead", checks)
	}
}

// TestServeLoopReadAheadRaw: while input the loop read ahead is pending, a
// RawConn's Read and File fail with ErrReadAhead, WaitRead returns at
// once, and Read takes the rest in order; once File has had the fd, the
// loop reads nothing ahead for that connection again.
func TestServeLoopReadAheadRaw(t *testing.T) {
	type result struct {
		pending       int
		wait, raw, fe error
		rest          string
	}
	results := make(chan result, 1)
	h := firstByteHandler(map[byte]func(net.Conn) error{'R': func(c net.Conn) error {
		var b [64]byte
		var r result
		r.pending, _ = netpoll.ReadAhead(c)
		r.wait = c.(*netpoll.Conn).WaitRead()
		rc, _ := c.(*netpoll.Conn).SyscallConn()
		r.raw = rc.Read(func(uintptr) bool { return true })
		_, r.fe = c.(*netpoll.Conn).File()
		n, _ := c.Read(b[:])
		r.rest = string(b[:n])
		if f, err := c.(*netpoll.Conn).File(); err == nil {
			f.Close()
		}
		results <- r
		_, err := c.Write([]byte("ok"))
		return err
	}})
	f := newLoopFixture(t, h, 1)
	c := f.clients[0]
	if _, err := c.Write([]byte("Rread ahead")); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.pending != len("read ahead") || r.wait != nil || r.rest != "read ahead" {
		t.Errorf("pending %d, WaitRead %v, rest %q: want %d, nil, %q", r.pending, r.wait, r.rest, len("read ahead"), "read ahead")
	}
	if !errors.Is(r.raw, netpoll.ErrReadAhead) || !errors.Is(r.fe, netpoll.ErrReadAhead) {
		t.Errorf("RawConn.Read %v, File %v: want ErrReadAhead each", r.raw, r.fe)
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ok" {
		t.Fatalf("reply %q, %v", got, err)
	}
	f.rest(t)
	aheads0, _ := loopAheads(t, f.g, f.s)
	for range 10 {
		if err := echo1(c, []byte("xy"), got); err != nil {
			t.Fatal(err)
		}
	}
	f.rest(t)
	if aheads, _ := loopAheads(t, f.g, f.s); aheads != aheads0 {
		t.Errorf("%d reads ahead after File had the fd, want 0", aheads-aheads0)
	}
}

// TestServeLoopSlowCall: a call that holds the loop for demoteAfter
// (100 µs) or more demotes its connection with no takeover, as a blocked
// call on a worker does: its next four calls run on goroutines of their
// own. The clock is the test's: the slow call moves it on by 200 µs.
func TestServeLoopSlowCall(t *testing.T) {
	var now atomic.Int64
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 8)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) == "slow" {
			now.Add(int64(200 * time.Microsecond))
		}
		_, err = c.Write(buf[:n])
		return err
	})
	f := newLoopFixture(t, h, 1)
	t.Cleanup(netpoll.SetServeClock(func() time.Duration { return time.Duration(now.Load()) }))
	c := f.clients[0]
	before := readLoop(t, f.g, f.s)
	got := make([]byte, 4)
	if err := echo1(c, []byte("slow"), got); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		f.rest(t)
		if err := echo1(c, []byte("fast"), got); err != nil {
			t.Fatal(err)
		}
	}
	f.rest(t)
	d := readLoop(t, f.g, f.s).sub(before)
	if d.demotions != 1 || d.promotions != 1 || d.takeovers != 0 {
		t.Errorf("demotions %d, promotions %d, takeovers %d: want 1, 1, 0", d.demotions, d.promotions, d.takeovers)
	}
	if d.inline != 2 || d.worker != 4 {
		t.Errorf("calls on the loop %d, on workers %d: want 2 (the slow call and the last), 4", d.inline, d.worker)
	}
}

// TestServeLoopTakeoverQueue: the watchdog takes the loop from a run with
// the rest of its poll's batch still queued, and the new holder runs it. A
// third connection's handler holds the loop while a and b send, so that
// the next poll finds both, a first (epoll's ready list is in order of
// readiness); a's handler then blocks, and b, queued behind it, has no
// edge left to come: only the queue passed with the loop serves it.
func TestServeLoopTakeoverQueue(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	f := newLoopFixture(t, blockingEcho(entered, release), 3)
	a, b, c := f.clients[0], f.clients[1], f.clients[2]
	if _, err := c.Write([]byte("block")); err != nil {
		t.Fatal(err)
	}
	<-entered
	before := readLoop(t, f.g, f.s)
	for _, m := range []struct {
		c   net.Conn
		msg string
	}{{a, "block"}, {b, "b"}} {
		if _, err := m.c.Write([]byte(m.msg)); err != nil {
			t.Fatal(err)
		}
	}
	release <- struct{}{} // c's handler goes on
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "block" {
		t.Fatalf("c's echo: %q, %v", got, err)
	}
	<-entered // a's handler, first in the next batch
	f.tickUntil(t, "the watchdog took a's run", func() bool { return readLoop(t, f.g, f.s).sub(before).takeovers == 1 })
	if _, err := io.ReadFull(b, got[:1]); err != nil || got[0] != 'b' {
		t.Fatalf("b's echo while a's handler blocks: %q, %v", got[:1], err)
	}
	close(release)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "block" {
		t.Fatalf("a's echo after the release: %q, %v", got, err)
	}
	f.rest(t)
	if d := readLoop(t, f.g, f.s).sub(before); d.takeovers != 1 || d.runs != 2 || d.demotions != 1 {
		t.Errorf("takeovers %d, handler runs %d, demotions %d: want 1 (a's), 2 (a's and b's), 1", d.takeovers, d.runs, d.demotions)
	}
}

// TestServeLoopLabels: a call's labels do not outlive it on the loop
// either. A's handler sets a label and returns; B's next call, on the loop
// goroutine too, has only netpoll=handler.
func TestServeLoopLabels(t *testing.T) {
	profile := make(chan string, 1)
	f := newLoopFixture(t, labelProbe(profile), 2)
	ca, cb, got := f.clients[0], f.clients[1], make([]byte, 1)
	before := readLoop(t, f.g, f.s)
	if err := echo1(ca, []byte("A"), got); err != nil {
		t.Fatal(err)
	}
	f.rest(t)
	if err := echo1(cb, []byte("B"), got); err != nil {
		t.Fatal(err)
	}
	p := <-profile
	f.rest(t)
	if d := readLoop(t, f.g, f.s).sub(before); d.inline != 2 || d.takeovers+d.passes != 0 {
		t.Fatalf("%+v: want both calls on the loop", d)
	}
	checkOnlyHandlerLabel(t, p)
}

// TestServeLoopHookBlocks: the watchdog takes a run whose hand-off blocks
// (a StateIdle hook, user code the run calls after the handler): the
// other connection is served while the hook blocks, and the connection
// whose hook blocked goes idle once it returns and is served again.
func TestServeLoopHookBlocks(t *testing.T) {
	var block atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	f := newLoopFixtureOf(t, &netpoll.Server{Handler: echoHandler, ConnState: func(_ net.Conn, st netpoll.ConnState) {
		if st == netpoll.StateIdle && block.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	}}, 2)
	a, b := f.clients[0], f.clients[1]
	before := readLoop(t, f.g, f.s)
	block.Store(true)
	got := make([]byte, 1)
	if err := echo1(a, []byte("a"), got); err != nil {
		t.Fatal(err)
	}
	<-entered
	if _, err := b.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	f.tickUntil(t, "the watchdog took the run in its hand-off", func() bool { return readLoop(t, f.g, f.s).sub(before).takeovers == 1 })
	if _, err := io.ReadFull(b, got); err != nil || got[0] != 'b' {
		t.Fatalf("b's echo while a's hook blocks: %q, %v", got, err)
	}
	close(release)
	f.rest(t)
	if err := echo1(a, []byte("a"), got); err != nil || got[0] != 'a' {
		t.Fatalf("a's echo after its hook returned: %q, %v", got, err)
	}
	f.rest(t)
	if d := readLoop(t, f.g, f.s).sub(before); d.takeovers != 1 || d.runs != 3 || d.passes != 0 {
		t.Errorf("takeovers %d, handler runs %d, passes %d: want 1, 3, 0", d.takeovers, d.runs, d.passes)
	}
}
