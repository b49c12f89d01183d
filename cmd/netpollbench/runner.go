package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgepoll/edgepoll/internal/cpuquota"
)

// runner starts servers and load generators as separate processes.
type runner struct {
	opts   *options
	bins   map[string]string // binary name -> path
	stderr io.Writer
	pin    bool        // pinned cells: server on CPU 0, load generator on CPU 1, with taskset
	perf   bool        // count the server's syscalls with perf stat
	cal    calibration // the machine, measured before the run
}

// command returns cmd, pinned to cpu when pin is set.
func (r *runner) command(ctx context.Context, pin bool, cpu int, name string, args ...string) *exec.Cmd {
	if pin {
		return exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

var announce = regexp.MustCompile(`^(?:echoserver|httpserver) listening on (\S+) \(`)

// errNoSyscalls marks a measurement whose syscall count failed: its line
// is kept without the unit, and the run reports it as a failure.
var errNoSyscalls = errors.New("server syscall count missing (perf stat failed or counted nothing)")

// measure runs one load generator against a fresh server process in cell
// cp and returns its benchmark line, with syscalls/op appended when perf
// works and, under a quota, the throttling of the measured window
// (throttled-periods, throttled-ns, out of quota-periods). An HTTP cell
// runs cmd/httpserver with the configuration's flags. A line whose syscall
// count failed comes with errNoSyscalls.
func (r *runner) measure(ctx context.Context, s server, cp *cellPlan) (string, error) {
	life := cp.warmup + cp.duration + 30*time.Second
	pin := r.pin && !cp.unpinned
	bin, label := s.bin, s.label+cp.placement()
	var proto []string
	if cp.http() {
		bin, label = httpBin(s), label+"/proto=http"
		proto = []string{"-proto", "http"}
	}
	var group *cpuquota.Group
	if cp.quota > 0 {
		g, err := cpuquota.New(cp.quota)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", s.name, cp, err)
		}
		defer g.Close() // after the server stopped (deferred below, so run first)
		group = g
	}
	srv, err := r.start(ctx, pin, group, r.bins[bin], s.args, s.env, life)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.name, err)
	}
	defer srv.stop()

	lg := r.command(ctx, pin, 1, r.bins["loadgen"], append(proto, "-addr", srv.addr,
		"-conns", strconv.Itoa(cp.conns), "-size", strconv.Itoa(cp.size),
		"-rate", strconv.FormatFloat(cp.rate, 'f', -1, 64),
		"-duration", cp.duration.String(), "-warmup", cp.warmup.String(),
		"-server-pid", strconv.Itoa(srv.cmd.Process.Pid), "-format", "bench", "-labels", label)...)
	var lgOut, lgErr bytes.Buffer
	lg.Stdout, lg.Stderr = &lgOut, &lgErr
	if err := lg.Start(); err != nil {
		return "", err
	}
	syscalls := make(chan float64, 1)
	if r.perf {
		go func() { syscalls <- countSyscalls(ctx, srv.cmd.Process.Pid, cp.warmup, cp.duration) }()
	} else {
		syscalls <- -1
	}
	// The quota's counters at the end of the warm-up and of the load.
	var throttleStart cpuquota.Stat
	var throttleErr error
	if group != nil {
		select {
		case <-time.After(cp.warmup):
		case <-ctx.Done():
		}
		throttleStart, throttleErr = group.Stat()
	}
	lgWait := lg.Wait()
	n := <-syscalls
	line := benchLine(lgOut.String())
	if lgWait != nil || line == "" {
		return "", fmt.Errorf("%s %s: load generator failed: %v\n%s%s", s.name, cp, lgWait, lgOut.String(), lastLines(lgErr.String(), 5))
	}
	if group != nil {
		end, err := group.Stat()
		if err = errors.Join(throttleErr, err); err != nil {
			return "", fmt.Errorf("%s %s: throttling: %w", s.name, cp, err)
		}
		d := end.Sub(throttleStart)
		line += fmt.Sprintf("\t%d throttled-periods\t%d throttled-ns\t%d quota-periods", d.Throttled, d.ThrottledTime.Nanoseconds(), d.Periods)
	}
	if !r.perf {
		return line, nil
	}
	line, err = withSyscalls(line, n)
	if err != nil {
		return line, fmt.Errorf("%s %s: %w", s.name, cp, err)
	}
	return line, nil
}

