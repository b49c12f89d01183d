package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Calibration: what the machine charges for the events every result here
// is made of, measured before the run and again after it. Machines differ
// by more than any effect under test (a cross-core wakeup round trip of
// ~7 µs on one host, ~100 µs on another), and a host can change speed
// mid-run, so every report carries these figures and says when they moved.
//
// The figures are those of ../shared/tools/calib, measured in Go so that
// any machine can run them: a getppid syscall, and a wakeup round trip
// between two threads through a pair of pipes, on one CPU and across two.

// calibration is one measurement of the machine.
type calibration struct {
	cpu, kernel      string
	ncpu             int
	syscallNs        float64
	sameCoreUs       float64 // wakeup round trip, both threads on CPU 0
	crossCoreUs      float64 // wakeup round trip, CPU 0 and CPU 1; 0 with one CPU
	pinning, toolVer string
}

// calibMovedFraction is how far a figure may move between the start and
// the end of a run before the report says the host changed speed.
const calibMovedFraction = 0.30

// calibCompareFactor is how far two runs' figures may differ before
// -compare warns that it compares different machines.
const calibCompareFactor = 2.0

// calibrate measures the machine. pinning describes how the run pins its
// processes, for the record.
func calibrate(pinning string) (calibration, error) {
	c := calibration{cpu: cpuModel(), kernel: kernelRelease(), ncpu: runtime.NumCPU(), pinning: pinning, toolVer: runtime.Version()}
	c.syscallNs = syscallCost()
	cpus, err := allowedCPUs()
	if err != nil {
		return c, err
	}
	if c.sameCoreUs, err = wakeupRoundTrip(cpus[0], cpus[0]); err != nil {
		return c, fmt.Errorf("same-core wakeup round trip: %w", err)
	}
	if len(cpus) >= 2 {
		if c.crossCoreUs, err = wakeupRoundTrip(cpus[0], cpus[1]); err != nil {
			return c, fmt.Errorf("cross-core wakeup round trip: %w", err)
		}
	}
	return c, nil
}

// allowedCPUs lists the CPUs this process may run on, in order (under
// taskset, not necessarily from 0).
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("calibration: sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) == 0 {
		return nil, errors.New("calibration: no CPU in the affinity mask")
	}
	return cpus, nil
}

