package netpoll_test

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// hotReadPair is a group with hotread set as given, and a package net
// client connected to one of its Conns. The sweeper's period is an hour,
// so that only the test sweeps (netpoll.SweepConnsHot); and nothing is hot
// before it begins, lest another test's leftover be counted.
func hotReadPair(t *testing.T, set string) (*netpoll.Group, net.Conn, *netpoll.Conn, <-chan struct{}) {
	t.Helper()
	done, expired := watchdog(t, time.Minute)
	t.Cleanup(done)
	if !await(expired, func() bool { return netpoll.ConnsHot() == 0 }) {
		t.Fatalf("%d Conns hot before the test", netpoll.ConnsHot())
	}
	t.Cleanup(netpoll.SetHotTick(time.Hour))
	g := newGroup(t, cfgOf(t, set))
	client, server := stdPipe(t, listen(t, g, "tcp"))
	return g, client, server.(*netpoll.Conn), expired
}

// heatRead makes server hot: read parks woken in a row (hotread goes hot
// on the second after it was last cold), each written to only once the
// Read waits, cold or hot.
func heatRead(t *testing.T, client net.Conn, server *netpoll.Conn) {
	t.Helper()
	done, expired := watchdog(t, time.Minute)
	defer done()
	for i := range 3 {
		if hot, _ := netpoll.ConnHot(server); hot {
			return
		}
		woken := netpoll.PollerWoken(server)
		res := readAsync(server, 1)
		cold := false
		if !await(expired, func() bool {
			_, w := netpoll.ConnHot(server)
			cold = netpoll.ReadState(server) == "waiting"
			return w || cold
		}) {
			t.Fatalf("round %d: the Read never waited", i)
		}
		if _, err := client.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := awaitResult(t, res, expired, "a Read"); err != nil {
			t.Fatal(err)
		}
		// The poller counts what a batch woke after the batch: a test's
		// counts taken after heatRead must not see this round's.
		if cold && !await(expired, func() bool { return netpoll.PollerWoken(server) != woken }) {
			t.Fatalf("round %d: the poller never counted the Read it woke", i)
		}
	}
	if hot, _ := netpoll.ConnHot(server); !hot {
		t.Fatal("the Conn is not hot after three parked reads woken in a row")
	}
}

// readAsync starts a Read of n bytes on c.
func readAsync(c net.Conn, n int) <-chan error {
	res := make(chan error, 1)
	go func() {
		b := make([]byte, n)
		_, err := io.ReadFull(c, b)
		res <- err
	}()
	return res
}

// awaitColdPark waits until a Read of c parks on the poller, not hot.
func awaitColdPark(t *testing.T, c *netpoll.Conn, expired <-chan struct{}, what string) {
	t.Helper()
	if !await(expired, func() bool { return netpoll.ReadState(c) == "waiting" }) {
		t.Fatal(what + " never parked cold")
	}
}

