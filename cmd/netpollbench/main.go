// Command netpollbench runs the comparison and says first whether
// netpoll's default, and serving on demand (netpoll.Server), beat package
// net. It measures the machine (a syscall, wakeup round trips on one CPU
// and across two), then a plan of cells (plan.go): echo at 1 and 50
// connections with the server pinned to one CPU (GOMAXPROCS=1) and the
// load generator on another, the same unpinned (as servers normally run),
// net/http plaintext over keep-alive, the blocked neighbour (one
// connection's requests held 2 ms by the server, outside its poller, while
// another pings), echo under a CPU quota (a cgroup of 0.5 CPU, the tail and
// throttling measured), an open-loop sweep, resident memory per idle
// connection (18,000 of them, echo, and net/http keep-alive for net and the
// runtime's profile rows) and the thundering-herd experiment. Every
// configuration (package net, netpoll's default and modes, on demand, its
// spinning and adaptive pollers, the peers gnet, nbio and
// cloudwego/netpoll, a C epoll reference, the patched runtime's rows, of
// which rt-none and the recommended profile rt-profile join every cell) runs
// as a separate server process under cmd/loadgen, once per round, in a
// random order within the round (-seed), so the host's drift between
// rounds cancels in the within-round ratios. -before REF adds the default
// served by cmd/echoserver built from the commit REF (before.go), paired
// with the default in the same way: a change's cost, measured in one run.
//
// The pipeline has three stages: the plan lists every experiment
// (plan.go), the runner measures it into one table and writes nothing
// (runner.go), and the render stage writes every file from the table
// alone (render.go): table.json, which it can be read back from, the
// benchmark lines, the summary (summary.txt), the benchstat tables, the
// plots and one self-contained report.html.
//
// The verdict (paired.go, verdict.go) compares the default and on demand
// with net and the best peer on each cell's measure: req/s where the
// server is the bottleneck, server CPU per request where the load
// generator or the machine is saturated or the loop is open, the time
// throttled under a quota, the pinging connection's p99 beside a blocked
// one, memory per idle connection; and the runtime's profile against
// rt-none and net in every cell (profile.go). netpollbench exits non-zero
// if a measurement failed.
//
//	go run ./cmd/netpollbench              # about six and a half minutes on 2 CPUs
//	go run ./cmd/netpollbench -full        # the whole matrix
//	go run ./cmd/netpollbench -compare out/OLD
//	go run ./cmd/netpollbench -before HEAD~1 # the default beside itself built from the parent commit
//	go run ./cmd/netpollbench -configs net,auto -conns 1 -http none -quota 0 -sweep=false -neighbour=false -idle 0 -herd=false
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgepoll/edgepoll/internal/cpuquota"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "netpollbench:", err)
		os.Exit(1)
	}
}

type options struct {
	out           string
	configs       []string
	shapes        []cell // echo's closed-loop shapes: -conns × -sizes
	httpConns     []int  // net/http's cells, when -http names configurations
	http          []string
	rounds        int
	duration      time.Duration
	warmup        time.Duration
	pinned        bool // the run pins: server on CPU 0, load generator on CPU 1
	unpinned      bool // also the unpinned cells (when the run pins)
	quota         float64
	quotaRounds   int
	quotaDuration time.Duration
	quotaWarmup   time.Duration
	herd          bool
	neighbour     bool      // run the blocked-neighbour cell
	sweep         bool      // run the open-loop sweep
	rates         []float64 // the sweep's rates, ascending, the closed loop (0) last
	sweepRounds   int
	full          bool
	compare       string
	render        string // -render: a run's directory to render again; "" to measure
	idle          int    // idle connections for the memory experiment; 0: off
	rtGoroot      string // the patched toolchain, when the runtime's rows run
	before        string // -before: the commit the before configurations are built from; "" for none
	seed          uint64 // the order within rounds
}

// runDefaults are the values a run takes when a flag is not given: one
// set for the default run, one for -full. The help text is made from them.
type runDefaults struct {
	configs       []string
	rtConfigs     []string // the runtime's rows, when the patched toolchain is built
	conns, sizes  string
	rounds        int
	duration      time.Duration
	warmup        time.Duration
	sweepRounds   int
	quotaRounds   int
	quotaDuration time.Duration
	quotaWarmup   time.Duration
}

