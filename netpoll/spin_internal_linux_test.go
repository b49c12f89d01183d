package netpoll

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The adaptive spinning policy on a simulated clock: a loop that polls every
// pollCost while it spins, blocks when the policy says so and is woken
// wakeLatency after the event that ends the idle period. Each case checks
// counts and the written bound (spin_linux.go), never the machine's speed.

const (
	simW           = 5 * time.Microsecond  // the wakeup cost the policy is given
	simBlockCost   = 15 * time.Microsecond // the process CPU one blocked idle period costs
	simPollCost    = 200 * time.Nanosecond
	simWakeLatency = 7 * time.Microsecond
	simMaxBudget   = autoSpinCostK * simBlockCost // 30µs
)

// simResult is what one simulated run did.
type simResult struct {
	periods             int           // idle periods ended by an event
	spun, found, gaveUp int           // the policy's counters
	blocked             int           // idle periods the loop blocked in
	spinTime            time.Duration // the policy's own count of time spun
	maxPerIdle          time.Duration // the most the loop polled idle in one period
	idlePolls           int           // empty polls in all, by the simulated loop
	spunIn              []bool        // per period: the loop polled idle in it
	pollsAfterLast      int           // empty polls after the last event
	st                  *pollerCounters
}

// simulate runs the policy a through one event per gap: after each event
// the loop asks next(1); while it says yes it polls every simPollCost, and
// a poll at or after the event's time sees it. The last gap never ends:
// the loop runs until the policy blocks.
func simulate(t *testing.T, a *autoSpin, gaps []time.Duration) simResult {
	t.Helper()
	var st pollerCounters
	return simulateOn(t, a, &st, gaps)
}

// simEnd is where each policy's last simulated run stopped: its clock,
// which the next run on it continues (monoNow does not go back).
var simEnd = map[*autoSpin]time.Duration{}

// simulateOn is simulate with the poller's counters st, which a caller
// may keep from one run to the next, as a poller does.
func simulateOn(t *testing.T, a *autoSpin, st *pollerCounters, gaps []time.Duration) simResult {
	t.Helper()
	r := simResult{st: st}
	now := simEnd[a] // a policy run before goes on from where it stopped: its idle period began then
	defer func() { simEnd[a] = now }()
	for i, gap := range gaps {
		last := i == len(gaps)-1
		event := now + gap
		empty := 0 // polls in this idle period that found nothing
		for again := a.next(1, now, st); again; again = a.next(0, now, st) {
			now += simPollCost
			if now >= event && !last {
				break // this poll sees the next event
			}
			if empty++; empty > 1e7 {
				t.Fatal("the policy spins without end")
			}
		}
		r.idlePolls += empty
		r.maxPerIdle = max(r.maxPerIdle, time.Duration(empty)*simPollCost)
		if last {
			r.pollsAfterLast = empty
			break
		}
		r.periods++
		r.spunIn = append(r.spunIn, empty > 1) // more than the yield after events
		if now < event {                       // blocked: woken after the event
			r.blocked++
			now = event + simWakeLatency
			simCPU += simBlockCost
		}
	}
	r.spun = int(st.load(cSpinDecisions))
	r.found, r.gaveUp = int(st.load(cSpinFound)), int(st.load(cSpinGaveUp))
	r.spinTime = time.Duration(st.spinNanos.Load())
	if r.found+r.gaveUp > r.spun || r.spun > r.found+r.gaveUp+1 {
		t.Errorf("%d spins decided but %d found + %d gave up", r.spun, r.found, r.gaveUp)
	}
	return r
}

func repeat(gap time.Duration, n int) []time.Duration {
	gaps := make([]time.Duration, n)
	for i := range gaps {
		gaps[i] = gap
	}
	return gaps
}

// simCPU is the simulated process CPU clock: each blocked period adds
// simBlockCost (spinning adds to it too, but is never sampled).
var simCPU = time.Second

func newSimPolicy(t *testing.T) *autoSpin {
	a := newAutoSpin(func() time.Duration { return simW })
	a.cpu = func() time.Duration { return simCPU }
	a.idleStart = 0
	a.budget = autoBudget(simW, 0, 0)
	t.Cleanup(a.release)
	t.Cleanup(func() { delete(simEnd, a) })
	return a
}

