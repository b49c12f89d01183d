package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The spinquota check: under a CPU quota, GODEBUG=netpollspin=auto does
// not spin while the process is at half its quota or more (the quota gate,
// runtime/netpollspinquota.go in 005-netpollspinquota.patch).
//
// It makes a cgroup with a CPU quota of quotaUS per quotaPeriodUS (0.5
// CPU): cgroup v2's cpu.max when /sys/fs/cgroup is v2 with the cpu
// controller, else cgroup v1's cpu controller at /sys/fs/cgroup/cpu. The
// workload is the spin check's: a ping-pong child pinned to CPU 0 against
// an echo child pinned to CPU 1, quotaRoundsPer times the check's rounds.
// The ping-pong child is started through /bin/sh, which writes its own
// pid to the group's cgroup.procs and then executes taskset and the child,
// so the Go runtime is in the group from its first instruction and reads
// the quota at start, as it does in a container. Pinned to CPU 0, the
// child may run on one CPU, more than its limit of 0.5, so the gate
// applies. The check asserts, by counts and never by times:
//
//   - without a quota, netpollspin=auto: the gate never applies
//     (spin-quota-mcpu=0), refuses nothing (spin-quota-refused=0), and auto
//     spins (spin-sessions > 0);
//   - in the group, netpollspin=auto: the runtime read the limit
//     (spin-quota-mcpu=500, 0.5 CPU) and the gate refused spins
//     (spin-quota-refused > 0): a closed loop keeps the process busy
//     enough for it;
//   - in the group with the same 0.5 CPU as 5000µs per 10000µs: the
//     same, with the gate's window the group's period
//     (spin-quota-period-us=10000; 100000 in the first group);
//   - in the group with GODEBUG=netpollstats=1 only: nothing of the gate
//     (spin-quota-mcpu=0, spin-quota-refused=0) and no session.
//
// Whether auto wants to spin at all depends on its W, measured by the
// kernel's scheduling of the child's own threads (see the spinauto check),
// so a run with auto that shows no session (without the quota) or no
// refusal (with it) is tried again, up to three times; a refusal without a
// quota, or a limit read wrong, fails at once. The group's cpu.stat
// throttling counts are printed, not asserted, and so is the number of
// windows the gate closed because the group was throttled
// (spin-quota-throttled).
//
// Where no group can be made (not root, no cpu controller, a cgroup v2
// that will not delegate it), the check says why and is skipped, unless
// the environment variable CI is set: then it fails.

// The quota of the group: 0.5 CPU in the CFS default period.
const (
	quotaUS       = 50000
	quotaPeriodUS = 100000
	quotaMCPU     = 1000 * quotaUS / quotaPeriodUS // the limit as the runtime prints it (spin-quota-mcpu)
)

// The same 0.5 CPU in a 10ms period: the gate's window must be the
// group's period (spin-quota-period-us), not a fixed 100ms.
const (
	shortQuotaUS  = 5000
	shortPeriodUS = 10000
)

// quotaRoundsPer: the spinquota check's ping-pongs are this many times the
// check's rounds (10,000 by default): long enough for several 100ms
// windows of the gate.
const quotaRoundsPer = 5

// quotaCounters are the netpollstats counters the spinquota check reads.
var quotaCounters = []string{"spin-sessions", "spin-found", "spin-idle", "spin-quota-refused", "spin-quota-mcpu", "spin-quota-period-us", "spin-quota-throttled", "spin-w-ns", "spin-p", "spin-on"}

