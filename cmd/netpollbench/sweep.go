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
var sweepConfigs = []string{"net", "et", "inline", "auto", "auto-inline", "spin", "ondemand", "gnet", "c"}

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
	shape  cell // the load apart from the rate, placed as the run's first placement
	// reused is the plan's closed cell's rounds when the closed loop's
	// lines are that cell's, measured with the main matrix; 0 when the
	// sweep added that cell for itself.
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

// planSweep adds the sweep's open-loop cells to p: the sweep
// configurations among srvs at each rate, placed as the run's first
// placement (pinned when the run pins). Its closed loop is the plan's
// closed cell of the same shape, added for the sweep's configurations when
// the plan lacks it. It returns nil when no configuration of the run is a
// sweep configuration.
func planSweep(p *plan, o *options, srvs []server, skipped []string) *sweep {
	sw := &sweep{path: sweepFile, rates: o.rates, rounds: o.sweepRounds}
	for _, sk := range skipped {
		if name, _, _ := strings.Cut(sk, ":"); slices.Contains(sweepConfigs, name) {
			sw.skipped = append(sw.skipped, sk)
		}
	}
	sw.srvs = keep(srvs, func(s server) bool { return slices.Contains(sweepConfigs, s.name) })
	if len(sw.srvs) == 0 {
		p.notes = append(p.notes, fmt.Sprintf("Sweep skipped: none of %s among the configurations.", strings.Join(sweepConfigs, ", ")))
		return nil
	}
	shape := sweepShape
	shape.unpinned = !o.pinned
	sw.shape = shape
	for _, rate := range o.rates {
		if rate == 0 {
			if cp := p.find(shape); cp != nil {
				sw.reused = cp.rounds
			} else {
				p.cells = append(p.cells, &cellPlan{cell: shape, srvs: sw.srvs, rounds: o.sweepRounds,
					warmup: o.warmup, duration: o.duration, file: rawFile})
			}
			continue
		}
		c := shape
		c.rate = rate
		p.cells = append(p.cells, &cellPlan{cell: c, srvs: sw.srvs, rounds: o.sweepRounds,
			warmup: o.warmup, duration: o.duration, file: sweepFile})
	}
	return sw
}

// sweepLine labels a sweep measurement for benchstat: the closed loop's
// line gets rate=closed (loadgen names only an open loop's rate), and every
// line the server's CPU utilisation.
func sweepLine(line string, closed bool) string {
	if closed {
		name, rest, _ := strings.Cut(line, "\t")
		line = name + "/rate=closed\t" + rest
	}
	m := metrics(line)
	if cpu, ok := m["server-cpu-ns/op"]; ok && m["ns/op"] > 0 {
		line += fmt.Sprintf("\t%.4f %s", cpu/m["ns/op"], utilUnit)
	}
	return line
}

// reportSweep appends the closed loop's lines (the plan's closed cell of
// the sweep's shape, from t) to sweep.txt in dir, writes the sweep's
// benchstat tables (rows rate, columns configuration), prints their file
// name and draws its plots; it returns the plot files.
func reportSweep(ctx context.Context, root, dir string, sw *sweep, t *table, stdout io.Writer) ([]string, error) {
	path := filepath.Join(dir, sw.path)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "closed-loop: the rate=closed lines are the %s cell's (%s)\n", sw.shape, rawFile)
	for _, r := range t.results {
		if r.round > 0 && sw.shape.matches(r) && slices.ContainsFunc(sw.srvs, func(s server) bool { return s.name == r.labels["cfg"] }) {
			fmt.Fprintf(f, "round: %d\n%s\n", r.round, sweepLine(r.line, true))
		}
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	tables, err := benchstat(ctx, root, "-ignore", "round", "-row", "/rate", "-col", cfgColumns(sw.srvs),
		"-filter", ".unit:(p50-ns OR p99-ns OR server-cpu-ns/op OR "+utilUnit+")", path)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Open-loop sweep: %s, offered load in requests/s (rate), latency from each request's intended send time;\n", sw.shape)
	fmt.Fprintf(&b, "configurations in a random order within each of %d rounds", sw.rounds)
	if sw.reused > 0 {
		fmt.Fprintf(&b, "; rate=closed is the main matrix's %s over its %d rounds", sw.shape, sw.reused)
	}
	fmt.Fprintf(&b, ".\n%s is server CPU seconds per second (1 = one whole CPU). A rate a configuration cannot keep up\n", utilUnit)
	fmt.Fprintf(&b, "with queues its requests: its latency is then the queue's and grows with -duration (the plots say saturated).\n")
	fmt.Fprintf(&b, "Columns compare with the first (%s). Raw: %s\n", sw.srvs[0].name, path)
	for _, s := range sw.skipped {
		fmt.Fprintf(&b, "Skipped %s\n", s)
	}
	b.WriteString("\n" + tables)
	tablesPath := filepath.Join(dir, "sweep-tables.txt")
	if err := os.WriteFile(tablesPath, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "Sweep tables (open loop, %s):\n  %s\n", sw.shape, tablesPath)

	results, err := readResults(path)
	if err != nil {
		return nil, err
	}
	return drawSweep(dir, sw, results)
}
