package netpoll_test

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// The stats API: Group.Stats, the few counters a user watches; ReadStats
// and ReadPollerStats, every counter by name; AllStats, the names; and
// Server.ReadStats, the server's. netpoll.Counters reads the same counters
// as a struct, so each figure is checked against it.

// quiet returns g's counters at a moment they stand still, and what read
// (called with g) returned at that moment: read runs between two snapshots
// of Counters that are equal, so that what it read cannot be a moment off
// from them. A poller may still count an event after the traffic ends (a
// write's EPOLLOUT edge, a spin that gives up), so it retries until the
// counters hold still.
func quiet[T any](t *testing.T, g *netpoll.Group, read func(*netpoll.Group) T) (netpoll.GroupStats, T) {
	t.Helper()
	done, expired := watchdog(t, time.Minute)
	defer done()
	for {
		before := netpoll.Counters(g)
		v := read(g)
		after := netpoll.Counters(g)
		if reflect.DeepEqual(before, after) {
			return after, v
		}
		select {
		case <-expired:
			t.Fatalf("the counters never held still: %+v, then %+v", before.Total, after.Total)
		default:
		}
	}
}

// TestStats: after traffic, each of Group.Stats's figures is the counter
// it names: Conns the connections open now (both ends of 3, on a group
// holding both: 6; the listener is a descriptor, not a connection), Accepts
// the connections accepted, Parks the reads and writes that parked, Wakeups
// the poller's. Closing the connections brings Conns back to 0 at once:
// Close returns once the connection is out of the group's table.
func TestStats(t *testing.T) {
	const conns, rounds = 3, 50
	g := newGroup(t, netpoll.Config{DisableSpin: true}) // every parked Read wakes the poller
	l := listen(t, g, "tcp")
	var all []net.Conn
	for range conns {
		client, server := pipe(t, g, l)
		pingPongParked(t, client, server, rounds)
		all = append(all, client, server)
	}
	c, s := quiet(t, g, (*netpoll.Group).Stats)
	want := netpoll.Stats{
		Conns:   c.Total.Conns,
		Accepts: c.Total.Accepts,
		Parks:   c.Total.ReadParks + c.Total.WriteParks,
		Wakeups: c.Total.Wakeups,
	}
	if s != want {
		t.Errorf("Stats() = %+v; the counters (%+v) say %+v", s, c.Total, want)
	}
	if s.Conns != 2*conns || s.Accepts != conns || c.Total.Descriptors != 2*conns+1 {
		t.Errorf("Stats() = %+v, %d descriptors; want %d conns, %d accepts, %d descriptors with the listener", s, c.Total.Descriptors, 2*conns, conns, 2*conns+1)
	}
	// Each round's server Read parked once (pingPongParked), and a poller
	// that does not spin had to be woken to wake it.
	if s.Parks < conns*rounds || s.Wakeups == 0 {
		t.Errorf("Stats() = %+v; want at least %d parks and some wakeups", s, conns*rounds)
	}

	for i, conn := range all {
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		if got, open := g.Stats().Conns, uint64(len(all)-i-1); got != open {
			t.Errorf("Stats().Conns = %d with %d connections open", got, open)
		}
	}
	if st, c := g.Stats(), netpoll.Counters(g); st.Conns != 0 || c.Total.Conns != 0 || c.Total.Descriptors != 1 || st.Accepts != conns {
		t.Errorf("every connection closed: Stats() = %+v, %d conns and %d descriptors counted; want 0 conns, the listener, %d accepts kept", st, c.Total.Conns, c.Total.Descriptors, conns)
	}
}

// groupStatNames is every name AllStats gives that a Group reads.
func groupStatNames() []string {
	var names []string
	for _, d := range netpoll.AllStats() {
		if !d.Server {
			names = append(names, d.Name)
		}
	}
	return names
}

// samplesOf returns a sample for each name, its Value set to garbage that a
// read must overwrite.
func samplesOf(names ...string) []netpoll.Sample {
	s := make([]netpoll.Sample, len(names))
	for i, n := range names {
		s[i] = netpoll.Sample{Name: n, Value: 0xdead}
	}
	return s
}

