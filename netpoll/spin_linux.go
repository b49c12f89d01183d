package netpoll

import (
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Adaptive spinning (spin=auto): the policy and its bound. DESIGN.md,
// "Spinning", says the same for users.
//
// Spinning after events stop saves the block and wakeup that the next
// event would otherwise cost, and wastes the CPU it burns if no event comes
// in time. Spin-then-block is the classic answer (ski rental; Karlin, Li,
// Manasse, Owicki, SOSP 1991): spinning for about what a block and wakeup
// cost is never worse than twice the best choice made in hindsight. A
// poller that has seen its recent idle gaps can do better than spinning
// every time, so the policy spins only where recent spins paid, and for
// about as long as its gaps last, within what a block costs.
//
// Two costs are measured on the running machine, none hard-coded:
//
//   - C, the CPU a blocked idle period costs the process: one such period
//     in autoSpinCostEvery starts at an idle moment (after a yield, so the
//     goroutines just woken have run) and is timed with the process CPU
//     clock until the poller runs again with events; C is the median of
//     the last 15 clean samples: taken while no poller spun, during which
//     no other poll found events (pollerActivity), and that did not keep
//     the process on CPU for most of a long period (cleanCost). It holds
//     the park, the scheduler's idle path, the sleep and the wakeup as the
//     process pays them (about 15-25µs on a 2-vCPU EPYC guest), which is
//     the currency of the CPU the spin burns.
//   - W, the runtime's own wakeup round trip (wakeCost): the lower quartile
//     of round trips of two goroutines passing a byte over two pipes
//     through the runtime's netpoller, measured when the first adaptive spinning
//     poller starts and again every wakeRefresh while there is traffic and
//     no poller holds a spinning slot. It is the budget before C is known,
//     and its floor where the CPU cap allows. Inside one process pinned to
//     one CPU it cannot see a cross-core wakeup: on that guest W read 4.5µs
//     while a cross-core round trip read 11 to 44µs within minutes.
//     (A timer's wakeup, tried instead, read 7 to 21µs from one start to
//     the next: a virtual machine's timer interrupt is not the wakeup a
//     socket event makes.)
//
// The policy:
//
//   - The budget B is twice the typical idle gap (a moving average, weight
//     1/autoSpinWeight, of the gaps seen: exact after a spin that found an
//     event, plus this poller's own wakeup after a block, "twice B" after a
//     spin that gave up), at least autoSpinK·W, but at most autoSpinCostK·C
//     (autoSpinK·W before C is known) and autoSpinMax. The gap a spin must outlast in a request and
//     response exchange is the peer's own wakeup plus its work, which moves
//     with the host (a 1-connection closed loop's gaps went from 15 to 40µs
//     in minutes), so B follows the gaps; 2C keeps it where spinning costs
//     at most twice what blocking would have. (3C spun through half the
//     80µs gaps of a 10k req/s open loop, doubling its CPU per request.)
//   - p estimates how often a spin of B finds an event: an exponentially
//     weighted average (weight 1/autoSpinWeight) of at most one observation
//     per idle period. A spin that found an event is a hit, one that used
//     up B a miss. An idle period the poller blocked through is a hit if
//     the next event came within B of the block (wakeup included), and no
//     observation otherwise: the gap it saw is the peer's gap plus this
//     poller's own wakeup, and in a closed loop the peer's gap may itself
//     hold the peer's wakeup, so a long blocked gap does not show that a
//     spin would have missed (measured: counting those as misses kept a
//     closed loop whose spins hit 78% of the time from ever spinning).
//     But spinning can lengthen the gap it waits through (the spinner
//     takes a CPU the peer needs when the two share the machine: a client
//     in the process, or unpinned), so a short gap seen while blocked does
//     not show that a spin would find it. So the poller also keeps ps, the
//     same average over its spins alone (it starts at 1/2), and spins
//     through every idle period only while ps is at least 1/4 as well.
//     Measured, 8 pollers and the client in the process: spins that found
//     52 events and gave up 907 times went on, fed by blocked periods
//     inside B. (Ignoring blocked periods after a spin that gave up, tried
//     first, halved the spins of an unpinned closed loop whose spins hit
//     86% of the time: it fell out of spinning on a run of misses and
//     waited for probes to come back.)
//   - Spins must pay (updatePays): the poller keeps sc, the time of its spins,
//     hits and misses alike, and sh, the share of them that found an
//     event, both averaged over about autoSpinCostWeight spins, and spins
//     through every idle period only while sc/sh, the spinning paid per
//     event found, is at most the cap on one spin (2C). A hit saves one
//     blocked period, C, so a poller spinning at the cap pays at most
//     twice that per event it catches, hits and misses together, and
//     never buys latency with CPU past that: a 10k req/s open loop, whose
//     gaps straddle B, found 57% of its spins' events, enough for p, at
//     3.3 to 4.4C each, 1.2x the CPU per request of never spinning for no
//     lower median latency (pinned, 2-vCPU EPYC guest).
//   - The poller spins through every idle period once p reaches 1/2, and
//     goes on until p falls below 3/8 (hysteresis: measured, a closed loop
//     whose spins hit 65% of the time dropped under 1/2 on every short run
//     of misses and spun through only a quarter of its idle periods).
//     Otherwise it spins only on every autoSpinProbe-th idle moment, a probe
//     that keeps p honest when the traffic changes, and not at all while
//     the typical gap is over twice B (a 2k req/s open loop paid 10% more
//     CPU per request for probes that could not hit); its blocked periods
//     still shorten the typical gap when the traffic turns back to back.
//   - At most max(1, GOMAXPROCS-1) pollers spin at once, process-wide, and
//     a spinning poller yields its P after every epoll_wait(0), so the
//     goroutines it woke and any other runnable goroutine run first.
//
// The bound: the CPU spent spinning in one idle period is at most B <= 2C
// (4W until C is measured), at most 1ms: twice what the block it tries to
// save costs, so at most three times the best choice made in hindsight. While
// spins mostly fail (p < 3/8), or cost more than 2C per event they find,
// the poller spins in at most one idle period in autoSpinProbe, so its
// spinning averages at most B/autoSpinProbe per idle period. An idle poller stops spinning at most B (<= autoSpinMax = 1ms)
// after its last event, and then blocks: no CPU.
const (
	autoSpinK          = 4 // B >= autoSpinK·W unless the CPU cap is lower
	autoSpinCostK      = 2 // B <= autoSpinCostK times the CPU a blocked idle period costs
	autoSpinCostEvery  = 8 // time the CPU of one blocked idle period in 8
	autoSpinMax        = time.Millisecond
	autoSpinWeight     = 8       // p moves 1/8 of the way to each observation
	autoSpinProbe      = 64      // while not spinning, spin on one idle moment in 64
	autoSpinCostWeight = 64      // sc and sh move 1/64 of the way to each spin
	spinHitOne         = 1 << 16 // sh's unit: finer than autoSpinOne, which would truncate 1/64 steps
	autoSpinOne        = 256
)

// autoBudget returns B for a wakeup cost w, a typical gap and the CPU a
// blocked idle period costs (0 if not measured yet): twice the gap, at
// least autoSpinK·w, but at most autoSpinCostK·blockCost (autoSpinK·w
// before that is known) and autoSpinMax. The CPU cap wins over the floor:
// the runtime's W (its own one-way wakeup) read 26µs where 2C was 23µs, and a
// floor of 4W then spun through a 10k req/s open loop's 100µs gaps.
func autoBudget(w, gap, blockCost time.Duration) time.Duration {
	return min(max(autoSpinK*w, 2*gap), spinCap(w, blockCost), autoSpinMax)
}

// spinCap is the CPU cap on one spin, and on the spinning paid per event
// found: autoSpinCostK·C, or autoSpinK·W while C (blockCost) is unknown.
func spinCap(w, blockCost time.Duration) time.Duration {
	if blockCost > 0 {
		return autoSpinCostK * blockCost
	}
	return autoSpinK * w
}

// spinPhase is where an autoSpin poller is between polls.
type spinPhase uint8

const (
	// phaseBusy: the last poll returned events and the poller chose to
	// poll again after yielding. The loop moves here on events, and out of
	// it on the next poll: into phaseSpin if that poll found nothing.
	phaseBusy spinPhase = iota
	// phaseSpin: an idle period in which the poller spins until spinUntil.
	// Left on the poll that finds events (a hit) or the first at or past
	// spinUntil (a miss, into phaseBlock).
	phaseSpin
	// phaseBlock: an idle period in which the poller blocks (or is about
	// to). Left on the poll that finds events.
	phaseBlock
)

// autoSpin is one poller's adaptive spinning state. Only the goroutine polling for
// the poller touches it: its loop goroutine, or under waitInline the holder
// of the role (inlineWait.held). What Stats reads is in pollerCounters.
type autoSpin struct {
	w           func() time.Duration // W now (wakeCost)
	cpu         func() time.Duration // the process CPU time (processCPU)
	budget      time.Duration        // B, set at each event for the idle period to come
	gap         time.Duration        // typical idle gap, a moving average
	observed    bool                 // the current idle period has been observed
	blocks      uint32               // idle periods blocked in since the last timed one
	sample      bool                 // phaseBusy: block at the idle moment and time it
	timing      bool                 // a sampled block is being timed: counted in timedBlocks
	cpuStart    time.Duration        // process CPU time when the sampled block began
	busyStart   uint64               // pollerActivity when the sampled block began
	blockCost   costSamples          // process CPU used by sampled blocked periods
	hitRate     int32                // p: the hit rate of a spin of B, in 1/autoSpinOne
	spinning    bool                 // p reached 1/2 and has not fallen below 3/8 since
	spinHitRate int32                // ps: the hit rate of the spins themselves, in 1/autoSpinOne
	sc          time.Duration        // the CPU a spin costs: its time, hit or miss, a long average (spinCost)
	sh          int64                // the hit rate of spins, in 1/spinHitOne, averaged as sc is
	probing     bool                 // the current spin is a probe
	unpaid      bool                 // spins stopped paying (updatePays) and have not come back under 3/4 of the cap
	cap         time.Duration        // spinCap at the latest event
	probe       uint32               // idle moments decided while not spinning
	phase       spinPhase
	idleStart   time.Duration // when the current idle period began (monoNow)
	spinUntil   time.Duration // end of the current spin (phaseSpin)
	slot        bool          // holds a spinners slot
	wantSlot    bool          // gave its slot up at leaveRole, to take one again at the idle moment
}

func newAutoSpin(w func() time.Duration) *autoSpin {
	return &autoSpin{w: w, cpu: processCPU, phase: phaseBlock, idleStart: monoNow(), spinHitRate: autoSpinOne / 2, sh: spinHitOne / 2}
}

var monoEpoch = time.Now()

// monoNow is the monotonic clock as a Duration since the package started.
func monoNow() time.Duration { return time.Since(monoEpoch) }

// next is adaptive spinning's answer, after a poll at now that returned n events, to
// whether the loop should yield and poll again (true) or block (false).
func (a *autoSpin) next(n int, now time.Duration, st *pollerCounters) bool {
	if n > 0 {
		if timedBlocks.Load() > 0 { // one of them may be this poller's own
			pollerActivity.Add(1)
		}
		if a.phase != phaseBusy && !wakeTraffic.Load() {
			wakeTraffic.Store(true)
		}
		gap := now - a.idleStart
		switch a.phase {
		case phaseSpin:
			a.observe(true)
			a.spinHitRate += (autoSpinOne - a.spinHitRate) / autoSpinWeight
			a.spinCost(gap, true)
			a.observeGap(min(gap, autoSpinMax))
			st.inc(cSpinFound)
			st.spinNanos.Add(uint64(gap))
		case phaseBlock:
			if !a.observed {
				if gap <= a.budget { // the whole gap: B may be at its cap
					a.observe(true)
				}
				a.observeGap(min(gap, autoSpinMax)) // with this poller's wakeup: an overestimate
			}
		}
		if a.phase == phaseBlock && a.timing && a.cpuStart != 0 && pollerActivity.Load() == a.busyStart+1 {
			if c := a.cpu() - a.cpuStart; cleanCost(c, gap, a.w()) {
				a.blockCost.add(c)
				st.blockCost.Store(uint64(a.blockCost.med))
			}
		}
		a.endTiming()
		cost := a.blockCost.med
		if c := blockCostOverride.Load(); c != 0 {
			cost = time.Duration(c)
		}
		a.cap = spinCap(a.w(), cost)
		a.budget = autoBudget(a.w(), a.gap, cost)
		if b := uint64(a.budget); st.spinBudget.Load() != b {
			st.spinBudget.Store(b) // for Stats; written by this loop only
		}
		if far := a.far(); st.spinFar.Load() != far {
			// On change: hotread=auto with one P reads it (desc.woken).
			st.spinFar.Store(far)
		}
		a.observed = false
		if a.phase != phaseBusy {
			a.sample = false
			switch {
			case a.wantSpin(now, st):
			case a.blocks+1 == autoSpinCostEvery:
				a.sample = true // block from the idle moment, and time it
			default:
				a.blocks++
				a.block(now)
				return false
			}
		}
		// Yield and poll once more: the goroutines just woken run first,
		// and the idle period starts when a poll finds nothing.
		a.phase = phaseBusy
		return true
	}
	switch a.phase {
	case phaseBusy:
		if a.wantSlot && !a.sample {
			a.slot = acquireSpinner()
		}
		a.wantSlot = false
		if a.sample || !a.slot {
			a.blocks, a.sample = 0, false
			a.block(now)
			if spinners.Load() == 0 { // a spinning poller would count in the sample
				a.timing = true
				timedBlocks.Add(1) // before busyStart: every poll counted after it sees timedBlocks > 0
				a.cpuStart, a.busyStart = a.cpu(), pollerActivity.Load()
			}
			return false
		}
		a.phase, a.idleStart, a.spinUntil = phaseSpin, now, now+a.budget
		st.inc(cSpinDecisions)
		return true
	case phaseSpin:
		if now < a.spinUntil {
			return true
		}
		a.observe(false)
		a.spinHitRate -= a.spinHitRate / autoSpinWeight
		a.spinCost(now-a.idleStart, false)
		a.observeGap(2 * a.budget) // longer than B, by how much unknown
		a.observed = true
		st.inc(cSpinGaveUp)
		st.spinNanos.Add(uint64(now - a.idleStart))
		a.phase = phaseBlock // the idle period goes on, already observed
		a.release()
		return false
	}
	return false // phaseBlock: a wakeup with nothing to do
}

// far reports whether the typical idle gap is over twice the budget: a
// spin would rarely see the next event, and the policy does not even
// probe (wantSpin), nor, with one P, keep a busy Conn's reads off the
// runtime's netpoller (pollerCounters.spinFar, desc.woken).
func (a *autoSpin) far() bool { return a.gap > 2*a.budget }

// wantSpin decides, at an idle moment, whether to spin through it. A spin
// the CPU quota gate refuses (quota_linux.go) is counted and not made.
func (a *autoSpin) wantSpin(now time.Duration, st *pollerCounters) bool {
	if a.budget <= 0 {
		return false
	}
	switch {
	case a.hitRate >= autoSpinOne/2:
		a.spinning = true
	case a.hitRate < autoSpinOne*3/8:
		a.spinning = false
	}
	spin := a.spinning && a.spinHitRate >= autoSpinOne/4
	if spin && !a.updatePays() {
		st.inc(cSpinUnpaid)
		spin = false
	}
	a.probing = false
	if !spin && !a.far() {
		a.probe++
		spin = a.probe%autoSpinProbe == 0
		a.probing = spin
	}
	if spin && !quota.allow(now) {
		st.inc(cSpinRefused)
		return false // the caller blocks, which gives back a slot held
	}
	if spin && !a.slot {
		a.slot = acquireSpinner()
		spin = a.slot
	}
	return spin
}

// updatePays reports whether the spins pay for themselves, and updates the
// hysteresis it keeps (unpaid): their CPU per event they find, sc over sh,
// is at most the cap on one spin (2C). A spin that
// finds its event saves one blocked idle period, C; the misses' spinning is
// charged to the hits. Measured, one connection and the server pinned: a
// closed loop's spins cost 1.0C per event found and cut its CPU per
// request; a 10k req/s open loop's, whose gaps straddle B, cost 3.3 to 4.4C
// and added a quarter to its CPU per request for no lower median latency.
//
// Once spins stop paying they must come under 3/4 of the cap (1.5C) to
// pay again: the probes that feed sc and sh while the poller blocks weigh
// more than spins (spinCost), so their averages swing, and a 10k req/s
// open loop whose spins cost 3 to 4C per event went back to spinning on
// a few lucky probes and spun through one idle period in six, each return
// lasting the dozens of spins it takes the averages to come back.
func (a *autoSpin) updatePays() bool {
	cost, paid := int64(a.sc)*spinHitOne, int64(a.cap)*a.sh
	if a.unpaid {
		a.unpaid = 4*cost > 3*paid
	} else {
		a.unpaid = cost > paid
	}
	return !a.unpaid
}

// spinCost adds a spin of d that found its event (hit) or gave up to sc and
// sh. They average over about autoSpinCostWeight spins, not
// autoSpinWeight: misses come in runs (a collection, the peer stalled),
// and a closed loop whose spins paid 1.0C per event overall read 1.5 to
// 2C after such runs, over 2C often enough to block through a third of
// its idle periods. A probe weighs as autoSpinWeight spins: it stands for
// the autoSpinProbe idle moments between probes, and traffic that turns
// back to back must bring spinning back within a few probes.
func (a *autoSpin) spinCost(d time.Duration, hit bool) {
	w := int64(autoSpinCostWeight)
	if a.probing {
		w = autoSpinCostWeight / 4
	}
	a.sc += (d - a.sc) / time.Duration(w)
	target := int64(0)
	if hit {
		target = spinHitOne
	}
	a.sh += (target - a.sh) / w
}

// block starts an idle period spent blocked.
func (a *autoSpin) block(now time.Duration) {
	a.phase, a.idleStart = phaseBlock, now
	a.release()
}

// cleanCost reports whether c, the process CPU a blocked idle period of
// wall time gap used, with no poller spinning at its start and no other
// poll finding events during it (pollerActivity), can be the cost of the
// block: at most 2·autoSpinK·W, or else at most a quarter of the period. A
// sample larger than that came from a period the process spent mostly on
// CPU doing other work: a GC cycle, goroutines no poller woke, a client
// in the process (with 8 pollers on one listener and the client in the
// process, such samples read half to all of their wall time, 0.3 to 3.5ms,
// against 15-25µs for a block alone, and lifted every poller's budget to
// autoSpinMax). A quarter: with two CPUs, a process busy on one of them
// for a whole period reads half. (Bounding every sample by a quarter of
// its period, tried first, dropped the samples of short gaps, where the
// block is most of the gap: C fell and an unpinned closed loop spun 40%
// less.)
func cleanCost(c, gap, w time.Duration) bool {
	return c <= 2*autoSpinK*w || c <= gap/4
}

// costSamples keeps the last len(v) samples of what a blocked idle period
// cost the process in CPU time, and their median (0 before the first),
// computed when a sample is added (one in autoSpinCostEvery blocks) rather
// than at every event that reads it. (The lower quartile, tried against
// what cleanCost does not catch, read 7µs where the median read 25µs with
// the server and its client unpinned on two CPUs, and the budget it
// allowed caught a third of the events the median's did.)
type costSamples struct {
	v    [15]time.Duration
	n, i int
	med  time.Duration
}

func (c *costSamples) add(d time.Duration) {
	c.v[c.i] = d
	c.i = (c.i + 1) % len(c.v)
	c.n = min(c.n+1, len(c.v))
	sorted := c.v // a copy: v keeps its ring order
	slices.Sort(sorted[:c.n])
	c.med = sorted[c.n/2]
}

// processCPU is the CPU time the process has used (CLOCK_PROCESS_CPUTIME_ID:
// user and system time of every thread, to the nanosecond).
func processCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// observeGap moves the typical gap 1/autoSpinWeight of the way to g.
func (a *autoSpin) observeGap(g time.Duration) {
	a.gap += (g - a.gap) / autoSpinWeight
}

func (a *autoSpin) observe(hit bool) {
	target := int32(0)
	if hit {
		target = autoSpinOne
	}
	a.hitRate += (target - a.hitRate) / autoSpinWeight
}

// release gives back the spinning slot, if held, and ends the timing of a
// blocked idle period, if any: block calls it, and the poller's loop when
// it stops.
func (a *autoSpin) release() {
	if a.slot {
		spinners.Add(-1)
		a.slot = false
	}
	a.endTiming() // the poller stops: block calls it with no period timed
}

// leaveRole is release for a waitInline holder that leaves the role with
// the policy mid-period: its slot, if held, is given back and taken again
// at the next holder's idle moment (phaseBusy), since nobody may watch the
// epoll fd in between, or for good.
func (a *autoSpin) leaveRole() {
	if a.slot {
		a.wantSlot = true
	}
	a.release()
}

// endTiming ends the timing of a blocked idle period, if one is timed.
func (a *autoSpin) endTiming() {
	if a.timing {
		a.timing = false
		timedBlocks.Add(-1)
	}
}
