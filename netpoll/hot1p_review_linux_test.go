package netpoll_test

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// A review's tests of hotread=auto with one P (c97c714): each branch of
// woken, hotWait.read, timed, spinnable and sweepConn that TestHotReadAuto
// leaves unpinned. They assert counts and states, never timings: the
// budget a park is timed against is an hour (every park short) or a
// nanosecond (every park long), and the line itself is checked on timed.

// oneP runs the rest of t with GOMAXPROCS 1, seen by hotread=auto at once.
func oneP(t *testing.T) {
	t.Helper()
	prev := runtime.GOMAXPROCS(1)
	netpoll.ForgetProcs()
	t.Cleanup(func() {
		runtime.GOMAXPROCS(prev)
		netpoll.ForgetProcs()
	})
}

// parkWith has hot server's Read park n times, each timed against budget.
func parkWith(t *testing.T, client net.Conn, server *netpoll.Conn, expired <-chan struct{}, budget time.Duration, n int) {
	t.Helper()
	restore := netpoll.SetHotParkBudget(budget)
	defer restore()
	parkHot(t, client, server, expired, n)
}

func wantHot(t *testing.T, server *netpoll.Conn, want bool, what string) {
	t.Helper()
	if hot, _ := netpoll.ConnHot(server); hot != want {
		t.Fatalf("%s: hot %v, want %v", what, hot, want)
	}
}

func wantParks(t *testing.T, server *netpoll.Conn, parks, shorts uint32, what string) {
	t.Helper()
	if p, s := netpoll.HotParks(server); p != parks || s != shorts {
		t.Fatalf("%s: %d parks timed, %d short; want %d and %d", what, p, s, parks, shorts)
	}
}

// hot1pPair is hotReadPair with one P and gaps said to be beyond spinning,
// its Conn made hot.
func hot1pPair(t *testing.T, set string) (*netpoll.Group, net.Conn, *netpoll.Conn, <-chan struct{}) {
	t.Helper()
	oneP(t)
	g, client, server, expired := hotReadPair(t, set)
	t.Cleanup(netpoll.SetSpinFar(true))
	heatRead(t, client, server)
	wantHot(t, server, true, "one P, gaps beyond spinning")
	return g, client, server, expired
}

// TestHot1pReviewSpinOff: with spinning off (no adaptive spinning, B 0)
// an auto Conn with one P goes hot on its busy wakes, with nothing said of
// the gaps, and a sweep leaves it hot: every park is long.
func TestHot1pReviewSpinOff(t *testing.T) {
	oneP(t)
	_, client, server, expired := hotReadPair(t, "hotread=auto,spin=off")
	heatRead(t, client, server)
	wantHot(t, server, true, "one P, spin=off")
	parkHot(t, client, server, expired, 3)
	wantParks(t, server, 3, 0, "spin=off")
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "a sweep with spin=off")
}

// TestHot1pReviewNoParks: a hot Read that finds its input queued does not
// park, and is not timed; a sweep after reads with no park timed leaves
// the Conn hot (spinnable: no parks is not half short).
func TestHot1pReviewNoParks(t *testing.T) {
	_, client, server, expired := hot1pPair(t, "hotread=auto")
	wantParks(t, server, 0, 0, "just hot (its reads so far were cold)")
	// One long park that reads one byte of two; the second stays queued.
	restore := netpoll.SetHotParkBudget(time.Nanosecond)
	res := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	feed(t, client, "xy", res, expired, "a hot Read")
	restore()
	wantParks(t, server, 1, 0, "one long park")
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "a sweep of one long park")
	defer netpoll.SetHotParkBudget(time.Hour)()
	if err := awaitResult(t, readAsync(server, 1), expired, "the queued byte's Read"); err != nil {
		t.Fatal(err)
	}
	wantParks(t, server, 0, 0, "a Read of queued input")
	netpoll.SweepConnsHot() // it read (seq moved), no park timed
	wantHot(t, server, true, "a sweep of reads that never parked")
}

// TestHot1pReviewHalf: the sweeper's line is half the parks short, and the
// count starts again at each sweep: one short of three leaves the Conn
// hot; then one short of two (not of five) makes it cold.
func TestHot1pReviewHalf(t *testing.T) {
	g, client, server, expired := hot1pPair(t, "hotread=auto")
	parkWith(t, client, server, expired, time.Nanosecond, 2)
	parkWith(t, client, server, expired, time.Hour, 1)
	wantParks(t, server, 3, 1, "two long, one short")
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "a sweep of one short park in three")
	wantParks(t, server, 0, 0, "after a sweep")
	parkWith(t, client, server, expired, time.Nanosecond, 1)
	parkWith(t, client, server, expired, time.Hour, 1)
	netpoll.SweepConnsHot() // no Read in flight: made cold by the sweep itself (coldIdle)
	wantHot(t, server, false, "a sweep of one short park in two")
	if d := netpoll.Counters(g).Total; d.HotEntries != 1 || d.HotExits != 1 {
		t.Fatalf("hot entries %d, exits %d: want 1 and 1", d.HotEntries, d.HotExits)
	}
}

// TestHot1pReviewCountReset: parks counted before a sweep do not count at
// the next: two long, a sweep, then one short makes the Conn cold.
func TestHot1pReviewCountReset(t *testing.T) {
	_, client, server, expired := hot1pPair(t, "hotread=auto")
	parkWith(t, client, server, expired, time.Nanosecond, 2)
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "a sweep of long parks")
	parkWith(t, client, server, expired, time.Hour, 1)
	netpoll.SweepConnsHot()
	wantHot(t, server, false, "a sweep of one short park since the last")
}

