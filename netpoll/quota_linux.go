package netpoll

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// SpinAuto under a CPU limit: the quota gate. doc.go, "Spinning", says the
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
// first SpinAuto poller starts and again with W (wakeRefresh) while there
// is traffic. There is no gate without a limit, or with one of at least
// the CPUs the process may run on. With one, time is cut into windows of
// the cgroup's period, and SpinAuto may start a spin only while
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
// period. The gate applies to SpinAuto only: a fixed Spin is the user's
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

// cpuLimit is the CPU limit the gate works with.
type cpuLimit struct {
	cpus     float64       // quota / period, in CPUs
	period   time.Duration // the CFS period of the tightest limit
	statPath string        // cpu.stat of the cgroup whose limit it is
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

// availableCPUs is how many CPUs the process may run on.
func availableCPUs() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() < 1 {
		return runtime.NumCPU()
	}
	return set.Count()
}

// errNoLimit: the process's cgroup has no CPU limit, or none can be read.
var errNoLimit = errors.New("no CPU limit")

// readCPULimit reads the CPU limit of the process's cgroup under root (the
// file system root: "/", or a test's directory holding proc/self/cgroup,
// proc/self/mountinfo and the cgroup files), taking the tightest limit
// from its cgroup up to the hierarchy's root, as a parent's limit binds
// its children (Go's runtime reads the leaf's only).
func readCPULimit(root string) (cpuLimit, error) {
	cg, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return cpuLimit{}, err
	}
	mi, err := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if err != nil {
		return cpuLimit{}, err
	}
	mount, rel, v2, err := cpuCgroupDir(cg, mi)
	if err != nil {
		return cpuLimit{}, err
	}
	mount = filepath.Join(root, mount)
	dir := filepath.Join(mount, rel) // Join cleans: no way above mount
	var best cpuLimit
	for d := dir; ; d = filepath.Dir(d) {
		cpus, period, ok := readLimitAt(d, v2)
		if ok && (best.cpus == 0 || cpus < best.cpus) {
			// The kernel counts throttling in the group whose quota
			// throttles: its cpu.stat, not the leaf's.
			best = cpuLimit{cpus: cpus, period: period, statPath: filepath.Join(d, "cpu.stat")}
		}
		if d == mount || !strings.HasPrefix(d, mount) {
			break
		}
	}
	if best.cpus == 0 {
		return cpuLimit{}, errNoLimit
	}
	return best, nil
}

// readLimitAt reads one cgroup directory's CPU limit: ok is false when it
// has none (v2 "max", v1 quota -1) or its files cannot be read.
func readLimitAt(dir string, v2 bool) (cpus float64, period time.Duration, ok bool) {
	var qs, ps string // quota and period in µs, as the files give them
	if v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max")) // "QUOTA PERIOD" or "max PERIOD"
		if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
			qs, ps = f[0], f[1]
		}
	} else {
		q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us")) // -1: none
		p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err1 == nil && err2 == nil {
			qs, ps = strings.TrimSpace(string(q)), strings.TrimSpace(string(p))
		}
	}
	q, err1 := strconv.ParseInt(qs, 10, 64)
	p, err2 := strconv.ParseInt(ps, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, 0, false // none ("max", -1), or unreadable
	}
	return float64(q) / float64(p), time.Duration(p) * time.Microsecond, true
}

// cpuCgroupDir finds, from /proc/self/cgroup and /proc/self/mountinfo, the
// process's cgroup in the hierarchy that has the cpu controller: v1
// ("N:cpu,cpuacct:/path") if one is mounted, else v2 ("0::/path"), as the
// mount point of that hierarchy and the cgroup's path under it. A mount
// whose root is a prefix of the path (a container's view) maps the rest of
// the path under its mount point.
func cpuCgroupDir(cgroup, mountinfo []byte) (mount, rel string, v2 bool, err error) {
	var v1Path, v2Path string
	haveV1, haveV2 := false, false
	for line := range strings.Lines(string(cgroup)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2Path, haveV2 = f[2], true
			continue
		}
		for c := range strings.SplitSeq(f[1], ",") {
			if c == "cpu" {
				v1Path, haveV1 = f[2], true
			}
		}
	}
	for line := range strings.Lines(string(mountinfo)) {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superoptions
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 > len(f) {
			continue
		}
		mroot, point, fstype := unescapeMount(f[3]), unescapeMount(f[4]), f[sep+1]
		var path string
		switch {
		case haveV1 && fstype == "cgroup" && hasOption(f[sep+2:], "cpu"):
			path = v1Path
		case !haveV1 && haveV2 && fstype == "cgroup2":
			path = v2Path
			v2 = true
		default:
			continue
		}
		rel, ok := strings.CutPrefix(path, mroot)
		if !ok || (rel != "" && mroot != "/" && rel[0] != '/') {
			continue // this mount shows another part of the hierarchy
		}
		return point, rel, v2, nil
	}
	return "", "", false, errNoLimit
}

// hasOption reports whether the super options (the last field of a
// mountinfo line, comma-separated, after the source) include opt.
func hasOption(fields []string, opt string) bool {
	if len(fields) < 2 {
		return false
	}
	for o := range strings.SplitSeq(fields[len(fields)-1], ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readThrottled reads nr_throttled from a cgroup's cpu.stat (v1 and v2
// both have it).
func readThrottled(path string) (uint64, error) {
	if path == "" {
		return 0, errNoLimit
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errNoLimit
}
