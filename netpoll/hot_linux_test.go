package netpoll_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// hotStats are the counters dispatch=hot's tests read.
type hotStats struct {
	entries, exits, refused, runs uint64
	readParks, writeParks         uint64
	wakeups                       uint64
}

func readHot(t testing.TB, g *netpoll.Group, s *netpoll.Server) hotStats {
	t.Helper()
	samples := []netpoll.Sample{
		{Name: "/server/hot-entries:conns"},
		{Name: "/server/hot-exits:conns"},
		{Name: "/server/hot-refused:conns"},
		{Name: "/server/handler-runs:calls"},
	}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	c := netpoll.Counters(g).Total
	return hotStats{samples[0].Value, samples[1].Value, samples[2].Value, samples[3].Value,
		c.ReadParks, c.WriteParks, c.Wakeups}
}

func (a hotStats) sub(b hotStats) hotStats {
	return hotStats{a.entries - b.entries, a.exits - b.exits, a.refused - b.refused, a.runs - b.runs,
		a.readParks - b.readParks, a.writeParks - b.writeParks, a.wakeups - b.wakeups}
}

// hotFixture is a Server under dispatch=hot on a group that does not spin,
// and one client connected to it, served hot after its second request
// (heat).
func hotFixture(t *testing.T, h netpoll.Handler) (*netpoll.Group, *netpoll.Server, net.Conn, <-chan struct{}) {
	g, s, c, stop, _ := hotFixtureClosed(t, h)
	return g, s, c, stop
}

// hotFixtureClosed is hotFixture with the count of StateClosed reports.
func hotFixtureClosed(t *testing.T, h netpoll.Handler) (*netpoll.Group, *netpoll.Server, net.Conn, <-chan struct{}, *atomic.Int32) {
	t.Helper()
	return hotFixtureOf(t, "dispatch=hot,spin=off", h)
}