func (c checker) spinQuota() (err error) {
	g, err := newCPUGroup(quotaUS, quotaPeriodUS)
	if err != nil {
		if os.Getenv("CI") != "" {
			return fmt.Errorf("spinquota: cannot make a cgroup with a CPU quota: %v (CI is set: the check must run)", err)
		}
		fmt.Fprintf(c.out, "spinquota: skipped: cannot make a cgroup with a CPU quota: %v\n", err)
		return nil
	}
	defer func() {
		if rerr := g.remove(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	rounds := quotaRoundsPer * c.rounds
	runs := []struct {
		quota  bool
		auto   bool
		period int // the group's period (µs)
	}{
		{quota: false, auto: true},
		{quota: true, auto: true, period: quotaPeriodUS},
		{quota: true, auto: true, period: shortPeriodUS},
		{quota: true, auto: false, period: quotaPeriodUS},
	}
	for _, r := range runs {
		if r.quota {
			q := quotaUS * r.period / quotaPeriodUS
			if err := g.setQuota(q, r.period); err != nil {
				return err
			}
		}
		godebug, where := "netpollstats=1", "quota=none"
		if r.auto {
			godebug = "netpollspin=auto,netpollstats=1"
		}
		var enter []string
		if r.quota {
			enter = g.enter()
			where = fmt.Sprintf("quota=%d/%dus (%s)", quotaUS*r.period/quotaPeriodUS, r.period, g.dir)
		}
		for try := 1; ; try++ {
			before, err := g.throttling()
			if err != nil {
				return err
			}
			stderr, err := c.pinnedToEchoIn(enter, godebug, "pingpong", "-n", strconv.Itoa(rounds))
			if err != nil {
				return err
			}
			after, err := g.throttling()
			if err != nil {
				return err
			}
			st, err := namedCounters(stderr, quotaCounters)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.out, "spinquota: GODEBUG=%s %s rounds=%d", godebug, where, rounds)
			for _, name := range quotaCounters {
				fmt.Fprintf(c.out, " %s=%d", name, st[name])
			}
			if r.quota {
				fmt.Fprintf(c.out, " throttled-periods=%d/%d throttled-ms=%.1f",
					after.throttled-before.throttled, after.periods-before.periods, float64(after.throttledNS-before.throttledNS)/1e6)
			}
			fmt.Fprintln(c.out)
			missing, err := judgeSpinQuota(r.quota, r.auto, r.period, st)
			if err != nil {
				return err
			}
			if missing == "" {
				break
			}
			if try == 3 {
				return fmt.Errorf("spinquota: GODEBUG=%s %s: %s, three times", godebug, where, missing)
			}
		}
	}
	fmt.Fprintln(c.out, "spinquota: ok, auto does not spin at half its CPU quota or more, and spins without one")
	return nil
}

// judgeSpinQuota judges the counters st of a ping-pong run with
// netpollspin=auto or not (auto), in the quota group or not (quota). err
// is a failure; missing, if not empty, says what the run did not show that
// another run may (auto did not want to spin).
func judgeSpinQuota(quota, auto bool, period int, st map[string]int64) (missing string, err error) {
	mcpu, refused := st["spin-quota-mcpu"], st["spin-quota-refused"]
	switch {
	case !auto && (mcpu != 0 || refused != 0 || st["spin-sessions"] != 0):
		return "", fmt.Errorf("spinquota: without netpollspin=auto spin-quota-mcpu=%d spin-quota-refused=%d spin-sessions=%d, want 0",
			mcpu, refused, st["spin-sessions"])
	case !auto:
		return "", nil
	case !quota && (mcpu != 0 || refused != 0):
		return "", fmt.Errorf("spinquota: without a quota spin-quota-mcpu=%d spin-quota-refused=%d, want 0: the gate applied", mcpu, refused)
	case !quota && st["spin-sessions"] == 0:
		return "auto never spun without a quota", nil
	case quota && mcpu != quotaMCPU:
		return "", fmt.Errorf("spinquota: spin-quota-mcpu=%d in the quota group, want %d: the runtime did not read the limit of %d/%dus",
			mcpu, quotaMCPU, quotaUS, quotaPeriodUS)
	case quota && st["spin-quota-period-us"] != int64(period):
		return "", fmt.Errorf("spinquota: spin-quota-period-us=%d in a group with a %dus period: the gate's window is not the group's period",
			st["spin-quota-period-us"], period)
	case quota && refused == 0:
		return "the gate refused no spin in the quota group", nil
	}
	return "", nil
}

// namedCounters returns the named counters of the runtime's first
// netpollstats line in stderr.
func namedCounters(stderr []byte, names []string) (map[string]int64, error) {
	st := map[string]int64{}
	for _, name := range names {
		v, err := stat(stderr, name)
		if err != nil {
			return nil, err
		}
		st[name] = int64(v)
	}
	return st, nil
}

// cgroupRoot is where the cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cpuGroup is a cgroup with a CPU quota, made for a check. It is the
// repository's internal/cpuquota again, in small: verify.sh builds the
// check as a module of its own with the patched toolchain and the
// standard library alone, so it cannot import that package (which needs
// golang.org/x/sys).
type cpuGroup struct {
	dir        string // the group's directory
	v2         bool   // cgroup v2 (cpu.max), else v1's cpu controller
	enabledCPU bool   // v2: the check enabled cpu in the parent's cgroup.subtree_control
}

// newCPUGroup makes a cgroup whose processes may use quota µs of CPU time
// per period µs. Its error says why none can be made.
func newCPUGroup(quota, period int) (*cpuGroup, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not root")
	}
	if ctrl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		// cgroup v2, mounted at cgroupRoot.
		if !slices.Contains(strings.Fields(string(ctrl)), "cpu") {
			return nil, fmt.Errorf("cgroup v2 at %s has no cpu controller (cgroup.controllers: %q)", cgroupRoot, strings.TrimSpace(string(ctrl)))
		}
		g := &cpuGroup{v2: true}
		sub := filepath.Join(cgroupRoot, "cgroup.subtree_control")
		have, err := os.ReadFile(sub)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(strings.Fields(string(have)), "cpu") {
			if err := os.WriteFile(sub, []byte("+cpu"), 0o644); err != nil {
				return nil, fmt.Errorf("cgroup v2: enabling cpu in %s: %v", sub, err)
			}
			g.enabledCPU = true
		}
		if g.dir, err = os.MkdirTemp(cgroupRoot, "edgepoll-check-"); err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroup v2: %v", err)
		}
		if err := g.write("cpu.max", fmt.Sprintf("%d %d", quota, period)); err != nil {
			g.remove()
			return nil, err
		}
		return g, nil
	}
	v1 := filepath.Join(cgroupRoot, "cpu")
	if _, err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us")); err != nil {
		return nil, fmt.Errorf("no cpu controller: %s is not cgroup v2 and %s has no cpu.cfs_quota_us", cgroupRoot, v1)
	}
	dir, err := os.MkdirTemp(v1, "edgepoll-check-")
	if err != nil {
		return nil, fmt.Errorf("cgroup v1: %v", err)
	}
	g := &cpuGroup{dir: dir}
	if err := g.write("cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
		g.remove()
		return nil, err
	}
	if err := g.write("cpu.cfs_quota_us", strconv.Itoa(quota)); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// setQuota sets the group's quota to quota µs per period µs.