// TestHot1pReviewProcsFall: a Conn that went hot with two Ps, GOMAXPROCS
// then 1 with nothing else reading it: a sweep tells its reader, which
// then times its parks, and the next sweep makes it cold for short ones.
func TestHot1pReviewProcsFall(t *testing.T) {
	prev := runtime.GOMAXPROCS(2)
	netpoll.ForgetProcs()
	defer func() {
		runtime.GOMAXPROCS(prev)
		netpoll.ForgetProcs()
	}()
	_, client, server, expired := hotReadPair(t, "hotread=auto")
	defer netpoll.SetSpinFar(false)()
	heatRead(t, client, server)
	wantHot(t, server, true, "two Ps")
	parkWith(t, client, server, expired, time.Hour, 1)
	wantParks(t, server, 0, 0, "two Ps: parks not timed")
	runtime.GOMAXPROCS(1) // no ForgetProcs: only the sweep tells the reader
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "the first sweep with one P (nothing timed yet)")
	parkWith(t, client, server, expired, time.Hour, 2)
	wantParks(t, server, 2, 2, "one P, told by the sweep")
	netpoll.SweepConnsHot()
	wantHot(t, server, false, "a sweep of short parks with one P")
}

// TestHot1pReviewProcsRise: parks timed with one P do not make the Conn
// cold at a sweep that finds GOMAXPROCS 2, and that sweep drops them.
func TestHot1pReviewProcsRise(t *testing.T) {
	_, client, server, expired := hot1pPair(t, "hotread=auto")
	parkWith(t, client, server, expired, time.Hour, 2)
	wantParks(t, server, 2, 2, "one P")
	runtime.GOMAXPROCS(2)
	netpoll.ForgetProcs()
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "a sweep with two Ps after short parks")
	wantParks(t, server, 0, 0, "after a sweep with two Ps")
}

// TestHot1pReviewOn: hotread=on with one P neither times its parks nor is
// made cold by a sweep for them.
func TestHot1pReviewOn(t *testing.T) {
	_, client, server, expired := hot1pPair(t, "hotread=on")
	parkWith(t, client, server, expired, time.Hour, 2)
	wantParks(t, server, 0, 0, "hotread=on")
	netpoll.SweepConnsHot()
	wantHot(t, server, true, "hotread=on after a sweep")
}

// TestHot1pReviewKickedPark: a hot park a deadline ends (its read(2)
// having found EAGAIN) is not timed, nor counted with the Read after it,
// which finds its input queued and does not park.
func TestHot1pReviewKickedPark(t *testing.T) {
	g, client, server, expired := hot1pPair(t, "hotread=auto")
	defer netpoll.SetHotParkBudget(time.Hour)()
	eagain := netpoll.Counters(g).Total.EAGAIN
	res := readAsync(server, 1)
	if !await(expired, func() bool { return netpoll.Counters(g).Total.EAGAIN > eagain }) {
		t.Fatal("the hot Read never found EAGAIN")
	}
	server.SetReadDeadline(time.Unix(1, 0)) // past: the wait is kicked
	if err := awaitResult(t, res, expired, "the Read past its deadline"); !os.IsTimeout(err) {
		t.Fatalf("the Read past its deadline: %v, want a timeout", err)
	}
	wantHot(t, server, true, "after a deadline")
	wantParks(t, server, 0, 0, "a park a deadline ended")
	server.SetReadDeadline(time.Time{})
	if _, err := client.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	fd := netpoll.FD(server)
	if !await(expired, func() bool { n, err := unix.IoctlGetInt(fd, unix.SIOCINQ); return err == nil && n == 1 }) {
		t.Fatal("the byte never came")
	}
	if err := awaitResult(t, readAsync(server, 1), expired, "the Read after"); err != nil {
		t.Fatal(err)
	}
	wantParks(t, server, 0, 0, "a Read of queued input after a deadline's park")
}

// TestHot1pReviewTimedLine: a park is short up to twice the budget, and
// with no budget (spinning off) never.
func TestHot1pReviewTimedLine(t *testing.T) {
	const b = 10 * time.Microsecond
	for _, c := range []struct {
		budget, dur time.Duration
		short       uint32
	}{
		{b, b, 1},
		{b, 2 * b, 1},
		{b, 2*b + 1, 0},
		{0, 1, 0},
	} {
		if p, s := netpoll.HotTimed(c.budget, c.dur); p != 1 || s != c.short {
			t.Errorf("budget %v, park %v: %d parks, %d short; want 1 and %d", c.budget, c.dur, p, s, c.short)
		}
	}
}

// TestHot1pReviewSpinFarRuns: spinFar follows the typical gap, a moving
// average: sparse traffic makes it far, two back-to-back gaps after 800
// sparse ones do not make it near (the average cannot fall from 200µs to
// within 2B in two steps of 1/8), and 500 do. One policy and one poller's
// counters run through all four, as TestAutoSpinFollowsTraffic's runs do.
func TestHot1pReviewSpinFarRuns(t *testing.T) {
	repeat := func(gap time.Duration, n int) []time.Duration {
		gaps := make([]time.Duration, n)
		for i := range gaps {
			gaps[i] = gap
		}
		return gaps
	}
	b2b, sparse := 3*time.Microsecond, 200*time.Microsecond
	got := netpoll.SpinFarRuns(t, repeat(b2b, 500), repeat(sparse, 800), repeat(b2b, 3), repeat(b2b, 500))
	want := []bool{false, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("spinFar after run %d (back to back, sparse, 2 back to back, back to back): %v, want %v", i, got, want)
			break
		}
	}
}