// withSyscalls appends syscalls/op to a benchmark line from the n syscalls
// counted over its requests. A count that failed (n < 0) or found nothing
// leaves the line without the unit and returns errNoSyscalls: a server
// serving requests makes syscalls, so zero is a failed count, not a result.
func withSyscalls(line string, n float64) (string, error) {
	if reqs := benchN(line); n > 0 && reqs > 0 {
		return line + fmt.Sprintf("\t%.3f syscalls/op", n/float64(reqs)), nil
	}
	return line, errNoSyscalls
}

// started is a server process that has announced its address.
type started struct {
	cmd    *exec.Cmd
	addr   string
	stderr *serverLog // complete once stop returned
}

// serverLog is a server's stderr, kept whole and safe to read while the
// server writes it.
type serverLog struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{} // closed by the next Write
}

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wrote != nil {
		close(l.wrote)
		l.wrote = nil
	}
	return l.b.Write(p)
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// line returns the n-th (from 0) complete line of the log that starts
// with prefix, waiting for it until timeout passes or ctx ends.
func (l *serverLog) line(ctx context.Context, prefix string, n int, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		s := l.b.String()
		if i := strings.LastIndexByte(s, '\n'); i >= 0 {
			s = s[:i] // complete lines only
		} else {
			s = ""
		}
		seen := 0
		for _, ln := range strings.Split(s, "\n") {
			if strings.HasPrefix(ln, prefix) {
				if seen == n {
					l.mu.Unlock()
					return ln, nil
				}
				seen++
			}
		}
		if l.wrote == nil {
			l.wrote = make(chan struct{})
		}
		wrote := l.wrote
		l.mu.Unlock()
		select {
		case <-wrote:
		case <-deadline.C:
			return "", fmt.Errorf("no line %q from the server within %v", prefix, timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// start runs the server binary at path with args (and env added to ours)
// on CPU 0 when pin is set, in group (from its first instruction, so that
// it starts seeing its quota) unless group is nil, listening on a free
// port for at most life, and waits for its announcement. On failure the
// server is stopped and the error carries the end of its stderr.
func (r *runner) start(ctx context.Context, pin bool, group *cpuquota.Group, path string, args, env []string, life time.Duration) (*started, error) {
	args = append(slices.Clone(args), "-addr", "127.0.0.1:0", "-lifetime", life.String())
	if group != nil {
		path, args = group.Command(path, args...)
	}
	cmd := r.command(ctx, pin, 0, path, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr serverLog
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr, err := readAnnounce(out, 30*time.Second)
	if err != nil {
		stopServer(cmd) // and so stderr is complete
		return nil, fmt.Errorf("%w (stderr: %s)", err, lastLines(strings.TrimSpace(stderr.String()), 3))
	}
	go io.Copy(io.Discard, out)
	return &started{cmd, addr, &stderr}, nil
}

// stop ends the server and returns the end of its stderr, without the
// memstats lines the idle experiment asked for.
func (s *started) stop() string {
	stopServer(s.cmd)
	lines := strings.Split(strings.TrimSpace(s.stderr.String()), "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, memstatsPrefix) })
	return lastLines(strings.Join(lines, "\n"), 3)
}

// A job is one measurement: a server in a cell, in a round (0: the
// warm-up round).
type job struct {
	round int
	s     server
	c     *cellPlan
}

// runPlan measures p's cells into t round by round, each round's
// measurements in a random order (seeded by t.seed), then the idle-memory
// experiment and the herd. Each cell's lines go to its file in the output
// directory, each round's after a "round: N" line; the warm-up round's to
// warmup.txt. A failed measurement is in t.failures, and missing from the
// table; runPlan stops early only when ctx ends.
func (r *runner) runPlan(ctx context.Context, p *plan, t *table) error {
	files := map[string]*os.File{}
	last := map[string]int{} // the round each file's last line was of
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	open := func(name string) (*os.File, error) {
		if f, ok := files[name]; ok {
			return f, nil
		}
		f, err := os.Create(filepath.Join(r.opts.out, name))
		if err != nil {
			return nil, err
		}
		writeHeader(f, r.cal)
		fmt.Fprintf(f, "order-seed: %d\n", t.seed)
		files[name] = f
		return f, nil
	}
	rng := rand.New(rand.NewPCG(t.seed, 0x6e657470))
	total, done := 0, 0
	for round := 0; round <= p.rounds(); round++ {
		total += len(p.jobs(round, func(int, func(int, int)) {}))
	}
	start := time.Now()
	for round := 0; round <= p.rounds(); round++ {
		for _, j := range p.jobs(round, rng.Shuffle) {
			if err := ctx.Err(); err != nil {
				return err
			}
			done++
			what := fmt.Sprintf("round %d", round)
			if round == 0 {
				what = "warm-up"
			}
			line, err := r.measure(ctx, j.s, j.c)
			if err != nil {
				t.failures = append(t.failures, err.Error())
				fmt.Fprintf(r.stderr, "[%d/%d] %s %s %s: FAILED: %v\n", done, total, what, j.s.name, j.c, err)
				if line == "" {
					continue
				}
			}
			if j.c.file == sweepFile {
				line = sweepLine(line, false)
			}
			name := j.c.file
			if round == 0 {
				name = "warmup.txt"
			}
			f, err := open(name)
			if err != nil {
				return err
			}
			if last[name] != round {
				fmt.Fprintf(f, "round: %d\n", round)
				last[name] = round
			}
			fmt.Fprintln(f, line)
			if round > 0 {
				t.results = append(t.results, newResult(line, round))
			}
			fmt.Fprintf(r.stderr, "[%d/%d %s] %-8s %-11s %-28s %s\n", done, total, time.Since(start).Round(time.Second), what, j.s.name, j.c, progress(line))
		}
	}
	for name, f := range files {
		delete(files, name)
		if err := f.Close(); err != nil {
			return err
		}
	}
	if len(p.idle) > 0 {
		rows, fails, err := runIdle(ctx, r, p.idle, p.idleConns)
		if err != nil {
			return err
		}
		t.idle = rows
		t.failures = append(t.failures, fails...)
		var b strings.Builder
		writeHeader(&b, r.cal)
		for _, row := range rows {
			if l := idleLine(row); l != "" {
				b.WriteString(l + "\n")
			}
		}
		if err := os.WriteFile(filepath.Join(r.opts.out, "idle.txt"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if p.herd {
		rows, err := runHerd(ctx, r, r.opts, r.stderr)
		if err != nil {
			t.failures = append(t.failures, "herd: "+err.Error())
		}
		t.herd = rows
	}
	return nil
}

func readAnnounce(r io.Reader, timeout time.Duration) (string, error) {
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if m := announce.FindStringSubmatch(l); ok && m != nil {
			return m[1], nil
		}
		return "", fmt.Errorf("server's first line %q is not an announcement", l)
	case <-time.After(timeout):
		return "", fmt.Errorf("server did not announce its address within %v", timeout)
	}
}

// stopServer ends a server: SIGTERM, then SIGKILL if it lingers.
func stopServer(cmd *exec.Cmd) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

func benchLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			return l
		}
	}
	return ""
}

// benchN returns the iteration count of a benchmark line.
func benchN(line string) int64 {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// perfWorks reports whether perf can count syscall tracepoints here.
func perfWorks() bool {
	if runtime.GOOS != "linux" {
		return false
	}
	out, err := exec.Command("perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "true").CombinedOutput()
	return err == nil && bytes.Contains(out, []byte("raw_syscalls:sys_enter"))
}

// countSyscalls counts pid's syscalls (all threads) over the window that
// starts after warmup and lasts d, with perf stat; -1 if it cannot.
func countSyscalls(ctx context.Context, pid int, warmup, d time.Duration) float64 {
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		return -1
	}
	secs := strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
	out, err := exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter",
		"-p", strconv.Itoa(pid), "--", "sleep", secs).CombinedOutput()
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, ",")
		if len(f) > 2 && strings.Contains(l, "raw_syscalls:sys_enter") {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				return v
			}
		}
	}
	return -1
}