// feed writes msg to c and waits for res, a Read's result, to be nil.
func feed(t *testing.T, c net.Conn, msg string, res <-chan error, expired <-chan struct{}, what string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	if err := awaitResult(t, res, expired, what); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// awaitHotWait waits until a Read of c waits on the runtime's netpoller.
func awaitHotWait(t *testing.T, c *netpoll.Conn, expired <-chan struct{}) {
	t.Helper()
	if !await(expired, func() bool { _, w := netpoll.ConnHot(c); return w }) {
		t.Fatal("the hot Read never waited")
	}
}

// TestHotReadHops counts a hot Conn's path over 2,000 echoes: the poller
// never wakes nor polls (the runtime readies the reader itself), nothing
// is skipped, the registration is modified once (the disarm as it went
// hot), and the Conn stays hot with one dup more open.
func TestHotReadHops(t *testing.T) {
	g, client, server, _ := hotReadPair(t, "hotread=on,spin=off")
	heatRead(t, client, server)
	const n = 2000
	before := netpoll.Counters(g).Total
	pingPongConn(t, client, server, n)
	d := netpoll.Counters(g).Total
	t.Logf("%d echoes: read parks %d, EAGAIN %d, wakeups %d, epoll_waits %d, woken %d, MOD %d",
		n, d.ReadParks-before.ReadParks, d.EAGAIN-before.EAGAIN, d.Wakeups-before.Wakeups,
		d.EpollWaits-before.EpollWaits, d.Woken-before.Woken, d.CtlMod-before.CtlMod)
	if w := d.Wakeups - before.Wakeups; w != 0 {
		t.Errorf("poller wakeups %d during %d hot echoes, want 0", w, n)
	}
	if w := d.EpollWaits - before.EpollWaits; w != 0 {
		t.Errorf("poller epoll_waits %d during %d hot echoes, want 0", w, n)
	}
	if w := d.Woken - before.Woken; w != 0 {
		t.Errorf("operations woken by the poller %d, want 0", w)
	}
	if s := d.ShortSkips - before.ShortSkips; s != 0 {
		t.Errorf("short skips %d while hot, want 0", s)
	}
	if p := d.ReadParks - before.ReadParks; p == 0 || p > n+1 || p != d.EAGAIN-before.EAGAIN {
		t.Errorf("read parks %d, EAGAIN %d for %d echoes: want 1 to %d, one per EAGAIN (each in the runtime)", p, d.EAGAIN-before.EAGAIN, n, n+1)
	}
	if d.CtlMod != 1 || d.HotEntries != 1 || d.HotExits != 0 || d.HotRefused != 0 {
		t.Errorf("MOD %d, hot entries %d, exits %d, refused %d: want 1, 1, 0, 0", d.CtlMod, d.HotEntries, d.HotExits, d.HotRefused)
	}
	if netpoll.ConnsHot() != 1 {
		t.Errorf("%d Conns hot, want 1", netpoll.ConnsHot())
	}
}

// TestHotReadAllocs: a hot echo allocates nothing on the server side.
func TestHotReadAllocs(t *testing.T) {
	_, client, server, _ := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	msg, got, buf := []byte("hot"), make([]byte, 3), make([]byte, 3)
	allocs := testing.AllocsPerRun(500, func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := server.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatal(err)
		}
	})
	// The package net client allocates nothing per round trip either
	// (TestParkAllocatesNothing's premise).
	if allocs != 0 {
		t.Errorf("%v allocations per hot echo, want 0", allocs)
	}
}

// TestHotReadGoesCold: a Read that waits hot through two sweeps goes cold
// and goes on waiting on the poller (the dup closed, the registration
// whole: the poller wakes it); two more parked wakes make it hot again.
func TestHotReadGoesCold(t *testing.T) {
	g, client, server, expired := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	fds := openFDs(t)
	res := readAsync(server, 4)
	awaitHotWait(t, server, expired)
	netpoll.SweepConnsHot()
	netpoll.SweepConnsHot()
	awaitColdPark(t, server, expired, "the kicked Read")
	if hot, _ := netpoll.ConnHot(server); hot || netpoll.ConnsHot() != 0 {
		t.Fatalf("still hot after two sweeps (%d hot)", netpoll.ConnsHot())
	}
	if now := openFDs(t); now != fds-1 {
		t.Errorf("open fds %d after going cold, want %d (the dup closed)", now, fds-1)
	}
	before := netpoll.Counters(g).Total
	feed(t, client, "cold", res, expired, "the cold Read")
	// The poller counts what a batch woke after the batch: the Read it
	// woke may return first.
	await(expired, func() bool { return netpoll.Counters(g).Total.Woken != before.Woken })
	if d := netpoll.Counters(g).Total; d.Woken-before.Woken != 1 || d.HotExits != 1 {
		t.Errorf("woken by the poller %d, hot exits %d: want 1 and 1", d.Woken-before.Woken, d.HotExits)
	}
	heatRead(t, client, server)
	if d := netpoll.Counters(g).Total; d.HotEntries != 2 {
		t.Errorf("hot entries %d, want 2", d.HotEntries)
	}
}