// runBudget is how long the default run may take to measure, on 2 CPUs
// with the runtime's rows, by its plan's estimate (TestDefaultRunTime).
// It was 6 minutes, with the estimate at 5m27s, before the profile's rows
// (profileConfigs) joined every cell (issue 37); they add about a minute
// (6m27s): rt-none and rt-profile in the two unpinned echo cells (18 s),
// the sweep's two open-loop rates (15 s) and the blocked neighbour (9 s),
// and the HTTP idle cell of net, rt-none and rt-profile (17 s). The
// rounds and windows stay as they were: fewer would widen the paired
// intervals the profile is judged on.
const runBudget = 6*time.Minute + 30*time.Second

var (
	// The default run: the configurations the verdict needs (package net,
	// netpoll's defaults, the same without spinning, serving on demand,
	// the best peer of recorded runs, and the runtime's rows shrunk to
	// rt-none and its profile) with enough rounds for the paired interval,
	// within runBudget. -full runs the whole matrix.
	defaults = runDefaults{
		configs:   []string{"net", "auto", "et", "ondemand", "gnet"},
		rtConfigs: profileConfigs,
		conns:     "1,50", sizes: "64",
		rounds: 6, duration: 400 * time.Millisecond, warmup: 150 * time.Millisecond,
		sweepRounds: 5,
		quotaRounds: 5, quotaDuration: 2 * time.Second, quotaWarmup: 500 * time.Millisecond,
	}
	fullDefaults = runDefaults{
		configs:   []string{"net", "et", "oneshot", "lt", "spin", "auto", "ondemand", "gnet", "nbio", "cloudwego", "c"},
		rtConfigs: []string{"rt-none", "rt-oneshot", "rt-spin50", "rt-spinauto", "rt-shards4", "rt-shortread", "rt-zeroread", "rt-profile"},
		conns:     "1,50,1000", sizes: "64,4096",
		rounds: 10, duration: 2 * time.Second, warmup: 500 * time.Millisecond,
		sweepRounds: 6,
		quotaRounds: 6, quotaDuration: 5 * time.Second, quotaWarmup: time.Second,
	}
)

// both describes a default and -full's: "4 (-full: 6)".
func both[T any](def, full T) string { return fmt.Sprintf("%v; -full: %v", def, full) }

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.render != "" {
		return rerender(ctx, o, stdout)
	}
	return bench(ctx, o, stdout, stderr)
}