// syscallCost is the mean time of a getppid syscall, in ns.
func syscallCost() float64 {
	const n = 1 << 20
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	for range n {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
	return float64(time.Since(start).Nanoseconds()) / n
}

// wakeupRoundTrip is the mean time, in µs, for a thread on cpuA to wake a
// thread on cpuB blocked in read(2) on a pipe and be woken back the same
// way. It runs for about half a second after a warm-up.
func wakeupRoundTrip(cpuA, cpuB int) (float64, error) {
	var ping, pong [2]int
	if err := unix.Pipe2(ping[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	if err := unix.Pipe2(pong[:], unix.O_CLOEXEC); err != nil {
		unix.Close(ping[0])
		unix.Close(ping[1])
		return 0, err
	}
	// The echo thread owns pong's write end and closes it when it ends,
	// so that the other thread's read cannot outwait it.
	defer func() {
		for _, fd := range []int{ping[0], ping[1], pong[0]} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	// Both threads stay locked to their goroutines until these return, so
	// the runtime discards them, pinned, instead of reusing them.
	echoed := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer unix.Close(pong[1])
		if err := pinThread(cpuB); err != nil {
			echoed <- err
			return
		}
		b := []byte{0}
		for {
			if n, err := unix.Read(ping[0], b); n != 1 || err != nil {
				echoed <- nil // the writer closed: done
				return
			}
			if _, err := unix.Write(pong[1], b); err != nil {
				echoed <- err
				return
			}
		}
	}()
	type result struct {
		us  float64
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := pinThread(cpuA); err != nil {
			res <- result{err: err}
			return
		}
		b := []byte{'x'}
		trip := func() error {
			if _, err := unix.Write(ping[1], b); err != nil {
				return err
			}
			if n, err := unix.Read(pong[0], b); n != 1 || err != nil {
				return fmt.Errorf("read %d: %v", n, err)
			}
			return nil
		}
		for range 2000 { // warm-up
			if err := trip(); err != nil {
				res <- result{err: err}
				return
			}
		}
		n := 0
		start := time.Now()
		for time.Since(start) < 500*time.Millisecond {
			for range 100 {
				if err := trip(); err != nil {
					res <- result{err: err}
					return
				}
			}
			n += 100
		}
		res <- result{us: float64(time.Since(start).Microseconds()) / float64(n)}
	}()
	r := <-res
	unix.Close(ping[1]) // ends the echo thread
	ping[1] = -1
	if err := <-echoed; err != nil && r.err == nil {
		r.err = err
	}
	return r.us, r.err
}

// pinThread pins the calling OS thread to cpu.
func pinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// calibKeys are the figures compared between two calibrations.
var calibKeys = []string{"syscall-ns", "same-core-wakeup-roundtrip-us", "cross-core-wakeup-roundtrip-us"}

// figures returns the compared figures by key; a figure not measured
// (cross-core with one CPU) is absent.
func (c calibration) figures() map[string]float64 {
	m := map[string]float64{"syscall-ns": c.syscallNs, "same-core-wakeup-roundtrip-us": c.sameCoreUs}
	if c.crossCoreUs > 0 {
		m["cross-core-wakeup-roundtrip-us"] = c.crossCoreUs
	}
	return m
}

// writeConfig writes c as benchmark configuration lines, each key prefixed
// by prefix ("calib-" before the run, "calib-end-" after it), which
// benchstat shows and -compare reads back.
func (c calibration) writeConfig(w io.Writer, prefix string) {
	fmt.Fprintf(w, "%scpu: %s\n%skernel: %s\n%sncpu: %d\n", prefix, c.cpu, prefix, c.kernel, prefix, c.ncpu)
	fig := c.figures()
	for _, k := range calibKeys {
		if v, ok := fig[k]; ok {
			fmt.Fprintf(w, "%s%s: %.3g\n", prefix, k, v)
		}
	}
	fmt.Fprintf(w, "%spinning: %s\n%sgo: %s\n", prefix, c.pinning, prefix, c.toolVer)
}

// machine names the machine, for people.
func (c calibration) machine() string {
	return fmt.Sprintf("%s, %d CPUs, Linux %s, %s", c.cpu, c.ncpu, c.kernel, c.toolVer)
}

// String is the calibration's figures for people, one line.
func (c calibration) String() string {
	cross := "n/a (one CPU)"
	if c.crossCoreUs > 0 {
		cross = fmt.Sprintf("%.1f µs", c.crossCoreUs)
	}
	return fmt.Sprintf("syscall %.0f ns, wakeup round trip same-core %.1f µs, cross-core %s", c.syscallNs, c.sameCoreUs, cross)
}

// moved returns a warning for each figure that differs between a and b by
// more than frac of the smaller, or by more than a factor when factor > 0.
func moved(a, b map[string]float64, frac float64) []string {
	var out []string
	for _, k := range calibKeys {
		x, okx := a[k]
		y, oky := b[k]
		if !okx || !oky || x <= 0 || y <= 0 {
			continue
		}
		if math.Max(x, y)/math.Min(x, y)-1 > frac {
			out = append(out, fmt.Sprintf("%s %.3g -> %.3g (%+.0f%%)", k, x, y, (y/x-1)*100))
		}
	}
	return out
}

// readCalib reads the calibration figures with the given key prefix from
// a raw.txt's configuration lines.
func readCalib(raw []byte, prefix string) map[string]float64 {
	m := map[string]float64{}
	for _, l := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(l, ": ")
		if !ok || !strings.HasPrefix(k, prefix) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			m[strings.TrimPrefix(k, prefix)] = f
		}
	}
	return m
}