// Back to back (gaps inside 2 × the block cost = 30µs): the policy learns
// to spin and then spins through nearly every idle period, finding the
// event each time. With 3µs gaps a blocked period (gap plus 7µs wakeup)
// already shows a short gap; with 15µs it does not at first (22µs > B = 4W
// = 20µs), and only the probes teach; 26µs needs the budget stretched
// toward twice the gap.
func TestAutoSpinBackToBack(t *testing.T) {
	for _, gap := range []time.Duration{3 * time.Microsecond, 15 * time.Microsecond, 26 * time.Microsecond} {
		a := newSimPolicy(t)
		r := simulate(t, a, repeat(gap, 2000))
		if r.gaveUp != 1 { // the spin after the last event, which never ends
			t.Errorf("gap %v: %d spins gave up with every gap inside the budget, want only the last", gap, r.gaveUp)
		}
		// It starts not spinning; probes (one in autoSpinProbe) must turn
		// it within a few probes, after which every period spins.
		settled := -1
		for i := range r.spunIn {
			if allTrue(r.spunIn[i:]) {
				settled = i
				break
			}
		}
		if settled < 0 || settled > 10*autoSpinProbe {
			t.Fatalf("gap %v: did not settle into spinning every idle period (from period %d of %d; %d spun, %d blocked)", gap, settled, r.periods, r.spun, r.blocked)
		}
		if r.found < r.periods-10*autoSpinProbe {
			t.Errorf("gap %v: found %d events by spinning in %d periods", gap, r.found, r.periods)
		}
	}
}

func allTrue(b []bool) bool {
	for _, v := range b {
		if !v {
			return false
		}
	}
	return true
}

// Open loop (gaps beyond the largest budget, 2 × the block cost = 30µs):
// the policy spins only on probes, one idle period in autoSpinProbe.
func TestAutoSpinLongGaps(t *testing.T) {
	for _, gap := range []time.Duration{100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond} {
		a := newSimPolicy(t)
		r := simulate(t, a, repeat(gap, 1600))
		if want := r.periods/autoSpinProbe + 1; r.spun > want {
			t.Errorf("gap %v: spun in %d of %d idle periods, want at most %d (probes only)", gap, r.spun, r.periods, want)
		}
		if r.found != 0 {
			t.Errorf("gap %v: %d spins found an event beyond the budget", gap, r.found)
		}
		// Once the typical gap is known to be over twice the budget, it
		// stops probing: only the first few probes, before that.
		if gap >= 100*time.Microsecond && r.spun > 2 {
			t.Errorf("gap %v: %d probes, want at most 2 once the gaps are known to be long", gap, r.spun)
		}
		checkBound(t, a, r)
	}
}

// checkBound checks the written bound: at most B (plus the one poll that
// crosses it) in any idle period, so at most that per spin in total.
func checkBound(t *testing.T, a *autoSpin, r simResult) {
	t.Helper()
	perIdle := simMaxBudget + 2*simPollCost // the yield poll, B, the poll that crosses B
	if r.maxPerIdle > perIdle {
		t.Errorf("polled idle for %v in one idle period, bound 2 × block cost = %v", r.maxPerIdle, simMaxBudget)
	}
	if r.spinTime > time.Duration(r.spun)*perIdle {
		t.Errorf("spun %v over %d spins, bound %v", r.spinTime, r.spun, time.Duration(r.spun)*perIdle)
	}
	// Besides the spins, one poll per idle period: the poll after events
	// that finds nothing and decides.
	bound := time.Duration(r.spun)*perIdle + time.Duration(r.periods+1)*simPollCost
	if all := time.Duration(r.idlePolls) * simPollCost; all > bound {
		t.Errorf("polled idle for %v in all over %d spins and %d periods, bound %v", all, r.spun, r.periods, bound)
	}
}