// hotFixtureOf is hotFixtureClosed on a group configured by cfg.
func hotFixtureOf(t *testing.T, cfg string, h netpoll.Handler) (*netpoll.Group, *netpoll.Server, net.Conn, <-chan struct{}, *atomic.Int32) {
	t.Helper()
	t.Cleanup(netpoll.SetHotTick(time.Hour)) // the test sweeps (goCold)
	g := newGroup(t, cfgOf(t, cfg))
	l := listen(t, g, "tcp")
	closed := new(atomic.Int32)
	s := &netpoll.Server{Handler: h, ConnState: func(_ net.Conn, st netpoll.ConnState) {
		if st == netpoll.StateClosed {
			closed.Add(1)
		}
	}}
	serveOn(t, s, l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	done, stop := watchdog(t, time.Minute)
	t.Cleanup(done)
	return g, s, c, stop, closed
}

// goCold sweeps s until it has no hot connection left: two sweeps make a
// connection that waited through both cold, and its owner then hands it
// off, which the test waits for.
func goCold(t *testing.T, s *netpoll.Server, stop <-chan struct{}) {
	t.Helper()
	if !await(stop, func() bool {
		netpoll.SweepHot(s)
		return netpoll.HotConns(s) == 0 && allServe(s)
	}) {
		t.Fatalf("the hot connections never went cold: %d hot, stats %+v", netpoll.HotConns(s), s.Stats())
	}
}

// TestServeHotHops counts the hot path: after the first request the
// connection's goroutine keeps it, so that every request is one handler
// call on that goroutine, woken by the runtime's netpoller. No goroutine
// is created, no operation parks, the poller is never woken (its epoll fd
// gets no event: the connection's registration is disarmed), and the
// connection is made hot once.
func TestServeHotHops(t *testing.T) {
	g, s, c, stop := hotFixture(t, echoHandler)
	msg, got := []byte("hot"), make([]byte, 3)
	for range 10 {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	if !await(stop, func() bool { return s.Stats().Idle == 1 }) {
		t.Fatal("the connection never went idle")
	}
	runtime.GC() // the mark workers of the first cycle are not counted
	const n = 2000
	before, created := readHot(t, g, s), goroutinesCreated()
	for range n {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	if !await(stop, func() bool { return s.Stats().Idle == 1 }) {
		t.Fatal("the connection never went idle")
	}
	d, createdNow := readHot(t, g, s).sub(before), goroutinesCreated()
	t.Logf("%d requests: %+v; goroutines created %d", n, d, createdNow-created)
	if d.runs != n {
		t.Errorf("handler runs %d, want %d", d.runs, n)
	}
	if d.entries != 0 || d.exits != 0 || d.refused != 0 {
		t.Errorf("hot entries %d, exits %d, refused %d during the count: want 0 each (hot since the first request)", d.entries, d.exits, d.refused)
	}
	if d.readParks+d.writeParks != 0 || d.wakeups != 0 {
		t.Errorf("parks %d, poller wakeups %d: want 0 (the runtime wakes the connection's goroutine itself)", d.readParks+d.writeParks, d.wakeups)
	}
	if createdNow != created {
		t.Errorf("%d goroutines created during %d requests, want 0", createdNow-created, n)
	}
	if all := readHot(t, g, s); all.entries != 1 || netpoll.HotConns(s) != 1 {
		t.Errorf("made hot %d times, %d hot now: want 1 and 1", all.entries, netpoll.HotConns(s))
	}
}

// TestServeHotGoesCold: a connection that waits through two sweeps goes
// cold (its goroutine exits, its dup is closed, it idles in serve with no
// goroutine), and its next input makes it hot again, served.
func TestServeHotGoesCold(t *testing.T) {
	g, s, c, stop := hotFixture(t, echoHandler)
	msg, got := []byte("cold"), make([]byte, 4)
	if err := heat(c, "cold"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 1 }) {
		t.Fatal("the connection was never made hot")
	}
	fds := openFDs(t)
	goCold(t, s, stop)
	if now := openFDs(t); now != fds-1 {
		t.Errorf("open fds %d after going cold, want %d (the dup closed)", now, fds-1)
	}
	st := readHot(t, g, s)
	if st.entries != 1 || st.exits != 1 {
		t.Errorf("hot entries %d, exits %d: want 1 and 1", st.entries, st.exits)
	}
	for range 3 {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 1 }) {
		t.Fatal("the connection was not made hot again")
	}
	if st := readHot(t, g, s); st.entries != 2 || st.runs != 5 {
		t.Errorf("hot entries %d, handler runs %d: want 2 and 5", st.entries, st.runs)
	}
}

// openFDs counts the process's open fds.
func openFDs(t *testing.T) int {
	t.Helper()
	release := netpoll.HoldWakeMeter() // as countFDs
	ents, err := os.ReadDir("/proc/self/fd")
	release()
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestServeHotClose: Close of a hot connection from another goroutine while
// it waits ends the wait; the client reads EOF (the dup does not keep the
// socket open), StateClosed comes once, and the goroutine is gone.
func TestServeHotClose(t *testing.T) {
	g, s, c, stop, closed := hotFixtureClosed(t, echoHandler)
	got := make([]byte, 5)
	if err := heat(c, "close"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 1 && s.Stats().Idle == 1 }) {
		t.Fatal("the connection never waited hot")
	}
	fds := openFDs(t)
	if err := serverSide(t, s, c).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(got); n != 0 || err != io.EOF {
		t.Fatalf("client Read after the server's Close: %d, %v; want 0, EOF", n, err)
	}
	if !await(stop, func() bool { return s.Stats().Conns == 0 && closed.Load() == 1 }) {
		t.Fatalf("the connection was not finished: %+v, StateClosed %d times", s.Stats(), closed.Load())
	}
	if now := openFDs(t); now != fds-2 {
		t.Errorf("open fds %d after Close, want %d (the fd and its dup)", now, fds-2)
	}
	if st := readHot(t, g, s); st.exits != 1 || netpoll.HotConns(s) != 0 {
		t.Errorf("hot exits %d, %d hot: want 1 and 0", st.exits, netpoll.HotConns(s))
	}
}

// echoReporting echoes each call's one Read, and sends the error a Read
// returns to errs before it returns it.
func echoReporting(errs chan<- error) netpoll.Handler {
	return netpoll.HandlerFunc(func(c net.Conn) error {
		var buf [64]byte
		n, err := c.Read(buf[:])
		if err != nil {
			errs <- err
			return err
		}
		_, err = c.Write(buf[:n])
		return err
	})
}

// TestServeHotDeadline: a read deadline that passes while a hot connection
// waits calls its handler, whose Read reports the timeout, as it does for
// a cold one; one set in the future from another goroutine while it waits
// changes nothing visible.
func TestServeHotDeadline(t *testing.T) {
	timedOut := make(chan error, 1)
	_, s, c, stop := hotFixture(t, echoReporting(timedOut))
	msg, got := []byte("dl"), make([]byte, 2)
	if err := heat(c, "dl"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 1 && s.Stats().Idle == 1 }) {
		t.Fatal("the connection never waited hot")
	}
	sc := serverSide(t, s, c)
	sc.SetReadDeadline(time.Now().Add(time.Hour))
	if err := echo1(c, msg, got); err != nil {
		t.Fatalf("echo with a deadline in an hour: %v", err)
	}
	if !await(stop, func() bool { return s.Stats().Idle == 1 }) {
		t.Fatal("the connection never went idle")
	}
	sc.SetReadDeadline(time.Now().Add(-time.Second))
	select {
	case err := <-timedOut:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the handler's Read: %v, want os.ErrDeadlineExceeded", err)
		}
	case <-stop:
		t.Fatal("the handler was never called for the deadline")
	}
}