// TestHotReadColdIdle: a hot Conn nobody reads goes cold from the sweeper
// (its dup closed), and its next Read is served cold.
func TestHotReadColdIdle(t *testing.T) {
	g, client, server, expired := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	fds := openFDs(t)
	netpoll.SweepConnsHot()
	if hot, _ := netpoll.ConnHot(server); !hot {
		t.Fatal("cold after one sweep: the first sweep after going hot must find it changed")
	}
	netpoll.SweepConnsHot()
	if hot, _ := netpoll.ConnHot(server); hot {
		t.Fatal("still hot after two sweeps with no Read")
	}
	if now := openFDs(t); now != fds-1 {
		t.Errorf("open fds %d after going cold, want %d", now, fds-1)
	}
	res := readAsync(server, 2)
	awaitColdPark(t, server, expired, "the Read")
	feed(t, client, "ok", res, expired, "the cold Read")
	if d := netpoll.Counters(g).Total; d.HotExits != 1 {
		t.Errorf("hot exits %d, want 1", d.HotExits)
	}
}

// TestHotReadClose: Close of a hot Conn whose Read waits on the runtime
// ends the Read with net.ErrClosed, and leaves neither the socket nor the
// dup open: the peer reads EOF.
func TestHotReadClose(t *testing.T) {
	g, client, server, expired := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	fds := openFDs(t)
	res := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if err := awaitResult(t, res, expired, "the hot Read after Close"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("hot Read after Close = %v, want net.ErrClosed", err)
	}
	if now := openFDs(t); now != fds-2 {
		t.Errorf("open fds %d after Close, want %d (the socket and its dup)", now, fds-2)
	}
	client.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("peer read after Close = %d, %v; want EOF", n, err)
	}
	if d := netpoll.Counters(g).Total; d.HotExits != 1 || netpoll.ConnsHot() != 0 {
		t.Errorf("hot exits %d, %d hot: want 1 and 0", d.HotExits, netpoll.ConnsHot())
	}
}

// TestHotReadCloseIdle: Close of a hot Conn with no Read in flight closes
// the dup too.
func TestHotReadCloseIdle(t *testing.T) {
	_, client, server, _ := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	fds := openFDs(t)
	server.Close()
	if now := openFDs(t); now != fds-2 {
		t.Errorf("open fds %d after Close, want %d (the socket and its dup)", now, fds-2)
	}
	if netpoll.ConnsHot() != 0 {
		t.Errorf("%d Conns hot after Close, want 0", netpoll.ConnsHot())
	}
}

// TestHotReadDeadline: the read deadline ends a hot wait, is moved while
// the Read waits (the kick re-mirrors it), and a cleared one lets the
// Read wait for data, hot throughout.
func TestHotReadDeadline(t *testing.T) {
	_, client, server, expired := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)

	// A past deadline fails at once.
	server.SetReadDeadline(time.Unix(1, 0))
	if _, err := server.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with a past deadline = %v", err)
	}
	// A far deadline, then a near one set while the Read waits.
	server.SetReadDeadline(time.Now().Add(time.Hour))
	res := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	server.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if err := awaitResult(t, res, expired, "the hot Read with a near deadline"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("hot Read = %v, want a timeout", err)
	}
	// Cleared while a Read waits: it gets the data.
	server.SetReadDeadline(time.Now().Add(time.Hour))
	res = readAsync(server, 1)
	awaitHotWait(t, server, expired)
	server.SetReadDeadline(time.Time{})
	client.Write([]byte("x"))
	if err := awaitResult(t, res, expired, "the hot Read"); err != nil {
		t.Fatalf("hot Read = %v", err)
	}
	if hot, _ := netpoll.ConnHot(server); !hot {
		t.Error("a deadline made the Conn cold")
	}
}

