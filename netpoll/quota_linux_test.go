package netpoll

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fakeRoot writes files (path relative to the root: content) under a new
// directory and returns it, for readCPULimit.
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	v1Mountinfo = "25 20 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n" +
		"26 20 0:23 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
	v2Mountinfo = "30 20 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
)

// TestReadCPULimit: the limit is read from cgroup v1 and v2 as mounted on
// a host and in a container, the tightest on the way up, with none where
// every level says so.
func TestReadCPULimit(t *testing.T) {
	for _, tt := range []struct {
		name   string
		files  map[string]string
		cpus   float64
		period time.Duration
		stat   string // cpu.stat path under the root: the limiting cgroup's
	}{
		{"v1 leaf", map[string]string{
			"proc/self/cgroup":                                     "5:memory:/a/b\n4:cpu,cpuacct:/a/b\n",
			"proc/self/mountinfo":                                  v1Mountinfo,
			"sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us":       "50000\n",
			"sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us":      "100000\n",
			"sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us":         "-1\n",
			"sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us":        "100000\n",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":           "-1\n",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us":          "100000\n",
			"sys/fs/cgroup/cpu,cpuacct/a/b/cpu.stat":               "nr_periods 3\nnr_throttled 2\nthrottled_time 5\n",
			"sys/fs/cgroup/cpu,cpuacct/unrelated/cpu.cfs_quota_us": "1000\n",
		}, 0.5, 100 * time.Millisecond, "sys/fs/cgroup/cpu,cpuacct/a/b/cpu.stat"},
		{"v1 parent tighter", map[string]string{
			"proc/self/cgroup":                                "4:cpu,cpuacct:/a/b\n",
			"proc/self/mountinfo":                             v1Mountinfo,
			"sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us":  "400000\n",
			"sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us": "100000\n",
			"sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us":    "25000\n",
			"sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us":   "50000\n",
		}, 0.5, 50 * time.Millisecond, "sys/fs/cgroup/cpu,cpuacct/a/cpu.stat"},
		{"v1 in a container", map[string]string{
			"proc/self/cgroup":                    "4:cpu,cpuacct:/docker/abc\n",
			"proc/self/mountinfo":                 "25 20 0:22 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpuacct,cpu\n",
			"sys/fs/cgroup/cpu/cpu.cfs_quota_us":  "150000\n",
			"sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
		}, 1.5, 100 * time.Millisecond, "sys/fs/cgroup/cpu/cpu.stat"},
		{"v2", map[string]string{
			"proc/self/cgroup":                               "0::/system.slice/app.service\n",
			"proc/self/mountinfo":                            v2Mountinfo,
			"sys/fs/cgroup/system.slice/app.service/cpu.max": "max 100000\n",
			"sys/fs/cgroup/system.slice/cpu.max":             "200000 100000\n",
		}, 2, 100 * time.Millisecond, "sys/fs/cgroup/system.slice/cpu.stat"},
		{"v2 in a container, escaped mount point", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      "30 20 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n",
			"sys/fs/my cgroup/cpu.max": "20000 100000\n",
		}, 0.2, 100 * time.Millisecond, "sys/fs/my cgroup/cpu.stat"},
		{"v2 no limit", map[string]string{
			"proc/self/cgroup":        "0::/a\n",
			"proc/self/mountinfo":     v2Mountinfo,
			"sys/fs/cgroup/a/cpu.max": "max 100000\n",
			"sys/fs/cgroup/cpu.max":   "max 100000\n",
		}, 0, 0, ""},
		{"v1 without a cpu controller mounted", map[string]string{
			"proc/self/cgroup":    "4:cpu,cpuacct:/a\n",
			"proc/self/mountinfo": "26 20 0:23 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
		}, 0, 0, ""},
		{"bad cpu.max", map[string]string{
			"proc/self/cgroup":        "0::/a\n",
			"proc/self/mountinfo":     v2Mountinfo,
			"sys/fs/cgroup/a/cpu.max": "lots\n",
		}, 0, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeRoot(t, tt.files)
			l, err := readCPULimit(root)
			if tt.cpus == 0 {
				if err == nil {
					t.Fatalf("limit %+v, want none", l)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.cpus != tt.cpus || l.period != tt.period || l.statPath != filepath.Join(root, tt.stat) {
				t.Errorf("limit %v CPUs per %v, stat %s; want %v per %v, %s", l.cpus, l.period, l.statPath, tt.cpus, tt.period, tt.stat)
			}
		})
	}
}

