package netpoll

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Adaptive spinning under a CPU limit: the quota gate. DESIGN.md, "Spinning", says the
// same for users.
//
// A container's CPU limit is a CFS quota: the processes of a cgroup may
// run quota of CPU time per period (100ms by default), and once they have,
// the kernel stops all of them until the period ends. A spin spends quota.
// When the process needs its quota to serve, the spin's CPU is taken from
// the work, the group is throttled sooner, and every request that arrives
// while it is throttled waits for the next period: measured, a 1-connection
// echo server in a 0.5-CPU group, spinning adaptively, was throttled twice
// as long as without spinning and its slowest requests waited 50ms, for
// no more requests per second. The Go runtime sizes GOMAXPROCS from the
// same limit since Go 1.25; the spin policy reads it too.
//
// The rule. L is the process's CPU limit in CPUs: its cgroup's quota over
// its period, the tightest on the way up to the hierarchy's root (cgroup
// v2 cpu.max, v1 cpu.cfs_quota_us and cpu.cfs_period_us), read when the
// first adaptively spinning poller starts and again with W (wakeRefresh) while there
// is traffic. There is no gate without a limit, or with one of at least
// the CPUs the process may run on. With one, time is cut into windows of
// the cgroup's period, and adaptive spinning may start a spin only while
//
//   - the process used less than L/2 CPUs over the previous window,
//   - it has used less than L/2 CPUs' worth of the current window so far
//     (the process CPU clock is read for this at most 16 times a window,
//     and only at an idle moment where the policy wants to spin), and
//   - the group was not throttled during the previous window (the
//     cpu.stat of the cgroup whose limit it is: nr_throttled did not
//     move), which also sees what other processes of the group spend.
//
// A spin the gate refuses is counted (SpinRefused) and the poller blocks
// as if it had decided not to spin; the policy's other state (its hit
// rate, gaps, probes, C) goes on as before. So a process that needs half
// its quota or more does not spin, and one below half spins, at most B per
// idle period, until its use reaches half; the half is the headroom the
// spin may take without putting the group over its quota in the same
// period. The gate applies to adaptive spinning only: a fixed spin budget is the user's
// choice.

// quotaWindowChecks is how many times a window the gate reads the process
// CPU clock at most to close a window early.
const quotaWindowChecks = 16

// quota is the process-wide gate; its limit is set by refreshQuota.
var quota = quotaGate{cpu: processCPU}

// quotaGate decides, under the process's CPU limit, whether a spin may
// start now.
type quotaGate struct {
	limit  atomic.Uint64 // L in CPUs, as math.Float64bits; 0: no gate
	period atomic.Int64  // window length (ns): the cgroup's CFS period
	open   atomic.Bool   // spins allowed in the current window

	// mu guards the fields below it. set takes it; allow only tries it
	// (TryLock), and a poller that finds it held goes by open as it is.
	// Lock order: mu, then nothing.
	mu        sync.Mutex
	start     time.Duration // window start (monoNow)
	startCPU  time.Duration // process CPU at the window start
	lastCheck time.Duration // last read of the process CPU clock
	statPath  string        // the group's cpu.stat, "" if not readable
	throttled uint64        // its nr_throttled at the window start

	cpu func() time.Duration // the process CPU clock: processCPU, or a test's
}

// set installs a limit (zero cpus: none) and opens a new window.
func (q *quotaGate) set(l cpuLimit, now time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l.cpus <= 0 || l.period <= 0 {
		q.limit.Store(0)
		return
	}
	if l.statPath != q.statPath {
		q.statPath = l.statPath
		q.throttled, _ = readThrottled(q.statPath)
	}
	if math.Float64frombits(q.limit.Load()) == l.cpus && time.Duration(q.period.Load()) == l.period {
		return // unchanged: keep the window going
	}
	q.limit.Store(math.Float64bits(l.cpus))
	q.period.Store(int64(l.period))
	q.start, q.startCPU, q.lastCheck = now, q.cpu(), now
	q.open.Store(true)
}

// cpus returns L, 0 if there is no gate.
func (q *quotaGate) cpus() float64 { return math.Float64frombits(q.limit.Load()) }

// allow reports whether a spin may start at now.
func (q *quotaGate) allow(now time.Duration) bool {
	l := q.cpus()
	if l == 0 {
		return true
	}
	period := time.Duration(q.period.Load())
	if !q.mu.TryLock() {
		return q.open.Load()
	}
	defer q.mu.Unlock()
	if elapsed := now - q.start; elapsed >= period {
		cpu := q.cpu()
		used := cpu - q.startCPU
		open := float64(used) < l/2*float64(elapsed)
		if n, err := readThrottled(q.statPath); err == nil {
			open = open && n == q.throttled
			q.throttled = n
		}
		q.start, q.startCPU, q.lastCheck = now, cpu, now
		q.open.Store(open)
		return open
	}
	if q.open.Load() && now-q.lastCheck >= period/quotaWindowChecks {
		q.lastCheck = now
		if used := q.cpu() - q.startCPU; float64(used) >= l/2*float64(period) {
			q.open.Store(false)
		}
	}
	return q.open.Load()
}

// refreshQuota reads the process's CPU limit and installs it in the gate.
// A limit that cannot be read (no cgroup, an unexpected file) is no limit:
// the gate only ever takes spinning away, and without a limit there is
// no quota for spinning to spend.
func refreshQuota() {
	l, err := readCPULimit("/")
	if err != nil || l.cpus >= float64(availableCPUs()) {
		l = cpuLimit{}
	}
	quota.set(l, monoNow())
}