// TestHotReadWriterParks: a hot Conn's Write that meets backpressure parks
// on the poller (its registration armed for that park) and is woken as
// the peer drains, while a Read waits hot.
func TestHotReadWriterParks(t *testing.T) {
	g, client, server, expired := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	server.SetWriteBuffer(64 << 10)
	client.(*net.TCPConn).SetReadBuffer(64 << 10)
	rd := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	before := netpoll.Counters(g).Total.WriteParks
	wr := make(chan error, 1)
	go func() {
		_, err := server.Write(make([]byte, 4<<20))
		wr <- err
	}()
	if !await(expired, func() bool { return netpoll.Counters(g).Total.WriteParks > before }) {
		t.Fatal("the 4 MiB Write never parked")
	}
	if _, err := io.CopyN(io.Discard, client, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := awaitResult(t, wr, expired, "the Write"); err != nil {
		t.Fatal(err)
	}
	client.Write([]byte("r"))
	if err := awaitResult(t, rd, expired, "the hot Read"); err != nil {
		t.Fatal(err)
	}
}

// TestHotReadAuto: hotread=auto with GOMAXPROCS 1 reads hot only while
// the poller's typical idle gap is beyond spinning; a sweep makes a busy Conn cold only
// when half or more of its parks since the last sweep ended within the
// spin budget, and it stays cold through a tick after that; with
// GOMAXPROCS 2 it goes hot whatever the gaps.
func TestHotReadAuto(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	netpoll.ForgetProcs()
	defer netpoll.ForgetProcs()
	// The gaps are as the test says (SetSpinFar), and so is the budget
	// (SetHotParkBudget).
	g, client, server, expired := hotReadPair(t, "hotread=auto")
	entries := func(want uint64, what string) {
		t.Helper()
		if d := netpoll.Counters(g).Total; d.HotEntries != want {
			t.Fatalf("%s: hot entries %d, want %d", what, d.HotEntries, want)
		}
	}
	// Gaps a spin may see: no hot read, the spins learn them.
	near := netpoll.SetSpinFar(false)
	pingPongParked(t, client, server, 4)
	entries(0, "one P, gaps within spinning")
	near()
	// Gaps beyond it: hot on the busy wakes.
	defer netpoll.SetSpinFar(true)()
	heatRead(t, client, server)
	entries(1, "one P, gaps beyond spinning")

	// Every park longer than the budget: no spin would have seen them,
	// and a sweep leaves the Conn hot.
	restore := netpoll.SetHotParkBudget(time.Nanosecond)
	parkHot(t, client, server, expired, 4)
	netpoll.SweepConnsHot()
	if hot, _ := netpoll.ConnHot(server); !hot {
		t.Fatal("a sweep made a Conn cold whose parks were all longer than the spin budget")
	}
	restore()

	// Every park within it: the next sweep makes the Conn cold (its
	// waiting Read kicked), though it is busy.
	defer netpoll.SetHotParkBudget(time.Hour)()
	parkHot(t, client, server, expired, 4)
	res := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	netpoll.SweepConnsHot()
	awaitColdPark(t, server, expired, "the kicked Read")
	feed(t, client, "a", res, expired, "the cold Read")
	if d := netpoll.Counters(g).Total; d.HotExits != 1 {
		t.Fatalf("hot exits %d after a sweep of short parks, want 1", d.HotExits)
	}
	// Held cold through the tick (an hour here), though the gaps were
	// far, so that the poller sees the wakes and learns them.
	pingPongParked(t, client, server, 4)
	entries(1, "held cold")
	// Past the hold (the clock a tick on): hot again on two busy wakes.
	clock := netpoll.SetServeClock(func() time.Duration { return 1 << 62 })
	pingPongParked(t, client, server, 2)
	clock()
	entries(2, "past the hold")
	parkHot(t, client, server, expired, 1) // hot, waiting on the runtime

	// GOMAXPROCS 2: hot whatever the gaps.
	res = readAsync(server, 1)
	awaitHotWait(t, server, expired)
	netpoll.SweepConnsHot() // the hour's short parks: cold, held
	awaitColdPark(t, server, expired, "the kicked Read")
	feed(t, client, "b", res, expired, "the cold Read")
	runtime.GOMAXPROCS(2)
	netpoll.ForgetProcs()
	defer netpoll.SetSpinFar(false)()
	clock = netpoll.SetServeClock(func() time.Duration { return 1 << 62 })
	pingPongParked(t, client, server, 2)
	clock()
	entries(3, "GOMAXPROCS 2, gaps within spinning")
}

// TestHotReadAutoFixedSpin: hotread=auto set beside a fixed spin budget
// reads cold with one P, however far the gaps: the spins asked for see the
// wakes. With two Ps it reads hot, and a sweep with one P again makes it
// cold.
func TestHotReadAutoFixedSpin(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	netpoll.ForgetProcs()
	defer netpoll.ForgetProcs()
	defer netpoll.SetSpinFar(true)()
	g, client, server, expired := hotReadPair(t, "hotread=auto,spin=20us")
	pingPongParked(t, client, server, 4)
	if d := netpoll.Counters(g).Total; d.HotEntries != 0 {
		t.Fatalf("hot entries %d with one P and a fixed spin budget, want 0", d.HotEntries)
	}
	runtime.GOMAXPROCS(2)
	netpoll.ForgetProcs()
	heatRead(t, client, server)
	// Back to one P: the next sweep makes it cold, its parks untimed.
	res := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	runtime.GOMAXPROCS(1)
	netpoll.ForgetProcs()
	netpoll.SweepConnsHot()
	awaitColdPark(t, server, expired, "the kicked Read")
	feed(t, client, "a", res, expired, "the cold Read")
}

// parkHot has hot server's Read park n times on the runtime's netpoller,
// each then woken by a byte of client's.
func parkHot(t *testing.T, client net.Conn, server *netpoll.Conn, expired <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		res := readAsync(server, 1)
		awaitHotWait(t, server, expired)
		feed(t, client, string(rune('0'+i)), res, expired, "a hot Read")
	}
}