// TestQuotaGate drives the gate on a simulated clock and process CPU
// clock under a 0.5-CPU limit with 100ms windows (see quota_linux.go).
func TestQuotaGate(t *testing.T) {
	const (
		period = 100 * time.Millisecond
		half   = period / 4 // L/2 of a window: 0.25 CPU for 100ms
	)
	ms := time.Millisecond
	stat := filepath.Join(t.TempDir(), "cpu.stat")
	writeStat := func(n int) {
		if err := os.WriteFile(stat, []byte("nr_periods 9\nnr_throttled "+itoa(n)+"\nthrottled_time 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeStat(0)
	var q quotaGate
	cpu, reads := time.Second, 0
	q.cpu = func() time.Duration { reads++; return cpu }
	q.set(cpuLimit{cpus: 0.5, period: period, statPath: stat}, 0)
	if q.cpus() != 0.5 || !q.allow(0) {
		t.Fatalf("a new window: limit %v, allow false; want 0.5, true", q.cpus())
	}
	// Within the first window the process uses just under half its quota:
	// the gate stays open, reading the CPU clock at most 16 times.
	reads = 0
	for now := time.Duration(0); now < period; now += 100 * time.Microsecond {
		cpu = time.Second + time.Duration(float64(half-ms)*float64(now)/float64(period))
		if !q.allow(now) {
			t.Fatalf("closed at %v with %v used, under half the quota", now, cpu-time.Second)
		}
	}
	if reads > quotaWindowChecks {
		t.Errorf("%d reads of the CPU clock in one window, want at most %d", reads, quotaWindowChecks)
	}
	// The next window opens (the last one used under L/2); once its use
	// reaches half the quota the gate closes within a check.
	start := period
	cpu0 := cpu
	if !q.allow(start) {
		t.Fatal("closed after a window under half the quota")
	}
	closedAt := time.Duration(-1)
	for now := start; now < start+period; now += 100 * time.Microsecond {
		cpu = cpu0 + (now-start)/2 // using 0.5 CPU: all of its quota
		if !q.allow(now) {
			closedAt = now
			break
		}
	}
	if closedAt < 0 || closedAt > start+period/2+period/quotaWindowChecks {
		t.Fatalf("closed at %v in a window using the whole quota, want by %v", closedAt-start, period/2+period/quotaWindowChecks)
	}
	// It stays closed for the window, and the next, after a window that
	// used half or more.
	if q.allow(start + period - ms) {
		t.Error("reopened within the window")
	}
	if q.allow(start + period) {
		t.Error("open after a window that used the whole quota")
	}
	// A quiet window (idle, say) opens the next.
	if !q.allow(start + 2*period + ms) {
		t.Error("closed after an idle window")
	}
	// The group was throttled in that window: the next one is closed,
	// whatever the process's own use (other processes share the group).
	writeStat(1)
	if q.allow(start + 3*period + 2*ms) {
		t.Error("open after a window in which the group was throttled")
	}
	if !q.allow(start + 4*period + 3*ms) {
		t.Error("closed after a window without throttling or use")
	}
	// No limit: always open, and no clock read.
	q.set(cpuLimit{}, 0)
	reads = 0
	if !q.allow(time.Hour) || reads != 0 || q.cpus() != 0 {
		t.Errorf("no limit: allow false or %d clock reads, limit %v", reads, q.cpus())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
