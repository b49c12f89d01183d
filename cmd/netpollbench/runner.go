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

// runner measures the plan's jobs, each a server and a load generator (or
// cmd/herd) as separate processes, into the table. It writes no file: the
// render stage writes them all from the table.
type runner struct {
	bins   map[string]string // binary name -> path
	stderr io.Writer         // progress
	pin    bool              // pinned cells: server on CPU 0, load generator on CPU 1, with taskset
	perf   bool              // count the server's syscalls with perf stat
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

// measure measures job j and returns its benchmark line: a load (load),
// idle connections (idle) or the herd (herdRun, herd.go), by the kind of
// its cell. A line that comes with an error (its syscall count failed)
// is kept, and the error reported as a failure.
func (r *runner) measure(ctx context.Context, j job) (string, error) {
	switch j.c.kind {
	case kindIdle:
		return r.idle(ctx, j.s, j.c)
	case kindHerd:
		return r.herdRun(ctx, j.s, j.c)
	}
	return r.load(ctx, j.s, j.c, j.round > 0)
}

// load runs one load generator against a fresh server process in cell
// cp and returns its benchmark line, with syscalls/op appended when perf
// works and, under a quota, the throttling of the measured window
// (throttled-periods, throttled-ns, out of quota-periods). An HTTP cell
// runs cmd/httpserver with the configuration's flags. A line whose syscall
// count failed comes with errNoSyscalls. count is false in the warm-up
// round, whose figures are set aside: its syscalls are not counted (it is
// the run's first load after the builds, when perf stat is slowest to
// attach, and a count that started after a short load ended found nothing
// and failed the run for a figure nobody reads).
func (r *runner) load(ctx context.Context, s server, cp *cellPlan, count bool) (string, error) {
	life := cp.warmup + cp.duration + 30*time.Second
	pin := r.pin && !cp.unpinned
	bin, label := s.bin, s.label+cp.labels()
	var proto []string
	if cp.http() {
		bin, label = httpBin(s), label+"/proto=http"
		proto = []string{"-proto", "http"}
	}
	if cp.blocked > 0 {
		proto = append(proto, "-blocked", strconv.Itoa(cp.blocked))
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
	count = count && r.perf
	if count {
		go func() { syscalls <- countSyscalls(ctx, srv.cmd.Process.Pid, cp.warmup, cp.duration) }()
	} else {
		syscalls <- -1 // the line goes without syscalls/op
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
	if !count {
		return line, nil
	}
	line, err = withSyscalls(line, n)
	if err != nil {
		return line, fmt.Errorf("%s %s: %w", s.name, cp, err)
	}
	return line, nil
}

// idle measures cp.conns idle connections on a fresh process of s with
// loadgen -idle, which reads the server's memory itself (cmd/loadgen's
// idle.go), and returns its benchmark line. An HTTP idle cell runs
// cmd/httpserver with the configuration's flags, and loadgen -proto http.
func (r *runner) idle(ctx context.Context, s server, cp *cellPlan) (string, error) {
	// The servers inherit this process's limit on descriptors.
	if err := raiseNoFile(cp.conns + 64); err != nil {
		return "", fmt.Errorf("%s %s: %w", s.name, cp, err)
	}
	pin := r.pin && !cp.unpinned
	bin, label, proto := s.bin, s.label+cp.labels(), []string{"-size", strconv.Itoa(cp.size)}
	if cp.http() {
		bin, label, proto = httpBin(s), label+"/proto=http", []string{"-proto", "http"}
	}
	srv, err := r.start(ctx, pin, nil, r.bins[bin], s.args, s.env, idleLifetime)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.name, err)
	}
	lg := r.command(ctx, pin, 1, r.bins["loadgen"], append(proto, "-idle", "-addr", srv.addr, "-conns", strconv.Itoa(cp.conns),
		"-server-pid", strconv.Itoa(srv.cmd.Process.Pid), "-format", "bench", "-labels", label)...)
	var lgOut, lgErr bytes.Buffer
	lg.Stdout, lg.Stderr = &lgOut, &lgErr
	lgErrRun := lg.Run()
	tail := srv.stop()
	line := benchLine(lgOut.String())
	if lgErrRun != nil || line == "" {
		return "", fmt.Errorf("%s %s: load generator failed: %v\n%s%s (server stderr: %s)", s.name, cp, lgErrRun, lgOut.String(),
			lastLines(lgErr.String(), 5), tail)
	}
	return line, nil
}

// raiseNoFile sets this process's soft RLIMIT_NOFILE to the hard limit,
// which must be at least need. Setting it also makes the servers started
// afterwards inherit the raised limit: the Go runtime raises its own soft
// limit at start but restores the original one in the processes it
// starts, unless the program set the limit itself (syscall/rlimit.go,
// exec_linux.go). The Go servers raise their own again; the C reference
// (bench/cref/echo.c) never does, and would stop at 1024 with many
// systems' default soft limit.
func raiseNoFile(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return os.NewSyscallError("getrlimit", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return os.NewSyscallError("setrlimit", err)
	}
	if lim.Max < uint64(need) {
		return fmt.Errorf("RLIMIT_NOFILE hard limit %d is below the %d descriptors needed (ulimit -Hn)", lim.Max, need)
	}
	return nil
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
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *serverLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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

// stop ends the server and returns the end of its stderr.
func (s *started) stop() string {
	stopServer(s.cmd)
	return lastLines(strings.TrimSpace(s.stderr.String()), 3)
}

// runPlan measures p into t: the load cells round by round, each round's
// measurements in a random order (seeded by t.seed), the warm-up round's
// too (round 0, set aside by the renderers), then the idle and herd
// cells (lastJobs). A failed measurement is in t.failures, and missing
// from the table; runPlan stops early only when ctx ends.
func (r *runner) runPlan(ctx context.Context, p *plan, t *table) error {
	rng := rand.New(rand.NewPCG(t.seed, 0x6e657470))
	total := len(p.lastJobs())
	for round := 0; round <= p.rounds(); round++ {
		total += len(p.jobs(round, func(int, func(int, int)) {}))
	}
	var js []job
	for round := 0; round <= p.rounds(); round++ {
		js = append(js, p.jobs(round, rng.Shuffle)...)
	}
	js = append(js, p.lastJobs()...)
	start := time.Now()
	for i, j := range js {
		if err := ctx.Err(); err != nil {
			return err
		}
		what := fmt.Sprintf("round %d", j.round)
		switch {
		case j.c.kind != kindLoad:
			what = j.c.kind.String()
		case j.round == 0:
			what = "warm-up"
		}
		line, err := r.measure(ctx, j)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			t.failures = append(t.failures, err.Error())
			fmt.Fprintf(r.stderr, "[%d/%d] %s %s %s: FAILED: %v\n", i+1, total, what, j.s.name, j.c, err)
			if line == "" {
				continue
			}
		}
		res := newResult(j.c, j.round, line)
		t.results = append(t.results, res)
		fmt.Fprintf(r.stderr, "[%d/%d %s] %-8s %-11s %-28s %s\n", i+1, total, time.Since(start).Round(time.Second), what, j.s.name, j.c, progress(res))
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
