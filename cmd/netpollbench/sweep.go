package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The open-loop sweep asks what a configuration costs and how fast it
// answers when the load is light, not only when it is flat out: one
// connection of 64-byte echoes at a few offered rates (loadgen -rate,
// latency counted from each request's intended send time) and the closed
// loop. A spinning poller answers fast at any rate but burns a CPU for it;
// the sweep shows the server CPU per request against latency (the
// frontier), and the CPU it keeps busy against the offered load.

// sweepConfigs are the configurations the sweep measures, those of them
// the run has.
var sweepConfigs = []string{"net", "et", "auto", "spin", "gnet", "c"}

// sweepShape is the sweep's load apart from the rate.
var sweepShape = cell{conns: 1, size: 64}

// utilUnit is the server's CPU utilisation: server CPU seconds per wall
// second of the window (1 is one whole CPU), server-cpu-ns/op over ns/op.
const utilUnit = "server-cpu-util"

// sweep is what the sweep measured, for the report.
type sweep struct {
	path   string    // the benchmark lines, sweep.txt
	srvs   []server  // the configurations, in column order
	rates  []float64 // ascending, the closed loop (0) last
	rounds int
	// reused is the main matrix's rounds when the closed loop's lines are
	// its conns=1/size=64 measurements, the same load; 0 when the sweep
	// measured the closed loop itself.
	reused  int
	skipped []string // configurations the sweep would have had but the build dropped
}

// parseRates parses -rates: requests/s, or 0 or "closed" for the closed
// loop. It returns them ascending with the closed loop last.
func parseRates(s string) ([]float64, error) {
	var rates []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		v, err := strconv.ParseFloat(f, 64)
		if f == "closed" {
			v, err = 0, nil
		}
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("bad -rates %q: %q is not a rate; want comma-separated requests/s, or 0 or closed for the closed loop", s, f)
		}
		if slices.Contains(rates, v) {
			return nil, fmt.Errorf("bad -rates %q: %s twice", s, rateLabel(v))
		}
		rates = append(rates, v)
	}
	slices.SortFunc(rates, func(a, b float64) int {
		switch {
		case a == b:
			return 0
		case a == 0 || (b != 0 && a > b):
			return 1
		}
		return -1
	})
	return rates, nil
}

// rateLabel is a rate's value in the rate= label, as loadgen writes it;
// "closed" for the closed loop.
func rateLabel(rate float64) string {
	if rate == 0 {
		return "closed"
	}
	return strconv.FormatFloat(rate, 'f', -1, 64)
}

// runSweep measures the sweep into sweep.txt, configurations interleaved
// round by round as in the main matrix. The closed loop's lines are the
// main matrix's conns=1/size=64 ones (main) when it has that cell: the
// same load, measured the same way, so measuring it again would only
// lengthen the run. It returns nil when no configuration of the run is a
// sweep configuration.
func runSweep(ctx context.Context, r *runner, srvs []server, skipped []string, main []measured) (*sweep, []string, error) {
	o := r.opts
	sw := &sweep{path: filepath.Join(o.out, "sweep.txt"), rates: o.rates, rounds: o.sweepRounds}
	for _, s := range srvs {
		if slices.Contains(sweepConfigs, s.name) {
			sw.srvs = append(sw.srvs, s)
		}
	}
	for _, sk := range skipped {
		if name, _, _ := strings.Cut(sk, ":"); slices.Contains(sweepConfigs, name) {
			sw.skipped = append(sw.skipped, sk)
		}
	}
	if len(sw.srvs) == 0 {
		fmt.Fprintf(r.stderr, "netpollbench: sweep skipped: none of %s among the configurations\n", strings.Join(sweepConfigs, ", "))
		return nil, nil, nil
	}
	var cells []cell
	for _, rate := range o.rates {
		if rate == 0 && slices.Contains(o.cells, sweepShape) {
			sw.reused = o.rounds
			continue
		}
		c := sweepShape
		c.rate = rate
		cells = append(cells, c)
	}
	f, err := os.Create(sw.path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	writeHeader(f, r.cal)
	note := ""
	if sw.reused > 0 {
		note = " (closed: the main matrix's)"
		fmt.Fprintf(f, "closed-loop: the rate=closed lines are the main matrix's %s measurements (raw.txt)\n", sweepShape)
	}
	fmt.Fprintf(r.stderr, "netpollbench: sweep: %s at rates %s%s, %d configurations, %d rounds\n",
		sweepShape, sw.rateList(), note, len(sw.srvs), sw.rounds)
	_, failures, err := r.series(ctx, "sweep ", interleave(sw.rounds, false, cells, sw.srvs), sweepLine, f, nil)
	if err != nil {
		return nil, failures, err
	}
	if sw.reused > 0 {
		for _, m := range main {
			if m.c == sweepShape && slices.ContainsFunc(sw.srvs, func(s server) bool { return s.name == m.s.name }) {
				fmt.Fprintln(f, sweepLine(m.job, m.line))
			}
		}
	}
	return sw, failures, f.Close()
}

// sweepLine labels a sweep measurement for benchstat: the closed loop gets
// rate=closed (loadgen names only an open loop's rate), and every line the
// server's CPU utilisation.
func sweepLine(j job, line string) string {
	if j.c.rate == 0 {
		name, rest, _ := strings.Cut(line, "\t")
		line = name + "/rate=closed\t" + rest
	}
	m := metrics(line)
	if cpu, ok := m["server-cpu-ns/op"]; ok && m["ns/op"] > 0 {
		line += fmt.Sprintf("\t%.4f %s", cpu/m["ns/op"], utilUnit)
	}
	return line
}

func (sw *sweep) rateList() string {
	var l []string
	for _, r := range sw.rates {
		l = append(l, rateLabel(r))
	}
	return strings.Join(l, ",")
}

// reportSweep writes the sweep's benchstat tables, prints their file name, (rows rate,
// columns configuration) and draws its plots; it returns the plot files.
func reportSweep(ctx context.Context, root string, sw *sweep, stdout io.Writer) ([]string, error) {
	path, err := filepath.Abs(sw.path)
	if err != nil {
		return nil, err
	}
	tables, err := benchstat(ctx, root, "-row", "/rate", "-col", "/cfg",
		"-filter", ".unit:(p50-ns OR p99-ns OR server-cpu-ns/op OR "+utilUnit+")", path)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Open-loop sweep: %s, offered load in requests/s (rate), latency from each request's intended send time;\n", sweepShape)
	fmt.Fprintf(&b, "configurations interleaved over %d rounds", sw.rounds)
	if sw.reused > 0 {
		fmt.Fprintf(&b, "; rate=closed is the main matrix's %s over its %d rounds", sweepShape, sw.reused)
	}
	fmt.Fprintf(&b, ".\n%s is server CPU seconds per second (1 = one whole CPU). A rate a configuration cannot keep up\n", utilUnit)
	fmt.Fprintf(&b, "with queues its requests: its latency is then the queue's and grows with -duration (the plots say saturated).\n")
	fmt.Fprintf(&b, "Columns compare with the first (%s). Raw: %s\n", sw.srvs[0].name, path)
	for _, s := range sw.skipped {
		fmt.Fprintf(&b, "Skipped %s\n", s)
	}
	b.WriteString("\n" + tables)
	tablesPath := filepath.Join(filepath.Dir(path), "sweep-tables.txt")
	if err := os.WriteFile(tablesPath, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "Sweep tables (open loop, %s):\n  %s\n", sweepShape, tablesPath)

	results, err := readResults(path)
	if err != nil {
		return nil, err
	}
	return drawSweep(filepath.Dir(path), sw, results)
}
