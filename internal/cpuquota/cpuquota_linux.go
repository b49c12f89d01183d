package cpuquota

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The hierarchies New looks for, in this order. A controller is bound to
// one hierarchy at a time, so at most one of them has cpu.
const (
	v1Root = "/sys/fs/cgroup/cpu"
	v2Root = "/sys/fs/cgroup"
)

// seq tells apart the groups one process makes.
var seq atomic.Uint64

// Group is a cgroup whose processes share a CPU quota: frac of one CPU per
// 100 ms CFS period.
type Group struct {
	frac     float64
	parent   string        // the hierarchy's root, where Close moves members
	dir      string        // parent/cpuquota.PID.SEQ
	timeKey  string        // cpu.stat's throttled time: throttled_time (v1), throttled_usec (v2)
	timeUnit time.Duration // and its unit

	mu     sync.Mutex // guards closed; held by Add and Close, so none joins a removed group
	closed bool       // dir is gone
}

// New makes a group whose members may use frac (0.01 to 1e6) of one CPU.
// On cgroup v2 it enables cpu in the root's cgroup.subtree_control if it is
// not already, and leaves it so.
func New(frac float64) (*Group, error) {
	quota, err := quotaUS(frac)
	if err != nil {
		return nil, err
	}
	q, p := strconv.FormatInt(quota, 10), strconv.Itoa(periodUS)
	g := &Group{frac: frac}
	var settings [][2]string // file, value
	if _, err := os.Stat(filepath.Join(v1Root, "cpu.cfs_quota_us")); err == nil {
		g.parent, g.timeKey, g.timeUnit = v1Root, "throttled_time", time.Nanosecond
		settings = [][2]string{{"cpu.cfs_period_us", p}, {"cpu.cfs_quota_us", q}}
	} else if b, err := os.ReadFile(filepath.Join(v2Root, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
		if err := enableCPU(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		g.parent, g.timeKey, g.timeUnit = v2Root, "throttled_usec", time.Microsecond
		settings = [][2]string{{"cpu.max", q + " " + p}}
	} else {
		return nil, fmt.Errorf("%w: no %s/cpu.cfs_quota_us (v1), no cpu in %s/cgroup.controllers (v2)", ErrUnavailable, v1Root, v2Root)
	}
	g.dir = filepath.Join(g.parent, fmt.Sprintf("cpuquota.%d.%d", os.Getpid(), seq.Add(1)))
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, unavailable(err)
	}
	for _, s := range settings {
		if err := write(filepath.Join(g.dir, s[0]), s[1]); err != nil {
			return nil, errors.Join(unavailable(err), rmdir(g.dir))
		}
	}
	return g, nil
}

// enableCPU makes the cpu controller available to children of the v2 root.
func enableCPU() error {
	path := filepath.Join(v2Root, "cgroup.subtree_control")
	b, err := os.ReadFile(path)
	if err != nil || slices.Contains(strings.Fields(string(b)), "cpu") {
		return err
	}
	return write(path, "+cpu")
}

// unavailable wraps ErrUnavailable around err if it means cgroups are
// closed to this process.
func unavailable(err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Frac returns the group's quota as a fraction of one CPU.
func (g *Group) Frac() float64 { return g.frac }

// Add moves process pid, all its threads, into the group.
func (g *Group) Add(pid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return g.errClosed()
	}
	return write(filepath.Join(g.dir, "cgroup.procs"), strconv.Itoa(pid))
}

// Command returns the command line (name, args) that runs name with args
// as a member of the group from its first instruction, so that the program
// sees its quota when it starts (the Go runtime reads the CPU limit for
// GOMAXPROCS then): /bin/sh writes its own pid into cgroup.procs and execs
// name, keeping the pid. Arguments appended to args reach name.
func (g *Group) Command(name string, args ...string) (string, []string) {
	script := `echo $$ > "$0" && exec "$@"`
	return "/bin/sh", append([]string{"-c", script, filepath.Join(g.dir, "cgroup.procs"), name}, args...)
}

// Stat reads the group's throttling counters.
func (g *Group) Stat() (Stat, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return Stat{}, g.errClosed()
	}
	path := filepath.Join(g.dir, "cpu.stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	var s Stat
	var t int64
	want := map[string]*int64{"nr_periods": &s.Periods, "nr_throttled": &s.Throttled, g.timeKey: &t}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		if dst, ok := want[k]; ok {
			if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
				return Stat{}, fmt.Errorf("cpuquota: %s: %w", path, err)
			}
			delete(want, k)
		}
	}
	for k := range want {
		return Stat{}, fmt.Errorf("cpuquota: %s has no %s", path, k)
	}
	s.ThrottledTime = time.Duration(t) * g.timeUnit
	return s, nil
}

// closeTries bounds how often Close retries rmdir while it fails with EBUSY:
// a member may fork between Close's reading cgroup.procs and its rmdir.
const closeTries = 100

// Close moves any processes still in the group back to the hierarchy's root
// and removes the group. Once it has returned nil, it does nothing.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	var err error
	for try := 1; ; try++ {
		if err = g.evict(); err == nil {
			err = rmdir(g.dir)
		}
		if !errors.Is(err, unix.EBUSY) || try == closeTries {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // not already gone
		return err
	}
	g.closed = true
	return nil
}

// evict moves the group's members to the parent's cgroup.procs, one
// process per write as the kernel requires. A member that has exited
// meanwhile (ESRCH) has left anyway.
func (g *Group) evict() error {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for pid := range strings.FieldsSeq(string(b)) {
		err := write(filepath.Join(g.parent, "cgroup.procs"), pid)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

func (g *Group) errClosed() error {
	return fmt.Errorf("cpuquota: group %s: %w", g.dir, os.ErrClosed)
}

// write writes s to a cgroup file in one write(2), as the kernel requires;
// an error is an *fs.PathError naming the file and the errno.
func write(path, s string) error {
	return os.WriteFile(path, []byte(s), 0)
}

func rmdir(dir string) error {
	if err := unix.Rmdir(dir); err != nil {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}