// TestServeHotShutdown: Shutdown closes hot connections that wait and waits
// for the one whose handler runs, which then finishes; nothing stays hot.
func TestServeHotShutdown(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var buf [64]byte
		n, err := c.Read(buf[:])
		if err != nil {
			return err
		}
		if string(buf[:n]) == "block" {
			once.Do(func() { close(entered) })
			<-release
		}
		_, err = c.Write(buf[:n])
		return err
	})
	g, s, c, stop := hotFixture(t, h)
	l2 := c.RemoteAddr().String()
	clients := []net.Conn{c}
	for range 3 {
		cc, err := net.Dial("tcp", l2)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		clients = append(clients, cc)
	}
	got := make([]byte, 2)
	for _, cc := range clients {
		if err := heat(cc, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 4 && s.Stats().Idle == 4 }) {
		t.Fatalf("%d hot, %+v: want 4 hot and idle", netpoll.HotConns(s), s.Stats())
	}
	if _, err := c.Write([]byte("block")); err != nil {
		t.Fatal(err)
	}
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	for _, cc := range clients[1:] {
		cc.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := cc.Read(got); err != io.EOF {
			t.Errorf("an idle hot connection's client read %v at Shutdown, want EOF", err)
		}
	}
	close(release)
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-stop:
		t.Fatal("Shutdown never returned")
	}
	if st := readHot(t, g, s); netpoll.HotConns(s) != 0 || st.exits != st.entries {
		t.Errorf("%d hot after Shutdown, entries %d, exits %d", netpoll.HotConns(s), st.entries, st.exits)
	}
}

// TestServeHotPark: a hot connection's handler that parks mid-request (the
// rest of its message comes later) is woken: its registration, disarmed
// while the connection waits on the runtime, is armed for the park.
func TestServeHotPark(t *testing.T) {
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var buf [8]byte
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			return err
		}
		_, err := c.Write(buf[:])
		return err
	})
	g, s, c, stop := hotFixture(t, h)
	got := make([]byte, 8)
	if err := heat(c, "12345678"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 1 && s.Stats().Idle == 1 }) {
		t.Fatal("the connection never waited hot")
	}
	before := readHot(t, g, s)
	for i := range 50 {
		if _, err := c.Write([]byte("abcd")); err != nil {
			t.Fatal(err)
		}
		// The handler parks once its first Read has the half.
		if !await(stop, func() bool { return readHot(t, g, s).readParks > before.readParks+uint64(i) }) {
			t.Fatalf("round %d: the handler never parked for the rest", i)
		}
		if _, err := c.Write([]byte("efgh")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != "abcdefgh" {
			t.Fatalf("round %d: echo %q, want abcdefgh", i, got)
		}
	}
	d := readHot(t, g, s).sub(before)
	if d.entries != 0 || d.runs != 50 || d.readParks != 50 {
		t.Errorf("hot entries %d, runs %d, read parks %d: want 0, 50, 50", d.entries, d.runs, d.readParks)
	}
}

// TestServeHotSweeper: with the sweeper's own timer, a hot connection that
// stops speaking goes cold by itself, holding no goroutine and no dup.
func TestServeHotSweeper(t *testing.T) {
	g := newGroup(t, cfgOf(t, "dispatch=hot,spin=off"))
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
	if err := heat(c, "tick"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return readHot(t, g, s).entries == 1 }) {
		t.Fatal("the connection was never made hot")
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 0 && allServe(s) }) {
		t.Fatalf("the connection never went cold: %d hot, %+v", netpoll.HotConns(s), s.Stats())
	}
	if st := readHot(t, g, s); st.exits != 1 {
		t.Errorf("hot exits %d, want 1", st.exits)
	}
}