// statOf returns, for a few statistics, the counter it reads.
var statOf = map[string]func(c netpoll.GroupStats, p netpoll.PollerStats) uint64{
	"/netpoll/conns:conns":               func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.Conns },
	"/netpoll/descriptors:descriptors":   func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.Descriptors },
	"/netpoll/accepts:conns":             func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.Accepts },
	"/netpoll/parks/read:operations":     func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.ReadParks },
	"/netpoll/epoll/waits:calls":         func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.EpollWaits },
	"/netpoll/poller/woken:operations":   func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.Woken },
	"/netpoll/accept/turns-passed:calls": func(_ netpoll.GroupStats, p netpoll.PollerStats) uint64 { return p.AcceptTurns },
	"/netpoll/spin/wake-cost:nanoseconds": func(c netpoll.GroupStats, _ netpoll.PollerStats) uint64 {
		return uint64(c.WakeCost)
	},
}

// TestReadStats: a Group reads every group statistic AllStats names, summed
// over its pollers (ReadStats) or for one (ReadPollerStats), and each
// equals the counter it names.
func TestReadStats(t *testing.T) {
	const pollers = 3
	// Adaptive spinning (the default) for its group-wide wake cost, with
	// ReusePort's socket per poller so that the pollers accept on their
	// own.
	defer netpoll.SetSpinCosts(20*time.Microsecond, 20*time.Microsecond)()
	g := newGroup(t, netpoll.Config{Pollers: pollers, Sharing: netpoll.ReusePort})
	l := listen(t, g, "tcp")
	for range 2 * pollers {
		client, server := pipe(t, g, l)
		pingPongConn(t, client, server, 20)
	}
	names := groupStatNames()
	c, read := quiet(t, g, func(g *netpoll.Group) [][]netpoll.Sample {
		// The group's samples, then each poller's.
		all := [][]netpoll.Sample{samplesOf(names...)}
		if err := g.ReadStats(all[0]); err != nil {
			t.Fatalf("ReadStats(every group statistic): %v", err)
		}
		for i := range pollers {
			all = append(all, samplesOf(names...))
			if err := g.ReadPollerStats(i, all[i+1]); err != nil {
				t.Fatalf("ReadPollerStats(%d, every group statistic): %v", i, err)
			}
		}
		return all
	})
	if c.WakeCost != 20*time.Microsecond || c.Total.Accepts != 2*pollers || c.Total.Conns != 4*pollers {
		t.Fatalf("counters %+v, wake cost %v: want %d accepts, %d conns, a wake cost of 20µs", c.Total, c.WakeCost, 2*pollers, 4*pollers)
	}
	for name, counter := range statOf {
		i := indexOfName(t, read[0], name)
		if got, want := read[0][i].Value, counter(c, c.Total); got != want {
			t.Errorf("ReadStats: %s = %d, the counters say %d", name, got, want)
		}
		for p := range pollers {
			if got, want := read[p+1][i].Value, counter(c, c.Pollers[p]); got != want {
				t.Errorf("ReadPollerStats(%d): %s = %d, the counters say %d", p, name, got, want)
			}
		}
	}
	for i, s := range read[0] {
		if s.Value == 0xdead {
			t.Errorf("ReadStats left %s unread", s.Name)
		}
		// A counter summed over the pollers is the sum of each poller's;
		// a group-wide figure reads the same for each.
		var sum uint64
		for p := range pollers {
			sum += read[p+1][i].Value
		}
		switch s.Name {
		case "/netpoll/spin/wake-cost:nanoseconds", "/netpoll/spin/budget:nanoseconds", "/netpoll/spin/cpu-limit:millicpus":
			for p := range pollers {
				if read[p+1][i].Value != s.Value {
					t.Errorf("%s: poller %d reads %d, the group %d; want the group's figure", s.Name, p, read[p+1][i].Value, s.Value)
				}
			}
		case "/netpoll/spin/block-cost:nanoseconds": // the largest, not the sum
		default:
			if sum != s.Value {
				t.Errorf("%s: the pollers' sum %d, the group's %d", s.Name, sum, s.Value)
			}
		}
	}
}