// rerender renders the run in o.render again, from its table.json alone,
// into o.out: the files of a recorded run after a change to how they are
// made, with nothing measured.
func rerender(ctx context.Context, o *options, stdout io.Writer) error {
	t, err := readTable(o.render)
	if err != nil {
		return fmt.Errorf("-render: %w", err)
	}
	if o.compare != "" {
		t.compare = o.compare
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	return render(ctx, root, o.out, t, stdout)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("netpollbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d, f := defaults, fullDefaults
	o := &options{}
	fs.StringVar(&o.out, "out", "", "output directory (default out/<time>; with -render, the run's own)")
	fs.StringVar(&o.render, "render", "", "measure nothing: render the run in `DIR` again from its table.json (into -out, or DIR), with -compare if given")
	configs := fs.String("configs", "", "comma-separated configurations (default "+both(strings.Join(d.configs, ","), strings.Join(f.configs, ","))+
		"; and the runtime's rows "+both(strings.Join(d.rtConfigs, ","), strings.Join(f.rtConfigs, ","))+" when the patched toolchain is built)")
	conns := fs.String("conns", "", "comma-separated connection counts (default "+both(d.conns, f.conns)+")")
	sizes := fs.String("sizes", "", "comma-separated message sizes, at least 16 (default "+both(d.sizes, f.sizes)+")")
	fs.IntVar(&o.rounds, "rounds", 0, "rounds, each measuring every configuration in every closed-loop cell once, in a random order, after a discarded warm-up round (default "+both(d.rounds, f.rounds)+")")
	fs.DurationVar(&o.duration, "duration", 0, "measured time per measurement (default "+both(d.duration, f.duration)+")")
	fs.DurationVar(&o.warmup, "warmup", 0, "warm-up per measurement, not measured (default "+both(d.warmup, f.warmup)+")")
	pin := fs.String("pin", "auto", "pin server to CPU 0 (GOMAXPROCS=1) and load generator to CPU 1 in the pinned cells: auto (with taskset and 2 CPUs), on or off (every cell unpinned)")
	fs.BoolVar(&o.unpinned, "unpinned", true, "also measure echo unpinned (GOMAXPROCS = the machine's CPUs, as servers normally run), beside the pinned cells")
	fs.Float64Var(&o.quota, "quota", 0.5, "the quota cell: echo, 1 conn, the server pinned and in a cgroup limited to this many CPUs, for "+strings.Join(quotaConfigs, ", ")+"; 0 skips it")
	fs.IntVar(&o.quotaRounds, "quota-rounds", 0, "rounds of the quota cell (default "+both(d.quotaRounds, f.quotaRounds)+")")
	fs.DurationVar(&o.quotaDuration, "quota-duration", 0, "measured time per measurement in the quota cell, long enough for its tail (default "+both(d.quotaDuration, f.quotaDuration)+")")
	fs.BoolVar(&o.herd, "herd", true, "also run the thundering-herd experiment")
	fs.BoolVar(&o.neighbour, "neighbour", true, fmt.Sprintf("also run the blocked-neighbour cell: echo unpinned, one connection's requests each held %v by the server while another pings, for those of %s among -configs",
		neighbourDelay, strings.Join(neighbourConfigs, ", ")))
	fs.BoolVar(&o.sweep, "sweep", true, "also run the open-loop sweep: 1 conn, 64 B, at each of -rates, for those of "+strings.Join(sweepConfigs, ", ")+" among -configs")
	rates := fs.String("rates", "2000,10000,closed", "sweep: comma-separated offered loads in requests/s; 0 or closed for the closed loop")
	fs.IntVar(&o.sweepRounds, "sweep-rounds", 0, "sweep rounds (default "+both(d.sweepRounds, f.sweepRounds)+")")
	fs.BoolVar(&o.full, "full", false, "run the whole matrix")
	fs.StringVar(&o.compare, "compare", "", "an earlier output directory to compare with")
	httpFlag := fs.String("http", "", "comma-separated configurations also measured serving net/http plaintext over keep-alive at each of -conns, among "+strings.Join(httpConfigs, ", ")+
		", or none (default "+strings.Join(defaultHTTPConfigs, ",")+" and the runtime's rows of the run; -full: all of them among -configs)")
	rt := fs.String("runtime", "auto", "rows for the patched runtime (runtime_patch/build.sh) under GODEBUG settings, package net's servers: auto (when the toolchain is built), on or off")
	fs.IntVar(&o.idle, "idle", 18000, "idle connections held open to measure each server's resident memory per connection, echo and "+
		"net/http ("+strings.Join(httpIdleConfigs, ", ")+" among the -http configurations); 0 skips them")
	fs.StringVar(&o.before, "before", "", "a git commit `REF`: also run the configuration before, "+defaultCfg+" served by cmd/echoserver built from REF, "+
		"in the echo cells, the open-loop sweep and the idle experiment, paired with "+defaultCfg+" within rounds (before-NAME in -configs serves echoserver's NAME so)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the order within rounds (default: from the clock; raw.txt records it)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.render != "" {
		var measuring []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "render" && f.Name != "out" && f.Name != "compare" {
				measuring = append(measuring, "-"+f.Name)
			}
		})
		if len(measuring) > 0 {
			return nil, fmt.Errorf("-render measures nothing: not with %s", strings.Join(measuring, ", "))
		}
		if o.out == "" {
			o.out = o.render
		}
	}
	if o.full {
		d = f
	}
	pick := func(flagVal, def string) string {
		if flagVal != "" {
			return flagVal
		}
		return def
	}
	o.configs = strings.Split(pick(*configs, strings.Join(d.configs, ",")), ",")
	goroot := patchedGoroot()
	switch *rt {
	case "off":
	case "on", "auto":
		if goroot == "" && *rt == "on" {
			return nil, fmt.Errorf("-runtime on: no patched toolchain at %s: build it with runtime_patch/build.sh", patchedGorootPath())
		}
		if goroot != "" && *configs == "" {
			o.configs = append(o.configs, d.rtConfigs...)
		}
	default:
		return nil, fmt.Errorf("bad -runtime %q: want auto, on or off", *rt)
	}
	switch {
	case o.before != "" && !slices.ContainsFunc(o.configs, isBefore):
		o.configs = append(o.configs, "before")
	case o.before == "" && slices.ContainsFunc(o.configs, isBefore):
		return nil, fmt.Errorf("-configs %s: the before configurations need -before REF, the commit to build them from", strings.Join(o.configs, ","))
	}
	if slices.ContainsFunc(o.configs, func(n string) bool { return strings.HasPrefix(n, "rt-") }) {
		if goroot == "" {
			return nil, fmt.Errorf("-configs %s: the rt- configurations need the patched toolchain at %s (runtime_patch/build.sh)", strings.Join(o.configs, ","), patchedGorootPath())
		}
		o.rtGoroot = goroot
	}
	cs, err := ints("conns", pick(*conns, d.conns), 1)
	if err != nil {
		return nil, err
	}
	ss, err := ints("sizes", pick(*sizes, d.sizes), 16)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		for _, s := range ss {
			o.shapes = append(o.shapes, cell{conns: c, size: s})
		}
	}
	fullHTTP := keepNames(httpConfigs, o.configs)
	defHTTP := slices.Clone(defaultHTTPConfigs)
	if o.rtGoroot != "" {
		defHTTP = append(defHTTP, keepNames(d.rtConfigs, o.configs)...)
	}
	if o.full {
		defHTTP = fullHTTP
	}
	switch h := pick(*httpFlag, strings.Join(defHTTP, ",")); h {
	case "none", "":
	default:
		o.http = strings.Split(h, ",")
		for _, n := range o.http {
			if !slices.Contains(httpConfigs, n) {
				return nil, fmt.Errorf("bad -http %q: %q does not serve net/http; choose among %s", h, n, strings.Join(httpConfigs, ", "))
			}
			if *httpFlag != "" && !slices.Contains(o.configs, n) {
				return nil, fmt.Errorf("bad -http %q: %q is not among -configs", h, n)
			}
		}
		// The default list keeps those of the run's configurations.
		o.http = keepNames(o.http, o.configs)
		if len(o.http) > 0 {
			o.httpConns = cs
		}
	}
	if o.idle < 0 {
		return nil, fmt.Errorf("bad -idle %d: want a number of connections, or 0", o.idle)
	}
	if o.rates, err = parseRates(*rates); err != nil {
		return nil, err
	}
	setDefault(&o.rounds, d.rounds)
	setDefault(&o.sweepRounds, d.sweepRounds)
	setDefault(&o.duration, d.duration)
	setDefault(&o.warmup, d.warmup)
	setDefault(&o.quotaRounds, d.quotaRounds)
	setDefault(&o.quotaDuration, d.quotaDuration)
	o.quotaWarmup = d.quotaWarmup
	if o.rounds < 1 || o.sweepRounds < 1 || o.quotaRounds < 1 || o.duration <= 0 || o.quotaDuration <= 0 || o.warmup < 0 {
		return nil, fmt.Errorf("bad -rounds %d, -sweep-rounds %d, -quota-rounds %d, -duration %v, -quota-duration %v or -warmup %v",
			o.rounds, o.sweepRounds, o.quotaRounds, o.duration, o.quotaDuration, o.warmup)
	}
	if o.quota < 0 || math.IsNaN(o.quota) || math.IsInf(o.quota, 0) {
		return nil, fmt.Errorf("bad -quota %v: want a number of CPUs, or 0", o.quota)
	}
	switch *pin {
	case "on":
		if !hasTaskset() {
			return nil, errors.New("-pin on needs taskset (util-linux)")
		}
		o.pinned = true
	case "auto":
		o.pinned = runtime.NumCPU() >= 2 && hasTaskset()
	case "off":
	default:
		return nil, fmt.Errorf("bad -pin %q: want auto, on or off", *pin)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	if o.out == "" {
		o.out = filepath.Join("out", time.Now().Format("20060102-150405"))
	}
	// Absolute: binaries are built from other directories (bench/peers).
	out, err := filepath.Abs(o.out)
	if err != nil {
		return nil, err
	}
	o.out = out
	return o, nil
}