// TestServeHotWindows ends a hot wait from outside at each of its windows
// (before the wait is announced, when a kicker does not kick; after it is
// announced and before the state is checked; after it ended and before
// the connection goes cold) with each thing that ends it: Close, a past
// read deadline, Shutdown and two sweeps. None is lost: the connection is
// closed once, or its handler called for the deadline, or it goes cold and
// is served again. Sweeps before the announcement or after the end find
// no wait to end, and end none.
func TestServeHotWindows(t *testing.T) {
	for _, at := range []netpoll.HotPoint{netpoll.HookHotBefore, netpoll.HookHotAnnounced, netpoll.HookHotWoken} {
		for _, what := range []string{"close", "deadline", "shutdown", "sweep"} {
			t.Run(fmt.Sprintf("at=%d/%s", at, what), func(t *testing.T) {
				testHotWindow(t, at, what)
			})
		}
	}
}

func testHotWindow(t *testing.T, at netpoll.HotPoint, what string) {
	handlerErr := make(chan error, 4)
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var buf [64]byte
		n, err := c.Read(buf[:])
		if err != nil {
			handlerErr <- err
			return err
		}
		_, err = c.Write(buf[:n])
		return err
	})
	g, s, c, stop, closed := hotFixtureClosed(t, h)
	got := make([]byte, 2)
	// w0's call is cold; w1's, the next within the sweep period, makes
	// the connection busy, hot after it.
	if err := echo1(c, []byte("w0"), got); err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	var fired atomic.Bool
	restore := netpoll.SetHotHook(func(hc net.Conn, p netpoll.HotPoint) {
		if p != at || !fired.CompareAndSwap(false, true) {
			return
		}
		switch what {
		case "close":
			hc.Close()
		case "deadline":
			hc.SetReadDeadline(time.Now().Add(-time.Second))
		case "shutdown":
			go func() { shut <- s.Shutdown(context.Background()) }()
			if !await(stop, func() bool { return netpoll.Closing(hc) }) {
				t.Error("Shutdown never closed the idle hot connection")
			}
		case "sweep":
			netpoll.SweepHot(s)
			netpoll.SweepHot(s)
		}
	})
	defer restore()
	// The first hot wait is the one after w1's call: the hook fires as it
	// begins (before, announced), or as it ends, which w2 makes it do
	// (woken): then the action lands on a connection with w2 queued.
	// Close and Shutdown close it with w2 unread (the client may see a
	// reset), a past deadline fails the handler's Read although w2 is
	// queued (as package net's does), and a sweep finds the connection
	// not waiting and does nothing.
	if err := echo1(c, []byte("w1"), got); err != nil {
		t.Fatal(err)
	}
	if at == netpoll.HookHotWoken {
		// Parked, or w2 would be found by the poll before it.
		if !await(stop, func() bool { return netpoll.HotWaiting(s) == 1 }) {
			t.Fatal("the connection never waited hot")
		}
		if err := echo1(c, []byte("w2"), got); err != nil && what == "sweep" {
			t.Fatal(err)
		}
	}
	if !await(stop, fired.Load) {
		t.Fatal("the hook never fired")
	}
	switch what {
	case "close", "shutdown":
		c.SetReadDeadline(time.Now().Add(time.Minute))
		for {
			if _, err := c.Read(got); err != nil {
				if err != io.EOF && (at != netpoll.HookHotWoken || !errors.Is(err, syscall.ECONNRESET)) { // a reset only with w2 unread
					t.Errorf("client Read: %v, want EOF", err)
				}
				break
			}
		}
		if !await(stop, func() bool { return closed.Load() == 1 && s.Stats().Conns == 0 }) {
			t.Fatalf("StateClosed %d times, %+v: want once, no connection", closed.Load(), s.Stats())
		}
		if what == "shutdown" {
			if err := <-shut; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		}
	case "deadline":
		select {
		case err := <-handlerErr:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the handler's Read: %v, want os.ErrDeadlineExceeded", err)
			}
		case <-stop:
			t.Fatal("the handler was never called for the deadline")
		}
		if !await(stop, func() bool { return closed.Load() == 1 }) {
			t.Fatal("the connection whose handler failed was not closed")
		}
	case "sweep":
		if at != netpoll.HookHotAnnounced {
			if err := echo1(c, []byte("w5"), got); err != nil {
				t.Fatal(err)
			}
			if st := readHot(t, g, s); st.exits != 0 {
				t.Errorf("hot exits %d after sweeps outside a wait, want 0", st.exits)
			}
			break
		}
		if !await(stop, func() bool { return readHot(t, g, s).exits >= 1 }) {
			t.Fatal("two sweeps in the window never made the connection cold")
		}
		if err := echo1(c, []byte("w4"), got); err != nil {
			t.Fatalf("after going cold: %v", err)
		}
		if closed.Load() != 0 {
			t.Errorf("StateClosed %d times, want 0", closed.Load())
		}
	}
	if st := readHot(t, g, s); what != "sweep" && (netpoll.HotConns(s) != 0 || st.exits != st.entries) {
		t.Errorf("%d hot at the end, entries %d, exits %d", netpoll.HotConns(s), st.entries, st.exits)
	}
}

