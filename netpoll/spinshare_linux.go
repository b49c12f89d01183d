package netpoll

import (
	"runtime"
	"sync/atomic"
)

// What adaptively spinning pollers share process-wide: the spinning slots (at most
// max(1, GOMAXPROCS-1) pollers spin at once) and the activity counts that
// keep a poller's sample of a blocked idle period's CPU clean of another
// poller's work. spin_linux.go holds the policy that uses them.

// spinners counts the adaptively spinning pollers spinning now, process-wide.
var spinners atomic.Int32

// pollerActivity counts, process-wide, the spinning slots taken and, while
// a adaptively spinning poller times a blocked idle period (timedBlocks > 0), the polls of
// adaptively spinning pollers that returned events. A blocked idle period is a
// sample of C only if no poller spun at its start and nothing but its own
// end moved the count: C is read from the process CPU clock, so the CPU
// another poller spends meanwhile, on its events or spinning, would count
// as this block's. Measured with 8 nested pollers on one listener
// (ReusePort), such samples read as much CPU as wall time (0.3 to 3.5ms)
// against 15-25µs alone, which lifted every poller's budget to
// autoSpinMax; each then spun for up to 1ms through gaps of 500µs that
// went to another poller, and counted its blocked periods, shorter than
// that budget, as hits that kept it spinning (TestAutoSpinSeveralPollers).
// A poll with events reads timedBlocks, a line written once per timed period,
// and writes pollerActivity only while a period is timed: one poll in
// about autoSpinCostEvery idle periods, not every one.
var pollerActivity atomic.Uint64

// timedBlocks counts the adaptively spinning pollers timing a blocked idle period now.
// Invariant: a poller adds one when it starts timing (autoSpin.timing set)
// and takes it back exactly once, when the period ends with events or the
// poller releases its state (autoSpin.endTiming).
var timedBlocks atomic.Int32

// acquireSpinner takes one of the max(1, GOMAXPROCS-1) spinning slots.
func acquireSpinner() bool {
	limit := int32(max(1, runtime.GOMAXPROCS(0)-1))
	for {
		n := spinners.Load()
		if n >= limit {
			return false
		}
		if spinners.CompareAndSwap(n, n+1) {
			pollerActivity.Add(1)
			return true
		}
	}
}