// keepNames returns the names of names that are among of, in order.
func keepNames(names, of []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !slices.Contains(of, n) })
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func ints(name, s string, least int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("bad -%s %q: want comma-separated numbers, each at least %d", name, s, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// bench runs the pipeline: build, plan, calibrate, measure the plan into
// the table, calibrate again, render the table. An interrupted run writes
// the data it measured (writeData) and no more.
func bench(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	srvs, err := pickServers(o.configs)
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	t := &table{seed: o.seed, compare: o.compare}
	if o.before != "" {
		// Before anything is built or measured: a bad name fails at once.
		if t.before, err = resolveBefore(ctx, root, o.before); err != nil {
			return err
		}
		for i := range srvs {
			if srvs[i].bin == beforeBin {
				srvs[i].label += "/rev=" + t.before.rev[:beforeRevLen]
			}
		}
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	r := &runner{stderr: stderr, pin: o.pinned, perf: perfWorks()}
	fmt.Fprintf(stderr, "netpollbench: output in %s; %s; %s\n", o.out, pinNote(r.pin), perfNote(r.perf))
	r.bins, srvs, t.skipped, err = build(ctx, root, filepath.Join(o.out, "bin"), srvs, o.herd, len(o.http) > 0, o.rtGoroot, t.before, stderr)
	if err != nil {
		return err
	}
	var quotaErr error
	if o.quota > 0 {
		quotaErr = quotaAvailable(o.quota)
	}
	t.plan = makePlan(o, srvs, quotaErr)
	fmt.Fprintf(stderr, "netpollbench: %d cells, %d rounds, about %v\n", len(t.plan.cells), t.plan.rounds(), t.plan.duration().Round(time.Second))

	// Calibration first: what the machine charges, before anything runs.
	if t.calStart, err = calibrate(pinNote(r.pin)); err != nil {
		return fmt.Errorf("calibration: %w", err)
	}
	fmt.Fprintf(stderr, "Machine: %s\nCalibration before: %s\n", t.calStart.machine(), t.calStart)
	if err := r.runPlan(ctx, t.plan, t); err != nil {
		if werr := writeData(o.out, t); werr != nil {
			return errors.Join(err, werr)
		}
		return fmt.Errorf("%w: what was measured is in %s", err, o.out)
	}
	// Calibration last: if the host changed speed mid-run, the render
	// says so.
	if t.calEnd, err = calibrate(pinNote(r.pin)); err != nil {
		return fmt.Errorf("calibration at the end: %w", err)
	}
	if err := render(ctx, root, o.out, t, stdout); err != nil {
		return err
	}
	if len(t.failures) > 0 {
		return fmt.Errorf("%d measurement(s) failed:\n%s", len(t.failures), strings.Join(t.failures, "\n"))
	}
	return nil
}

// quotaAvailable reports why no cgroup with a CPU quota can be made here,
// or nil when one can.
func quotaAvailable(frac float64) error {
	g, err := cpuquota.New(frac)
	if err != nil {
		return err
	}
	return g.Close()
}

// patchedGorootPath is where runtime_patch/build.sh installs the patched
// toolchain: $EDGEPOLL_GOROOT, or its default.
func patchedGorootPath() string {
	if p := os.Getenv("EDGEPOLL_GOROOT"); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "edgepoll", "go1.26.8-edgepoll")
}

// patchedGoroot returns the patched toolchain's GOROOT if it is built.
func patchedGoroot() string {
	p := patchedGorootPath()
	if p == "" {
		return ""
	}
	if st, err := os.Stat(filepath.Join(p, "bin", "go")); err != nil || st.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// writeHeader starts a file of benchmark lines with the configuration
// lines benchstat shows: the machine's calibration among them.
func writeHeader(w io.Writer, cal calibration) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/edgepoll/edgepoll/cmd/netpollbench\n", runtime.GOOS, runtime.GOARCH)
	cal.writeConfig(w, "calib-")
}

// progress is the progress line's digest of a measurement.
func progress(r result) string {
	m := r.metrics
	switch r.cell.kind {
	case kindIdle:
		s := fmt.Sprintf("%7.2f KiB/conn as-is", m["rss-bytes/conn"]/1024)
		if v, ok := m["heap-live-bytes/conn"]; ok {
			s += fmt.Sprintf(", heap live %.0f B/conn", v)
		}
		return s
	case kindHerd:
		return fmt.Sprintf("%8.1f ctxsw/event", m["ctxsw"]/float64(max(benchN(r.line), 1)))
	}
	s := fmt.Sprintf("%8.0f req/s  p50 %6.1fµs  p99 %7.1fµs", 1e9/m["ns/op"], m["p50-ns"]/1e3, m["p99-ns"]/1e3)
	if r.cell.blocked > 0 {
		s += fmt.Sprintf("  max %7.1fµs", m["max-ns"]/1e3)
	}
	if v, ok := m["server-cpu-ns/op"]; ok {
		s += fmt.Sprintf("  server %5.1fµs/req", v/1e3)
	}
	if v, ok := m["syscalls/op"]; ok {
		s += fmt.Sprintf("  %4.1f syscalls/req", v)
	}
	if v, ok := value(r, utilUnit); ok && r.cell.rate > 0 {
		s += fmt.Sprintf("  server %4.2f CPUs", v)
	}
	return s
}

func hasTaskset() bool {
	_, err := exec.LookPath("taskset")
	return err == nil
}

// pinNote says where the run places servers and load generators.
func pinNote(pin bool) string {
	if pin {
		return "pinned cells: server on CPU 0 (GOMAXPROCS=1), load generator on CPU 1 (taskset); unpinned: both free"
	}
	return "every cell unpinned (no taskset or fewer than 2 CPUs, or -pin off)"
}

func perfNote(perf bool) string {
	if perf {
		return "server syscalls counted with perf stat (raw_syscalls:sys_enter)"
	}
	return "no syscall counts (perf stat with tracepoints is not available)"
}