func indexOfName(t *testing.T, samples []netpoll.Sample, name string) int {
	t.Helper()
	for i, s := range samples {
		if s.Name == name {
			return i
		}
	}
	t.Fatalf("no statistic %s in AllStats", name)
	return -1
}

// TestReadStatsUnknown: a name ReadStats cannot read, unknown or a
// Server's, gets 0 and an error wrapping ErrUnknownStat naming the first
// such; the samples around it are read all the same.
func TestReadStatsUnknown(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l := listen(t, g, "tcp")
	pipe(t, g, l)
	samples := samplesOf("/netpoll/conns:conns", "/netpoll/nonesuch:calls", "/netpoll/accepts:conns", "/server/hand-offs:calls", "")
	err := g.ReadStats(samples)
	if !errors.Is(err, netpoll.ErrUnknownStat) || !strings.Contains(err.Error(), "/netpoll/nonesuch:calls") {
		t.Errorf("ReadStats with unknown names: %v; want an error wrapping ErrUnknownStat naming /netpoll/nonesuch:calls", err)
	}
	if samples[0].Value != 2 || samples[2].Value != 1 {
		t.Errorf("ReadStats read %+v; want 2 conns and 1 accept read beside the unknown names", samples)
	}
	for _, i := range []int{1, 3, 4} {
		if samples[i].Value != 0 {
			t.Errorf("ReadStats set unknown %q to %d, want 0", samples[i].Name, samples[i].Value)
		}
	}
	// One poller: the same for ReadPollerStats.
	samples = samplesOf("/server/conns:conns", "/netpoll/accepts:conns")
	if err := g.ReadPollerStats(0, samples); !errors.Is(err, netpoll.ErrUnknownStat) || samples[0].Value != 0 || samples[1].Value != 1 {
		t.Errorf("ReadPollerStats(0) of a server name: %v, %+v; want ErrUnknownStat, 0, and 1 accept", err, samples)
	}
	// No samples, no error.
	if err := g.ReadStats(nil); err != nil {
		t.Errorf("ReadStats(nil): %v", err)
	}
}

// TestReadPollerStatsRange: a poller number outside the group is an error,
// and leaves the samples alone.
func TestReadPollerStatsRange(t *testing.T) {
	g := newGroup(t, netpoll.Config{Pollers: 2})
	for _, p := range []int{-1, 2, 1 << 20} {
		samples := samplesOf("/netpoll/accepts:conns")
		err := g.ReadPollerStats(p, samples)
		if err == nil || errors.Is(err, netpoll.ErrUnknownStat) {
			t.Errorf("ReadPollerStats(%d) of a group of 2: %v; want an error for the poller", p, err)
		}
		if samples[0].Value != 0xdead {
			t.Errorf("ReadPollerStats(%d) failed but wrote %+v", p, samples)
		}
	}
	if err := g.ReadPollerStats(1, samplesOf("/netpoll/accepts:conns")); err != nil {
		t.Errorf("ReadPollerStats(1) of a group of 2: %v", err)
	}
}

// TestAllStats: every name is unique, a path ending in a unit after a
// colon, described; the Server's are those under /server/.
func TestAllStats(t *testing.T) {
	all := netpoll.AllStats()
	if len(all) == 0 {
		t.Fatal("AllStats is empty")
	}
	seen := map[string]bool{}
	var group, server int
	for _, d := range all {
		if seen[d.Name] {
			t.Errorf("%s listed twice", d.Name)
		}
		seen[d.Name] = true
		path, unit, ok := strings.Cut(d.Name, ":")
		if !ok || unit == "" || strings.ContainsAny(unit, ":/ ") || !strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") || strings.Contains(path, " ") {
			t.Errorf("%q: want /path:unit", d.Name)
		}
		if d.Description == "" || !strings.HasSuffix(d.Description, ".") {
			t.Errorf("%s: description %q, want a sentence", d.Name, d.Description)
		}
		if d.Server != strings.HasPrefix(d.Name, "/server/") {
			t.Errorf("%s: Server %v, want it for the /server/ names alone", d.Name, d.Server)
		}
		if d.Server {
			server++
		} else {
			group++
		}
	}
	if group == 0 || server == 0 {
		t.Errorf("%d group and %d server statistics, want some of each", group, server)
	}
	// AllStats returns a copy: changing it changes nothing.
	all[0].Name = "changed"
	if netpoll.AllStats()[0].Name == "changed" {
		t.Error("AllStats returns the package's own table")
	}
}