// Traffic that changes: back to back, then sparse, then back to back. The
// policy stops spinning within a few missed spins and starts again, and
// says whether the traffic is beyond it to hotread=auto (spinFar: the
// typical gap over 2B; each run has counters of its own, false at first).
func TestAutoSpinFollowsTraffic(t *testing.T) {
	a := newSimPolicy(t)
	r := simulate(t, a, repeat(3*time.Microsecond, 500))
	if a.hitRate < autoSpinOne/2 {
		t.Fatalf("p = %d/256 after back-to-back traffic, want >= 1/2", a.hitRate)
	}
	if r.st.spinFar.Load() {
		t.Error("spinFar after back-to-back traffic")
	}
	r = simulate(t, a, repeat(200*time.Microsecond, 800))
	if !r.st.spinFar.Load() {
		t.Errorf("not spinFar after sparse traffic (typical gap %v, budget %v)", a.gap, a.budget)
	}
	// From p near 1 to below 3/8 takes 8 misses at weight 1/8.
	if r.gaveUp > 8+r.periods/autoSpinProbe+1 || r.found != 0 {
		t.Errorf("sparse traffic: %d spins gave up, %d found in %d periods; want it to stop after 8", r.gaveUp, r.found, r.periods)
	}
	checkBound(t, a, r)
	r = simulate(t, a, repeat(3*time.Microsecond, 500))
	if r.found < r.periods-10*autoSpinProbe {
		t.Errorf("back-to-back again: found %d in %d periods", r.found, r.periods)
	}
	// Far at its first events (the typical gap of the sparse traffic),
	// near again once the average has come down.
	if r.st.spinFar.Load() {
		t.Errorf("spinFar after back-to-back traffic again (typical gap %v, budget %v)", a.gap, a.budget)
	}
}

// Random gaps from both sides of B: the bound holds in every idle period.
func TestAutoSpinBoundRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gaps := make([]time.Duration, 5000)
	for i := range gaps {
		gaps[i] = time.Duration(rng.ExpFloat64() * float64(12*time.Microsecond))
	}
	a := newSimPolicy(t)
	r := simulate(t, a, gaps)
	if r.spun == 0 || r.blocked == 0 {
		t.Errorf("mixed gaps: spun %d, blocked %d; want both", r.spun, r.blocked)
	}
	checkBound(t, a, r)
}

// Idle: after its last event the poller spins at most B, then blocks.
func TestAutoSpinStopsWhenIdle(t *testing.T) {
	a := newSimPolicy(t)
	gaps := append(repeat(3*time.Microsecond, 500), 0) // the last gap never ends
	r := simulate(t, a, gaps)
	if r.pollsAfterLast <= 1 {
		t.Fatal("no spin after the last event: the policy was not spinning")
	}
	if limit := int(a.budget/simPollCost) + 2; r.pollsAfterLast > limit {
		t.Errorf("%d polls after the last event, want at most %d (B = %v)", r.pollsAfterLast, limit, a.budget)
	}
	if a.phase != phaseBlock || a.slot {
		t.Errorf("after the spin: phase %d, slot %v; want blocked, slot released", a.phase, a.slot)
	}
}

// The spinning slots: with every slot taken, a poller that wants to spin
// blocks instead, and it gets its slot back once one is free.
func TestAutoSpinSlots(t *testing.T) {
	a := newSimPolicy(t)
	a.hitRate = autoSpinOne
	taken := spinners.Swap(1 << 20)
	var st pollerCounters
	if a.next(1, 0, &st) && a.next(0, time.Microsecond, &st) {
		t.Error("spun with no free spinning slot")
	}
	if a.slot || st.load(cSpinDecisions) != 0 {
		t.Errorf("slot %v, %d spins with no free spinning slot", a.slot, st.load(cSpinDecisions))
	}
	spinners.Store(taken)
	if !a.next(1, 2*time.Microsecond, &st) || !a.next(0, 3*time.Microsecond, &st) || !a.slot {
		t.Error("did not spin with a free slot")
	}
	a.release()
	if spinners.Load() != taken {
		t.Errorf("spinners = %d after release, want %d", spinners.Load(), taken)
	}
}