// TestHotReadOutOfFDs: a busy Conn that cannot have its dup (EMFILE) stays
// cold, counted, and loses nothing.
func TestHotReadOutOfFDs(t *testing.T) {
	g, client, server, _ := hotReadPair(t, "hotread=on")
	raw, err := client.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sock int
	raw.Control(func(fd uintptr) { sock = int(fd) })
	free := exhaustFDs(t, sock, 0)
	pingPongParked(t, client, server, 4)
	free()
	d := netpoll.Counters(g).Total
	if d.HotEntries != 0 || d.HotRefused == 0 {
		t.Errorf("hot entries %d, refused %d out of fds: want 0 and at least 1", d.HotEntries, d.HotRefused)
	}
	heatRead(t, client, server) // with fds again
}

// wantConfigErrors checks that each of settings fails, in ParseConfig or
// in New, with a *ConfigError naming key.
func wantConfigErrors(t *testing.T, key string, settings ...string) {
	t.Helper()
	for _, s := range settings {
		c, err := netpoll.ParseConfig(s)
		if err == nil {
			var g *netpoll.Group
			if g, err = netpoll.New(c); err == nil {
				g.Close()
			}
		}
		var ce *netpoll.ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%q: %v, want a *ConfigError for %s", s, err, key)
		}
	}
}

// TestHotReadConfig: hotread's values, its default, and the settings it
// cannot go with.
func TestHotReadConfig(t *testing.T) {
	for _, s := range []string{"hotread=on", "hotread=off", "hotread=auto", "hotread=default", "hotread=off,mode=lt", "hotread=off,wait=inline", "hotread=on,spin=50us"} {
		g, err := netpoll.New(cfgOf(t, s))
		if err != nil {
			t.Errorf("New(%q) = %v", s, err)
			continue
		}
		g.Close()
	}
	wantConfigErrors(t, "hotread", "hotread=on,mode=oneshot", "hotread=auto,mode=lt", "hotread=on,wait=block", "hotread=on,wait=inline", "hotread=yes")
	for s, want := range map[string]string{"": "auto", "spin=50us": "off", "mode=oneshot": "off", "wait=block": "off", "hotread=on": "on"} {
		if got := netpoll.HotReadSetting(cfgOf(t, s)); got != want {
			t.Errorf("%q: hotread %s, want %s", s, got, want)
		}
	}
}
