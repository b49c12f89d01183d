package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runner starts servers and load generators as separate processes.
type runner struct {
	opts   *options
	bins   map[string]string // binary name -> path
	stderr io.Writer
	pin    bool        // server on CPU 0, load generator on CPU 1, with taskset
	perf   bool        // count the server's syscalls with perf stat
	cal    calibration // the machine, measured before the run
}

// command returns cmd, pinned to cpu when pinning.
func (r *runner) command(ctx context.Context, cpu int, name string, args ...string) *exec.Cmd {
	if r.pin {
		return exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

var announce = regexp.MustCompile(`^(?:echoserver|httpserver) listening on (\S+) \(`)

// errNoSyscalls marks a measurement whose syscall count failed: its line
// is kept without the unit, and the run reports it as a failure.
var errNoSyscalls = errors.New("server syscall count missing (perf stat failed or counted nothing)")

// measure runs one load generator against a fresh server process and
// returns its benchmark line, with syscalls/op appended when perf works.
// An HTTP cell runs cmd/httpserver with the configuration's flags. A line
// whose syscall count failed comes with errNoSyscalls.
func (r *runner) measure(ctx context.Context, s server, c cell) (string, error) {
	o := r.opts
	life := o.warmup + o.duration + 30*time.Second
	bin, label := s.bin, s.label
	var proto []string
	if c.http() {
		bin, label = httpBin(s), s.label+"/proto=http"
		proto = []string{"-proto", "http"}
	}
	srv, err := r.start(ctx, r.bins[bin], s.args, s.env, life)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.name, err)
	}
	defer srv.stop()
	addr := srv.addr

	lg := r.command(ctx, 1, r.bins["loadgen"], append(proto, "-addr", addr,
		"-conns", strconv.Itoa(c.conns), "-size", strconv.Itoa(c.size),
		"-rate", strconv.FormatFloat(c.rate, 'f', -1, 64),
		"-duration", o.duration.String(), "-warmup", o.warmup.String(),
		"-server-pid", strconv.Itoa(srv.cmd.Process.Pid), "-format", "bench", "-labels", label)...)
	var lgOut, lgErr bytes.Buffer
	lg.Stdout, lg.Stderr = &lgOut, &lgErr
	if err := lg.Start(); err != nil {
		return "", err
	}
	syscalls := make(chan float64, 1)
	if r.perf {
		go func() { syscalls <- countSyscalls(ctx, srv.cmd.Process.Pid, o.warmup, o.duration) }()
	} else {
		syscalls <- -1
	}
	lgWait := lg.Wait()
	n := <-syscalls
	line := benchLine(lgOut.String())
	if lgWait != nil || line == "" {
		return "", fmt.Errorf("%s %s: load generator failed: %v\n%s%s", s.name, c, lgWait, lgOut.String(), lastLines(lgErr.String(), 5))
	}
	if !r.perf {
		return line, nil
	}
	line, err = withSyscalls(line, n)
	if err != nil {
		return line, fmt.Errorf("%s %s: %w", s.name, c, err)
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
	stderr *bytes.Buffer // complete, and safe to read, once stop returned
}

// start runs the server binary at path with args (and env added to ours)
// on CPU 0 (when pinning),
// listening on a free port for at most life, and waits for its
// announcement. On failure the server is stopped and the error carries the
// end of its stderr.
func (r *runner) start(ctx context.Context, path string, args, env []string, life time.Duration) (*started, error) {
	cmd := r.command(ctx, 0, path, append(slices.Clone(args), "-addr", "127.0.0.1:0", "-lifetime", life.String())...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
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

// A job is one measurement of a series: a server under a load, in a round.
type job struct {
	round int
	s     server
	c     cell
}

// interleave orders rounds × cells × servers so that each round measures
// every server in every cell once before the next begins: drift over the
// run then hits all servers alike. Round 0, first, is the warm-up round
// (the first measurements of a run are slower: caches, CPU frequency,
// the host), measured and set aside, when warm is set.
func interleave(rounds int, warm bool, cells []cell, srvs []server) []job {
	var jobs []job
	first := 1
	if warm {
		first = 0
	}
	for round := first; round <= rounds; round++ {
		for _, c := range cells {
			for _, s := range srvs {
				jobs = append(jobs, job{round, s, c})
			}
		}
	}
	return jobs
}

// measured is a job's benchmark line.
type measured struct {
	job
	line string
}

// series measures the jobs in order, passes each benchmark line through
// edit (if not nil), writes it to w (warm-up rounds to warm, if not nil)
// and reports progress, prefixed by what, to stderr. It returns the lines
// and the failed measurements; it stops early only when ctx ends.
func (r *runner) series(ctx context.Context, what string, jobs []job, edit func(job, string) string, w, warm io.Writer) ([]measured, []string, error) {
	var lines []measured
	var failures []string
	start := time.Now()
	for i, j := range jobs {
		if err := ctx.Err(); err != nil {
			return lines, failures, err
		}
		round := fmt.Sprintf("round %d", j.round)
		if j.round == 0 {
			round = "warm-up"
		}
		line, err := r.measure(ctx, j.s, j.c)
		if err != nil {
			failures = append(failures, err.Error())
			fmt.Fprintf(r.stderr, "[%d/%d] %s%s %s %s: FAILED: %v\n", i+1, len(jobs), what, round, j.s.name, j.c, err)
			if line == "" {
				continue
			}
		}
		if edit != nil {
			line = edit(j, line)
		}
		if j.round == 0 {
			if warm != nil {
				fmt.Fprintln(warm, line)
			}
		} else {
			fmt.Fprintln(w, line)
			lines = append(lines, measured{j, line})
		}
		fmt.Fprintf(r.stderr, "[%d/%d %s] %s%-7s %-11s %-22s %s\n", i+1, len(jobs), time.Since(start).Round(time.Second), what, round, j.s.name, j.c, summary(line))
	}
	return lines, failures, nil
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