// TestServerReadStats: a Server reads every server statistic AllStats names
// and refuses a Group's; the figures it shares with Stats read the same.
// Each connection is left idle after its accept and after each request
// before the next comes, so it is handed off (idle with no goroutine) that
// many times exactly, each hand-off having checked the socket or skipped
// the check.
func TestServerReadStats(t *testing.T) {
	const conns, rounds = 2, 5
	g := newGroup(t, netpoll.Config{})
	s := &netpoll.Server{Handler: echoHandler}
	l := listen(t, g, "tcp")
	serveOn(t, s, l)
	done, stop := watchdog(t, time.Minute)
	defer done()
	idle := func(when string) {
		t.Helper()
		if !await(stop, func() bool {
			st := s.Stats()
			return st.Conns == conns && st.Idle == conns && st.Running == 0 && allServe(s)
		}) {
			t.Fatalf("%s: stats %+v; want %d idle, none running", when, s.Stats(), conns)
		}
	}
	clients := make([]net.Conn, conns)
	for i := range clients {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	idle("accepted")
	for r := range rounds {
		for _, c := range clients {
			roundTrip(t, c, []byte{byte(r)})
		}
		idle(fmt.Sprintf("round %d", r))
	}
	// A hand-off is counted just after the connection enters serve: the
	// last may still be coming.
	const wantHandOffs = conns * (rounds + 1)
	if !await(stop, func() bool { return readHandOffs(t, s).HandOffs >= wantHandOffs }) {
		t.Fatalf("hand-offs %+v, want %d", readHandOffs(t, s), wantHandOffs)
	}
	var names []string
	for _, d := range netpoll.AllStats() {
		if d.Server {
			names = append(names, d.Name)
		}
	}
	samples := samplesOf(names...)
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats(every server statistic): %v", err)
	}
	value := func(name string) uint64 { return samples[indexOfName(t, samples, name)].Value }
	st := s.Stats()
	read := netpoll.ServerStats{
		Conns:       value("/server/conns:conns"),
		Idle:        value("/server/idle:conns"),
		Running:     value("/server/running:handlers"),
		HandlerRuns: value("/server/handler-runs:calls"),
		Panics:      value("/server/panics:calls"),
	}
	if read != st || st.HandlerRuns != conns*rounds || st.Conns != conns {
		t.Errorf("Server.ReadStats read %+v, Stats() %+v; want the same, %d handler runs, %d conns", read, st, conns*rounds, conns)
	}
	handOffs, checks, skips := value("/server/hand-offs:calls"), value("/server/hand-off-checks:calls"), value("/server/hand-off-skips:calls")
	if handOffs != wantHandOffs || checks+skips < handOffs {
		t.Errorf("hand-offs %d (checks %d, skips %d); want %d, each checked or skipped", handOffs, checks, skips, wantHandOffs)
	}

	mixed := samplesOf("/server/conns:conns", "/netpoll/conns:conns", "/netpoll/nonesuch:calls")
	err := s.ReadStats(mixed)
	if !errors.Is(err, netpoll.ErrUnknownStat) || !strings.Contains(err.Error(), "/netpoll/conns:conns") {
		t.Errorf("Server.ReadStats of a group name: %v; want an error wrapping ErrUnknownStat naming it", err)
	}
	if mixed[0].Value != conns || mixed[1].Value != 0 || mixed[2].Value != 0 {
		t.Errorf("Server.ReadStats read %+v; want %d conns, 0 for the names it cannot read", mixed, conns)
	}
	// And a Group refuses every server name.
	samples = samplesOf(names...)
	if err := g.ReadStats(samples); !errors.Is(err, netpoll.ErrUnknownStat) {
		t.Errorf("Group.ReadStats of the server names: %v, want ErrUnknownStat", err)
	}
	for _, s := range samples {
		if s.Value != 0 {
			t.Errorf("Group.ReadStats read %s = %d, want 0", s.Name, s.Value)
		}
	}
}