// TestServeHotCloseWhileRunning: Close of a hot connection whose handler
// runs (blocked on something other than the connection) closes the socket
// at once, as it does for a cold one: the dup that waits on the runtime
// does not keep it open until the handler returns.
func TestServeHotCloseWhileRunning(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var buf [64]byte
		n, err := c.Read(buf[:])
		if err != nil {
			return err
		}
		if string(buf[:n]) == "block" {
			entered <- struct{}{}
			<-release
			return nil
		}
		_, err = c.Write(buf[:n])
		return err
	})
	_, s, c, stop := hotFixture(t, h)
	defer close(release)
	if err := heat(c, "hi"); err != nil {
		t.Fatal(err)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 1 && s.Stats().Idle == 1 }) {
		t.Fatal("the connection never waited hot")
	}
	if _, err := c.Write([]byte("block")); err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := serverSide(t, s, c).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A bound that only a socket left open reaches: the handler is still
	// blocked, and nothing else would close it.
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client Read after Close with the handler running: %d, %v; want 0, EOF", n, err)
	}
}

// TestServeHotAllocs: a request served hot allocates nothing, in the server
// or in the client (package net's).
func TestServeHotAllocs(t *testing.T) {
	g, s, c, _ := hotFixture(t, echoHandler)
	msg, got := []byte("alloc"), make([]byte, 5)
	request := func() {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		request()
	}
	before := readHot(t, g, s)
	if n := testing.AllocsPerRun(1000, request); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
	if d := readHot(t, g, s).sub(before); d.runs != 1001 || d.entries != 0 {
		t.Errorf("%d handler runs, %d hot entries in 1001 requests: want 1001 and 0", d.runs, d.entries)
	}
}

