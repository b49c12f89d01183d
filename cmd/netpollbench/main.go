// Command netpollbench runs the comparison: each configuration (package net,
// netpoll's modes, its spinning poller (spin=forever) and adaptive spin
// policy (spin=auto), the peer libraries gnet, nbio and cloudwego/netpoll,
// and a C epoll reference) as a separate echo server process under
// cmd/loadgen, interleaved round by round so that drift hits all alike,
// plus the thundering-herd experiment. It writes the raw benchmark lines,
// benchstat tables and SVG plots into an output directory and prints the
// tables.
//
// The open-loop sweep (-sweep, on by default) measures net, et, auto, spin,
// gnet and c on one connection of 64-byte echoes at each of -rates
// (requests/s, latency from the intended send time) and in the closed
// loop, whose lines it takes from the main matrix's 1-conn, 64 B cell when
// there is one. It reports p50, p99, server CPU per request and server CPU
// utilisation (sweep.txt, sweep-tables.txt, rows rate, columns
// configuration) and plots the frontier, CPU per request against p50
// latency (sweep-frontier.svg), and the utilisation against the offered
// load (sweep-utilisation.svg).
//
//	go run ./cmd/netpollbench              # about three minutes, the sweep about 80 s of them
//	go run ./cmd/netpollbench -full        # the whole matrix
//	go run ./cmd/netpollbench -compare out/OLD
//	go run ./cmd/netpollbench -rates 1000,5000,closed -sweep-rounds 6
//
// With taskset and two or more CPUs, servers run on CPU 0 and the load
// generator on CPU 1 (a server pinned alone runs with GOMAXPROCS=1).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
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
	out         string
	configs     []string
	cells       []cell
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	herd        bool
	sweep       bool      // run the open-loop sweep
	rates       []float64 // the sweep's rates, ascending, the closed loop (0) last
	sweepRounds int
	full        bool
	compare     string
	pin         string
	http        []string // configurations measured with net/http too
	httpCells   []cell
	idle        int    // idle connections for the memory experiment; 0: off
	rtGoroot    string // the patched toolchain, when the runtime's rows run
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	return bench(ctx, o, stdout, stderr)
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("netpollbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.StringVar(&o.out, "out", "", "output directory (default out/<time>)")
	configs := fs.String("configs", "", "comma-separated configurations (default: "+strings.Join(defaultConfigs, ",")+"; -full: all)")
	conns := fs.String("conns", "", "comma-separated connection counts (default 1,50; -full: 1,50,1000)")
	sizes := fs.String("sizes", "", "comma-separated message sizes, at least 16 (default 64; -full: 64,4096)")
	fs.IntVar(&o.rounds, "rounds", 0, "rounds, each measuring every configuration and cell once (default 4; -full: 6)")
	fs.DurationVar(&o.duration, "duration", 0, "measured time per measurement (default 1s; -full: 3s)")
	fs.DurationVar(&o.warmup, "warmup", 0, "warm-up per measurement, not measured (default 300ms; -full: 1s)")
	fs.BoolVar(&o.herd, "herd", true, "also run the thundering-herd experiment")
	fs.BoolVar(&o.sweep, "sweep", true, "also run the open-loop sweep: 1 conn, 64 B, at each of -rates, for those of "+strings.Join(sweepConfigs, ", ")+" among -configs")
	rates := fs.String("rates", "2000,10000,closed", "sweep: comma-separated offered loads in requests/s; 0 or closed for the closed loop")
	fs.IntVar(&o.sweepRounds, "sweep-rounds", 0, "sweep rounds, each measuring every configuration at every rate once (default 3; -full: 6)")
	fs.BoolVar(&o.full, "full", false, "run the whole matrix")
	fs.StringVar(&o.compare, "compare", "", "an earlier output directory to compare with")
	fs.StringVar(&o.pin, "pin", "auto", "pin server to CPU 0 and load generator to CPU 1: auto, on or off")
	httpFlag := fs.String("http", "", "comma-separated configurations also measured serving net/http plaintext over keep-alive at each of -conns, among "+strings.Join(httpConfigs, ", ")+", or none (default "+strings.Join(defaultHTTPConfigs, ",")+"; -full: all of them among -configs)")
	rt := fs.String("runtime", "auto", "rows for the patched runtime (runtime_patch/build.sh) under each GODEBUG setting, package net's servers: auto (when the toolchain is built), on or off")
	fs.IntVar(&o.idle, "idle", 10000, "idle connections held open to measure each server's resident memory per connection; 0 skips it")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	pick := func(flagVal string, def, full string) string {
		switch {
		case flagVal != "":
			return flagVal
		case o.full:
			return full
		}
		return def
	}
	o.configs = strings.Split(pick(*configs, strings.Join(defaultConfigs, ","), strings.Join(fullConfigs, ",")), ",")
	goroot := patchedGoroot()
	switch *rt {
	case "off":
	case "on", "auto":
		if goroot == "" && *rt == "on" {
			return nil, fmt.Errorf("-runtime on: no patched toolchain at %s: build it with runtime_patch/build.sh", patchedGorootPath())
		}
		if goroot != "" && *configs == "" {
			for _, s := range runtimeServers {
				o.configs = append(o.configs, s.name)
			}
		}
	default:
		return nil, fmt.Errorf("bad -runtime %q: want auto, on or off", *rt)
	}
	if slices.ContainsFunc(o.configs, func(n string) bool { return strings.HasPrefix(n, "rt-") }) {
		if goroot == "" {
			return nil, fmt.Errorf("-configs %s: the rt- configurations need the patched toolchain at %s (runtime_patch/build.sh)", strings.Join(o.configs, ","), patchedGorootPath())
		}
		o.rtGoroot = goroot
	}
	cs, err := ints("conns", pick(*conns, "1,50", "1,50,1000"), 1)
	if err != nil {
		return nil, err
	}
	ss, err := ints("sizes", pick(*sizes, "64", "64,4096"), 16)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		for _, s := range ss {
			o.cells = append(o.cells, cell{conns: c, size: s})
		}
	}
	fullHTTP := slices.DeleteFunc(slices.Clone(httpConfigs), func(n string) bool { return !slices.Contains(o.configs, n) })
	defHTTP := slices.Clone(defaultHTTPConfigs)
	if o.rtGoroot != "" {
		for _, s := range runtimeServers {
			if slices.Contains(o.configs, s.name) {
				defHTTP = append(defHTTP, s.name)
			}
		}
	}
	switch h := pick(*httpFlag, strings.Join(defHTTP, ","), strings.Join(fullHTTP, ",")); h {
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
		o.http = slices.DeleteFunc(o.http, func(n string) bool { return !slices.Contains(o.configs, n) })
		if len(o.http) == 0 {
			break
		}
		for _, c := range cs {
			o.httpCells = append(o.httpCells, cell{proto: "http", conns: c})
		}
	}
	if o.idle < 0 {
		return nil, fmt.Errorf("bad -idle %d: want a number of connections, or 0", o.idle)
	}
	if o.rates, err = parseRates(*rates); err != nil {
		return nil, err
	}
	// The default run: every headline cell gets minSamples rounds after
	// a warm-up round, in short measurements, within about 3 minutes.
	setDefault(&o.rounds, minSamples, 10, o.full)
	setDefault(&o.sweepRounds, 3, 6, o.full)
	setDefault(&o.duration, 400*time.Millisecond, 2*time.Second, o.full)
	setDefault(&o.warmup, 150*time.Millisecond, 500*time.Millisecond, o.full)
	if o.rounds < 1 || o.sweepRounds < 1 || o.duration <= 0 || o.warmup < 0 {
		return nil, fmt.Errorf("bad -rounds %d, -sweep-rounds %d, -duration %v or -warmup %v", o.rounds, o.sweepRounds, o.duration, o.warmup)
	}
	if o.pin != "auto" && o.pin != "on" && o.pin != "off" {
		return nil, fmt.Errorf("bad -pin %q: want auto, on or off", o.pin)
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

func setDefault[T comparable](v *T, def, full T, isFull bool) {
	var zero T
	if *v != zero {
		return
	}
	*v = def
	if isFull {
		*v = full
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

func bench(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	srvs, err := pickServers(o.configs)
	if err != nil {
		return err
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	r := &runner{opts: o, stderr: stderr}
	r.pin = o.pin == "on" || (o.pin == "auto" && runtime.NumCPU() >= 2 && hasTaskset())
	if o.pin == "on" && !hasTaskset() {
		return errors.New("-pin on needs taskset (util-linux)")
	}
	r.perf = perfWorks()
	fmt.Fprintf(stderr, "netpollbench: output in %s; %s; %s\n", o.out, pinNote(r.pin), perfNote(r.perf))

	// Calibration first: what the machine charges, before anything runs.
	calStart, err := calibrate(pinNote(r.pin))
	if err != nil {
		return fmt.Errorf("calibration: %w", err)
	}
	r.cal = calStart
	fmt.Fprintf(stdout, "Machine: %s\nPinning: %s\nCalibration before: %s\n", calStart.machine(), pinNote(r.pin), calStart)

	var skipped []string
	r.bins, srvs, skipped, err = build(ctx, root, filepath.Join(o.out, "bin"), srvs, o.herd, len(o.http) > 0, o.rtGoroot, stderr)
	if err != nil {
		return err
	}
	raw, err := os.Create(filepath.Join(o.out, "raw.txt"))
	if err != nil {
		return err
	}
	defer raw.Close()
	warm, err := os.Create(filepath.Join(o.out, "warmup.txt"))
	if err != nil {
		return err
	}
	defer warm.Close()
	writeHeader(raw, calStart)
	writeHeader(warm, calStart)
	lines, failures, err := r.series(ctx, "", interleave(o.rounds, true, o.cells, srvs), nil, raw, warm)
	if err != nil {
		return err
	}
	httpSrvs := slices.DeleteFunc(slices.Clone(srvs), func(s server) bool { return !slices.Contains(o.http, s.name) })
	if len(o.httpCells) > 0 && len(httpSrvs) > 0 {
		// After the echo matrix, so the machine is warm: no warm-up round.
		_, fails, err := r.series(ctx, "http ", interleave(o.rounds, false, o.httpCells, httpSrvs), nil, raw, nil)
		if err != nil {
			return err
		}
		failures = append(failures, fails...)
	}

	var sw *sweep
	if o.sweep {
		var fails []string
		sw, fails, err = runSweep(ctx, r, srvs, skipped, lines)
		if err != nil {
			return err
		}
		failures = append(failures, fails...)
	}
	var herdRows []herdRow
	if o.herd {
		if herdRows, err = runHerd(ctx, r, o, stderr); err != nil {
			failures = append(failures, "herd: "+err.Error())
		}
	}

	var idleRows []idleRow
	if o.idle > 0 {
		// Not the runtime's rows: package net's server, whose memory per
		// connection the GODEBUG settings do not change (net's row has it).
		idleSrvs := slices.DeleteFunc(slices.Clone(srvs), func(s server) bool { return strings.HasPrefix(s.name, "rt-") })
		rows, fails, err := runIdle(ctx, r, idleSrvs, o.idle)
		if err != nil {
			return err
		}
		idleRows = rows
		failures = append(failures, fails...)
		var b strings.Builder
		writeHeader(&b, calStart)
		for _, row := range rows {
			if l := idleLine(row); l != "" {
				b.WriteString(l + "\n")
			}
		}
		if err := os.WriteFile(filepath.Join(o.out, "idle.txt"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}

	// Calibration last: if the host changed speed mid-run, say so.
	calEnd, err := calibrate(pinNote(r.pin))
	if err != nil {
		return fmt.Errorf("calibration at the end: %w", err)
	}
	calEnd.writeConfig(raw, "calib-end-")
	if err := raw.Close(); err != nil {
		return err
	}
	rep := reportInput{srvs: srvs, httpSrvs: httpSrvs, skipped: skipped, herd: herdRows, sweep: sw, idle: idleRows,
		calStart: calStart, calEnd: calEnd, failures: failures}
	if m := moved(calStart.figures(), calEnd.figures(), calibMovedFraction); len(m) > 0 {
		rep.warnings = append(rep.warnings, fmt.Sprintf("THE HOST CHANGED SPEED DURING THE RUN: calibration moved by more than %.0f%%: %s. "+
			"Compare only ratios within a round, and rerun.", calibMovedFraction*100, strings.Join(m, ", ")))
	}
	if err := report(ctx, root, o, rep, stdout, stderr); err != nil {
		return err
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d measurement(s) failed:\n%s", len(failures), strings.Join(failures, "\n"))
	}
	return nil
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

// summary is the progress line's digest of a benchmark line.
func summary(line string) string {
	m := metrics(line)
	s := fmt.Sprintf("%8.0f req/s  p50 %6.1fµs  p99 %7.1fµs", 1e9/m["ns/op"], m["p50-ns"]/1e3, m["p99-ns"]/1e3)
	if v, ok := m["server-cpu-ns/op"]; ok {
		s += fmt.Sprintf("  server %5.1fµs/req", v/1e3)
	}
	if v, ok := m["syscalls/op"]; ok {
		s += fmt.Sprintf("  %4.1f syscalls/req", v)
	}
	if v, ok := m[utilUnit]; ok {
		s += fmt.Sprintf("  server %4.2f CPUs", v)
	}
	return s
}

func hasTaskset() bool {
	_, err := exec.LookPath("taskset")
	return err == nil
}

func pinNote(pin bool) string {
	if pin {
		return "server pinned to CPU 0 (taskset -c 0, GOMAXPROCS=1), load generator to CPU 1"
	}
	return "not pinned (no taskset or fewer than 2 CPUs, or -pin off)"
}

func perfNote(perf bool) string {
	if perf {
		return "server syscalls counted with perf stat (raw_syscalls:sys_enter)"
	}
	return "no syscall counts (perf stat with tracepoints is not available)"
}
