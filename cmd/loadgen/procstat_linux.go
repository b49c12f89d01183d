package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// selfCPU returns the user and system CPU time of this process, all threads
// included (getrusage RUSAGE_SELF).
func selfCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, os.NewSyscallError("getrusage", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// procSample is the CPU time and context switches of another process.
type procSample struct {
	cpu       time.Duration
	cpuSource string // "cpuclock" (ns) or "stat" (10ms ticks)
	ctxsw     int64  // voluntary and involuntary, over its live threads
}

// sampleProc reads the counters of process pid.
//
// CPU time comes from the process's CPU-time clock (clock_gettime on the
// clock id clock_getcpuclockid(3) would return): the kernel's nanosecond
// sum over all threads, exited ones included. If that clock cannot be read,
// it falls back to utime+stime in /proc/PID/stat, in USER_HZ ticks, which
// the kernel fixes at 100 per second for user space.
//
// Context switches are summed over /proc/PID/task/*/status, so the
// switches of a thread that exits within the window are lost.
func sampleProc(pid int) (procSample, error) {
	var s procSample
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err == nil {
		s.cpu, s.cpuSource = time.Duration(ts.Nano()), "cpuclock"
	} else {
		ticks, err := statTicks(pid)
		if err != nil {
			return s, err
		}
		s.cpu, s.cpuSource = time.Duration(ticks)*(time.Second/userHZ), "stat"
	}
	var err error
	s.ctxsw, err = ctxSwitches(pid)
	return s, err
}

// userHZ is the unit of the times in /proc/PID/stat.
const userHZ = 100

// processCPUClock is the clock id of the CPU time of the whole process pid,
// laid out as the kernel's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED):
//
//	bits 3..31  ^pid
//	bit  2      0: the whole process, not one thread
//	bits 0..1   2: CPUCLOCK_SCHED, nanoseconds of runtime
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return int32(^pid<<3 | cpuclockSched)
}

// statTicks returns utime+stime from /proc/PID/stat.
func statTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold anything;
	// fields 3 on follow the last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields, want at least 15", pid, len(f)+2)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return utime + stime, nil
}

// ctxSwitches sums the voluntary and involuntary context switches of the
// threads of pid.
func ctxSwitches(pid int) (int64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, task := range tasks {
		f, err := os.Open(filepath.Join(dir, task.Name(), "status"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited since ReadDir
		}
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			name, value, _ := strings.Cut(sc.Text(), ":")
			if name == "voluntary_ctxt_switches" || name == "nonvoluntary_ctxt_switches" {
				v, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
				if err != nil {
					f.Close()
					return 0, fmt.Errorf("%s/%s/status: %w", dir, task.Name(), err)
				}
				n += v
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return 0, err
		}
	}
	return n, nil
}

// cpuModel returns the processor name the way go test prints it, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}

// readRSS returns the VmRSS of process pid in bytes.
func readRSS(pid int) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("server gone: %w", err)
	}
	v, err := kBLine(b, "VmRSS:")
	if err != nil {
		return 0, fmt.Errorf("%s: %w (has the server exited?)", path, err)
	}
	return v, nil
}

// readSlab returns the Slab line of /proc/meminfo in bytes: the kernel's
// slab allocations, sockets among them, system-wide.
func readSlab() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	v, err := kBLine(b, "Slab:")
	if err != nil {
		return 0, fmt.Errorf("/proc/meminfo: %w", err)
	}
	return v, nil
}

// kBLine returns the value, in bytes, of the line "<key> <n> kB" of a
// /proc file.
func kBLine(b []byte, key string) (int64, error) {
	for line := range strings.Lines(string(b)) {
		v, ok := strings.CutPrefix(line, key)
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("bad line %q", strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad line %q", strings.TrimSpace(line))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s line", strings.TrimSuffix(key, ":"))
}

// portRange returns the ephemeral ports outgoing connections take.
func portRange() (lo, hi int, err error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: %v", b, err)
	}
	return lo, hi, nil
}