func (g *cpuGroup) setQuota(quota, period int) error {
	if g.v2 {
		return g.write("cpu.max", fmt.Sprintf("%d %d", quota, period))
	}
	// v1 checks the pair at each write: lift the quota first.
	if err := g.write("cpu.cfs_quota_us", "-1"); err != nil {
		return err
	}
	if err := g.write("cpu.cfs_period_us", strconv.Itoa(period)); err != nil {
		return err
	}
	return g.write("cpu.cfs_quota_us", strconv.Itoa(quota))
}

func (g *cpuGroup) write(file, value string) error {
	return os.WriteFile(filepath.Join(g.dir, file), []byte(value), 0o644)
}

// enter returns the command that puts itself in the group and then
// executes its arguments: a shell that writes its pid ($$) to the group's
// cgroup.procs and replaces itself with them, so that the command runs in
// the group from its start.
func (g *cpuGroup) enter() []string {
	return []string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(g.dir, "cgroup.procs")}
}

// throttling are the throttling counts of a group's cpu.stat.
type throttling struct {
	periods, throttled, throttledNS int64
}

// throttling reads the group's cpu.stat.
func (g *cpuGroup) throttling() (throttling, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return throttling{}, err
	}
	return parseCPUStat(string(b))
}

// parseCPUStat returns the throttling counts of a cpu.stat file: v1's
// throttled_time is in ns, v2's throttled_usec in µs.
func parseCPUStat(s string) (throttling, error) {
	var t throttling
	seen := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			t.periods = n
		case "nr_throttled":
			t.throttled = n
		case "throttled_time":
			t.throttledNS = n
		case "throttled_usec":
			t.throttledNS = n * 1000
		default:
			continue
		}
		seen++
	}
	if seen != 3 {
		return throttling{}, fmt.Errorf("cpu.stat without nr_periods, nr_throttled and throttled_time or throttled_usec: %q", s)
	}
	return t, nil
}

// remove removes the group (it must be empty: its processes have ended),
// and on cgroup v2 disables cpu in the parent's subtree_control again if
// the check enabled it (best effort: another group may use it by now).
func (g *cpuGroup) remove() error {
	var err error
	if g.dir != "" {
		if rerr := os.Remove(g.dir); rerr != nil {
			err = fmt.Errorf("removing the quota group: %v", rerr)
		}
	}
	if g.enabledCPU {
		os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("-cpu"), 0o644)
	}
	return err
}