// Budget: twice the typical gap, at least 4W, but at most 2 × the block
// cost (4W while that is unknown) and autoSpinMax.
func TestAutoSpinBudget(t *testing.T) {
	us := time.Microsecond
	for _, tt := range []struct{ w, gap, cost, want time.Duration }{
		{5 * us, 0, 0, 20 * us},
		{5 * us, 30 * us, 0, 20 * us},
		{5 * us, 8 * us, 15 * us, 20 * us},
		{5 * us, 12 * us, 15 * us, 24 * us},
		{5 * us, 500 * us, 15 * us, 30 * us},
		{5 * us, 500 * us, 2 * us, 4 * us}, // the CPU cap wins over the 4W floor
		{100 * us, 0, 0, 400 * us},
		{100 * us, 10 * time.Millisecond, time.Millisecond, autoSpinMax},
		{10 * time.Millisecond, 0, 0, autoSpinMax},
	} {
		if got := autoBudget(tt.w, tt.gap, tt.cost); got != tt.want {
			t.Errorf("autoBudget(%v, %v, %v) = %v, want %v", tt.w, tt.gap, tt.cost, got, tt.want)
		}
	}
}

// Budget at its 1ms cap (W and C both large) and gaps far longer: a
// blocked period must not count as a hit because its gap was cut to the
// cap before the comparison; the policy spins only on probes.
func TestAutoSpinLongGapsAtCap(t *testing.T) {
	blockCostOverride.Store(int64(600 * time.Microsecond))
	defer blockCostOverride.Store(0)
	a := newAutoSpin(func() time.Duration { return 300 * time.Microsecond })
	a.idleStart = 0
	t.Cleanup(a.release)
	r := simulate(t, a, repeat(50*time.Millisecond, 2000))
	if a.budget != autoSpinMax {
		t.Fatalf("budget %v, want the cap %v", a.budget, autoSpinMax)
	}
	if want := r.periods/autoSpinProbe + 1; r.spun > want || r.found != 0 {
		t.Errorf("spun in %d of %d idle periods (found %d), want at most %d probes", r.spun, r.periods, r.found, want)
	}
}

// What a blocked idle period cost (C) is sampled only from periods that
// can show it: with no other poller finding events during the period, and
// with the process off CPU for most of a long one. Several pollers on one
// listener, or a client in the process, made every sample read the CPU
// others spent meanwhile (up to milliseconds), which lifted the budget to
// autoSpinMax (TestSpinAutoSeveralPollers, issue 21).
func TestAutoSpinCleanCostSamples(t *testing.T) {
	const gap = 500 * time.Microsecond // a long gap: no spin, every period blocked
	for _, tt := range []struct {
		name   string
		cpu    time.Duration // the process CPU a blocked period used
		others bool          // another poller's poll found events during it
		want   time.Duration // C measured; 0: none
	}{
		{"alone", simBlockCost, false, simBlockCost},
		{"another poller busy", simBlockCost, true, 0},
		{"process on CPU throughout", gap, false, 0},
		{"process on CPU half the period", gap / 2, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newSimPolicy(t)
			now, cpu := time.Duration(0), time.Second
			a.cpu = func() time.Duration { return cpu }
			var st pollerCounters
			for range 4 * autoSpinCostEvery {
				for again := a.next(1, now, &st); again; again = a.next(0, now, &st) {
					now += simPollCost
				}
				if tt.others {
					pollerActivity.Add(1)
				}
				now, cpu = now+gap, cpu+tt.cpu
			}
			if a.blockCost.med != tt.want {
				t.Errorf("C = %v after %d samples, want %v", a.blockCost.med, a.blockCost.n, tt.want)
			}
			if b := autoSpinK * simW; tt.want == 0 && a.budget > b {
				t.Errorf("B = %v with C unknown, want at most %v", a.budget, b)
			}
			a.release()
			if n := timedBlocks.Load(); n != 0 {
				t.Errorf("%d pollers timing a blocked period after the only one released its state, want 0", n)
			}
		})
	}
}

