package cpuquota

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// spinEnv, set in a re-executed test binary, makes it spin forever.
const spinEnv = "CPUQUOTA_TEST_SPIN"

func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) != "" {
		for {
		}
	}
	os.Exit(m.Run())
}

// spin starts a child that busy-loops until t ends or stop is called.
func spin(t *testing.T) (pid int, stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), spinEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	t.Cleanup(stop)
	return cmd.Process.Pid, stop
}

// newGroup makes a group that t closes, or ends t where none can be made.
func newGroup(t *testing.T, frac float64) *Group {
	t.Helper()
	g, err := New(frac)
	if errors.Is(err, ErrUnavailable) {
		testtool.Missing(t, "a writable cgroup cpu controller", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return g
}

func assertGone(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Close, stat %s: %v, want it gone", dir, err)
	}
}

func TestBadFrac(t *testing.T) {
	for _, frac := range []float64{0, -1, 0.001, math.NaN(), math.Inf(1), 1e300} {
		g, err := New(frac)
		if err == nil || errors.Is(err, ErrUnavailable) || g != nil {
			t.Errorf("New(%v) = %v, %v; want nil and an error that is not ErrUnavailable", frac, g, err)
		}
	}
}

func TestThrottle(t *testing.T) {
	g := newGroup(t, 0.1)
	if g.Frac() != 0.1 {
		t.Errorf("Frac() = %v, want 0.1", g.Frac())
	}
	pid, stop := spin(t)
	if err := g.Add(pid); err != nil {
		t.Fatal(err)
	}
	watchdog := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s := (Stat{}); s.Throttled < 2; {
		var err error
		if s, err = g.Stat(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-watchdog:
			t.Fatalf("a spinning child at 0.1 CPU was throttled in %d of %d periods in 10 s, want >= 2", s.Throttled, s.Periods)
		case <-tick.C:
		}
	}
	stop()
	s, err := g.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if !(s.Periods >= s.Throttled && s.Throttled >= 2 && s.ThrottledTime > 0) {
		t.Errorf("Stat() = %+v, want Periods >= Throttled >= 2 and ThrottledTime > 0", s)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, g.dir)
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if _, err := g.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Stat after Close: %v, want os.ErrClosed", err)
	}
	if err := g.Add(pid); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Add after Close: %v, want os.ErrClosed", err)
	}
}

// TestCloseEvicts closes a group with a live member: Close moves it out.
func TestCloseEvicts(t *testing.T) {
	g := newGroup(t, 0.5)
	pid, _ := spin(t)
	if err := g.Add(pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, g.dir)
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), filepath.Base(g.dir)) {
		t.Errorf("after Close, /proc/%d/cgroup still names the group:\n%s", pid, b)
	}
}

func TestSub(t *testing.T) {
	s := Stat{Periods: 10, Throttled: 4, ThrottledTime: 30 * time.Millisecond}
	u := Stat{Periods: 7, Throttled: 1, ThrottledTime: 10 * time.Millisecond}
	want := Stat{Periods: 3, Throttled: 3, ThrottledTime: 20 * time.Millisecond}
	if got := s.Sub(u); got != want {
		t.Errorf("%+v.Sub(%+v) = %+v, want %+v", s, u, got, want)
	}
	if got := s.Sub(s); got != (Stat{}) {
		t.Errorf("s.Sub(s) = %+v, want zero", got)
	}
}

// TestCommand: a program started through Command is in the group from its
// first instruction (it reads its own cgroup), keeps the pid the shell
// had, and gets the arguments appended after Command's.
func TestCommand(t *testing.T) {
	g := newGroup(t, 0.5)
	name, args := g.Command("/bin/sh", "-c", `cat /proc/self/cgroup; echo "pid $$ arg $0"`)
	cmd := exec.Command(name, append(args, "appended")...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v", name, args, err)
	}
	if !strings.Contains(string(out), "/"+filepath.Base(g.dir)+"\n") {
		t.Errorf("the program's cgroups do not name %s:\n%s", g.dir, out)
	}
	if want := "pid " + strconv.Itoa(cmd.Process.Pid) + " arg appended\n"; !strings.HasSuffix(string(out), want) {
		t.Errorf("output ends %q, want %q (the started pid, the appended argument)", out, want)
	}
}