// TestServeHotParallel: busy connections are served in parallel, each on
// a goroutine of its own: two handlers that each wait for the other to be
// running both get there (one goroutine serving both would wait for
// good), at GOMAXPROCS 2 and at 1.
func TestServeHotParallel(t *testing.T) {
	for _, procs := range []int{2, 1} {
		t.Run(fmt.Sprintf("procs=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			var inside atomic.Int32
			var mu sync.Mutex
			goroutines := map[uint64]bool{}
			done, stop := watchdog(t, time.Minute)
			defer done()
			h := netpoll.HandlerFunc(func(c net.Conn) error {
				var buf [8]byte
				n, err := c.Read(buf[:])
				if err != nil {
					return err
				}
				if string(buf[:n]) == "meet" {
					mu.Lock()
					goroutines[goid()] = true
					mu.Unlock()
					inside.Add(1)
					if !await(stop, func() bool { return inside.Load() >= 2 }) {
						return errors.New("the other handler never ran beside this one")
					}
				}
				_, err = c.Write(buf[:n])
				return err
			})
			_, s, c, _ := hotFixture(t, h)
			c2, err := net.Dial("tcp", c.RemoteAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			for _, cc := range []net.Conn{c, c2} {
				if err := heat(cc, "hi"); err != nil {
					t.Fatal(err)
				}
			}
			if !await(stop, func() bool { return netpoll.HotConns(s) == 2 }) {
				t.Fatalf("%d hot, want 2", netpoll.HotConns(s))
			}
			for _, cc := range []net.Conn{c, c2} {
				if _, err := cc.Write([]byte("meet")); err != nil {
					t.Fatal(err)
				}
			}
			for _, cc := range []net.Conn{c, c2} {
				got := make([]byte, 4)
				if _, err := io.ReadFull(cc, got); err != nil || string(got) != "meet" {
					t.Fatalf("echo %q, %v; want meet", got, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(goroutines) != 2 {
				t.Errorf("the two handlers ran on %d goroutines, want 2", len(goroutines))
			}
		})
	}
}

// goid is the calling goroutine's id, from its stack header.
func goid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := strings.Fields(string(b[:n]))
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// heat makes the server side of c hot: two requests, the second returning
// within the sweep period of the first (busy).
func heat(c net.Conn, msg string) error {
	for range 2 {
		if err := echo1(c, []byte(msg), make([]byte, len(msg))); err != nil {
			return err
		}
	}
	return nil
}

// TestServeHotCloseWaits: Server.Close returns with every hot connection
// whose goroutine ran no user code gone cold, its dup closed (none of them
// still hot as it returns), and without waiting for a hot connection whose
// handler runs: that handler is released only after Close has returned,
// and its connection then goes cold too.
func TestServeHotCloseWaits(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var b [64]byte
		n, err := c.Read(b[:])
		if err != nil {
			return err
		}
		if string(b[:n]) == "block" {
			entered <- struct{}{}
			<-release
			return nil
		}
		_, err = c.Write(b[:n])
		return err
	})
	_, s, c, stop := hotFixture(t, h)
	c2 := dialHot(t, s, c, stop)
	write(t, c2, "block")
	<-entered // c2's handler runs: its connection is hot, its goroutine in user code
	closeReturns(t, s, stop, func() { close(release) })
	if n := netpoll.HotConns(s); n != 1 {
		t.Errorf("%d connections hot as Close returned, want 1 (the one whose handler runs; the waiting one gone cold)", n)
	}
	close(release)
	if !await(stop, func() bool { return netpoll.HotConns(s) == 0 }) {
		t.Fatalf("%d connections hot after the handler returned", netpoll.HotConns(s))
	}
}

// TestServeHotCloseHook: a ConnState hook that waits for a lock the
// goroutine calling Server.Close holds (a hot connection going idle after
// its call) does not deadlock Close: the goroutine in the hook runs user
// code, which Close does not wait for.
func TestServeHotCloseHook(t *testing.T) {
	var mu sync.Mutex
	var armed atomic.Bool
	inHook := make(chan struct{}, 1)
	t.Cleanup(netpoll.SetHotTick(time.Hour))
	g := newGroup(t, cfgOf(t, "dispatch=hot,spin=off"))
	l := listen(t, g, "tcp")
	s := &netpoll.Server{Handler: echoHandler, ConnState: func(_ net.Conn, st netpoll.ConnState) {
		if st == netpoll.StateIdle && armed.CompareAndSwap(true, false) {
			inHook <- struct{}{}
			mu.Lock() // held by the goroutine that calls Close
			mu.Unlock()
		}
	}}
	serveOn(t, s, l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done, stop := watchdog(t, time.Minute)
	defer done()
	c2 := dialHot(t, s, c, stop)
	mu.Lock()
	armed.Store(true)
	write(t, c2, "x") // its call returns, and the hot wait reports it idle
	<-inHook
	closeReturns(t, s, stop, mu.Unlock)
	mu.Unlock()
	if !await(stop, func() bool { return netpoll.HotConns(s) == 0 }) {
		t.Fatalf("%d connections hot after the hook returned", netpoll.HotConns(s))
	}
}

// dialHot makes c (a client of s) and a second client hot and waiting,
// and returns the second.
func dialHot(t *testing.T, s *netpoll.Server, c net.Conn, stop <-chan struct{}) net.Conn {
	t.Helper()
	c2, err := net.Dial("tcp", c.RemoteAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	for _, cc := range []net.Conn{c, c2} {
		if err := heat(cc, "hc"); err != nil {
			t.Fatal(err)
		}
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 2 && netpoll.HotWaiting(s) == 2 }) {
		t.Fatalf("%d hot, %d waiting: want both hot and waiting", netpoll.HotConns(s), netpoll.HotWaiting(s))
	}
	return c2
}

// closeReturns calls s.Close and fails if it does not return before the
// watchdog (then unblock runs first, so that the test can end).
func closeReturns(t *testing.T, s *netpoll.Server, stop <-chan struct{}, unblock func()) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-stop:
		unblock()
		t.Fatal("Close waited for user code")
	}
}