// A spin can lengthen the gap it waits through: the spinner holds a CPU
// the peer needs when they share the machine (a client in the process, an
// unpinned server). Here a blocked poller sees its next event 20µs after
// the idle moment, inside B, while a spinning one would see it only after
// 200µs, past B. Blocked periods inside B used to count as hits and kept
// the poller spinning and giving up (8 pollers, the client in the process:
// 907 spins gave up against 52 found); after a spin that gave up they are
// no observation until a spin finds an event, so only the probes spin.
func TestAutoSpinWhenSpinningDelaysThePeer(t *testing.T) {
	const (
		blockedGap = 20 * time.Microsecond
		spunGap    = 200 * time.Microsecond
		periods    = 64 * autoSpinProbe
	)
	a := newSimPolicy(t)
	a.cpu = func() time.Duration { return simCPU }
	var st pollerCounters
	now := time.Duration(0)
	for range periods {
		// An event; then poll while the policy says so. The first empty
		// poll is the idle moment.
		again, idle := a.next(1, now, &st), time.Duration(-1)
		for again {
			now += simPollCost
			if idle < 0 {
				idle = now
			}
			if now >= idle+spunGap {
				break // spinning: the event comes late
			}
			again = a.next(0, now, &st)
		}
		if idle < 0 || now < idle+spunGap {
			// Blocked (at the yield after the event, or after a spin that
			// gave up): the event comes blockedGap after the idle moment, or
			// at once if that is past, and the wakeup follows.
			if idle < 0 {
				idle = now
			}
			now = max(now, idle+blockedGap) + simWakeLatency
			simCPU += simBlockCost
		}
	}
	spun, found, gaveUp := st.load(cSpinDecisions), st.load(cSpinFound), st.load(cSpinGaveUp)
	if limit := uint64(periods/autoSpinProbe + 8); gaveUp > limit {
		t.Errorf("%d spins gave up in %d idle periods (%d spins, %d found); want at most %d, about the probes", gaveUp, periods, spun, found, limit)
	}
}

// Gaps that straddle B, as in a 10k req/s open loop with one connection
// on a 2-vCPU EPYC guest: most requests arrive on schedule, a gap longer
// than B, and some early, behind a late one, inside it. Spins find the
// early ones often enough for the hit rates (p, ps) to ask for spinning,
// but each event found costs more spinning than 2C (spinCap): here
// (0.6·20 + 0.4·30)/0.6 = 40µs against 30. Without the cost rule (updatePays)
// the poller spun through 16,000 of these 20,000 idle periods (measured on
// that guest: 1.2x the CPU per request of never spinning, for no lower
// median latency). With it, it spins while it learns the cost, then on
// probes only. With three gaps in four early, at 2µs, the spins cost
// (0.75·2 + 0.25·30)/0.75 = 12µs per event found, as in a closed loop
// (measured: 1.0C): the rule must not refuse them.
func TestAutoSpinPaysPerEventFound(t *testing.T) {
	const periods = 20000
	for _, tt := range []struct {
		early     time.Duration
		inHundred int // early gaps in a hundred
		pays      bool
	}{
		{20 * time.Microsecond, 60, false},
		{2 * time.Microsecond, 75, true},
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		gaps := make([]time.Duration, periods+1)
		for i := range gaps {
			gaps[i] = 45 * time.Microsecond // on schedule: past B = 2C = 30µs
			if rng.IntN(100) < tt.inHundred {
				gaps[i] = tt.early
			}
		}
		a := newSimPolicy(t)
		blockCostOverride.Store(int64(simBlockCost))
		r := simulate(t, a, gaps)
		blockCostOverride.Store(0)
		learn := 4 * autoSpinCostWeight // spins before sc and sh settle
		unpaid := int(r.st.load(cSpinUnpaid))
		switch {
		case !tt.pays && r.spun+unpaid < r.periods/2:
			t.Errorf("early gaps %v: spun %d, refused %d for cost, of %d idle periods: the hit rates alone no longer ask to spin, so this case checks nothing",
				tt.early, r.spun, unpaid, r.periods)
		case !tt.pays && r.spun > r.periods/autoSpinProbe+learn:
			t.Errorf("early gaps %v: spun in %d of %d idle periods (%d found, %v), want at most %d: the spins cost more than 2C per event found",
				tt.early, r.spun, r.periods, r.found, r.spinTime, r.periods/autoSpinProbe+learn)
		case tt.pays && unpaid > learn:
			t.Errorf("early gaps %v: %d idle periods refused for cost (SpinUnpaid), want at most %d: the spins cost less than 2C per event found (%d spun, %d found, %v)",
				tt.early, unpaid, learn, r.spun, r.found, r.spinTime)
		case tt.pays && r.spun < r.periods*3/4:
			t.Errorf("early gaps %v: spun in %d of %d idle periods, want at least 3 in 4", tt.early, r.spun, r.periods)
		}
		checkBound(t, a, r)
	}
}
