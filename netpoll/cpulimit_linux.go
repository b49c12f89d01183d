package netpoll

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Reading the process's CPU limit from its cgroups (v2 cpu.max, v1
// cpu.cfs_quota_us and cpu.cfs_period_us) and the throttling its cgroup
// reports (cpu.stat), for the quota gate (quota_linux.go). Nothing here
// keeps state: each read parses the files again.

// cpuLimit is a CPU limit as read: what the quota gate works with.
type cpuLimit struct {
	cpus     float64       // quota / period, in CPUs
	period   time.Duration // the CFS period of the tightest limit
	statPath string        // cpu.stat of the cgroup whose limit it is
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
