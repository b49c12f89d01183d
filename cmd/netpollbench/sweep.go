package main

import (
	"context"
	"fmt"
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
// the run has: the profile's rows (profileConfigs) among them.
var sweepConfigs = []string{"net", "et", "inline", "auto", "auto-cold", "auto-inline", "spin", "ondemand", "ondemand-poll", "ondemand-role", "ondemand-loop", "gnet", "c", "rt-none", profileCfg}

// swept reports whether the sweep measures the configuration name: one
// of sweepConfigs, or the before configuration of one (-before), so that
// the open loops pair the code before with the code as it is too.
func swept(name string) bool {
	if base, ok := beforeBase(name); ok {
		name = base
	}
	return slices.Contains(sweepConfigs, name)
}

// sweepShape is the sweep's load apart from the rate.
var sweepShape = cell{conns: 1, size: 64}

// utilUnit is the server's CPU utilisation: server CPU seconds per wall
// second of the window (1 is one whole CPU), server-cpu-ns/op over ns/op.
const utilUnit = "server-cpu-util"

// sweep is the sweep as the render stage draws it, derived from the
// plan's sweep cells (sweepOf).
type sweep struct {
	cells  []*cellPlan // in rate order, the closed loop last
	srvs   []server    // the sweep's configurations, in column order
	rates  []float64   // ascending, the closed loop (0) last
	rounds int         // the open cells'
	shape  cell        // the load apart from the rate
}

// sweepOf is the sweep of p's sweep cells; nil when p has none.
func sweepOf(p *plan) *sweep {
	sw := &sweep{}
	for _, cp := range p.cells {
		if !cp.sweep {
			continue
		}
		sw.cells = append(sw.cells, cp)
		for _, s := range cp.srvs {
			if swept(s.name) && !slices.ContainsFunc(sw.srvs, func(x server) bool { return x.name == s.name }) {
				sw.srvs = append(sw.srvs, s)
			}
		}
		if cp.rate > 0 || sw.rounds == 0 {
			sw.rounds = cp.rounds
		}
		sw.shape = cp.cell
		sw.shape.rate = 0
	}
	if len(sw.cells) == 0 || len(sw.srvs) == 0 {
		return nil
	}
	slices.SortStableFunc(sw.cells, func(a, b *cellPlan) int { return compareRates(a.rate, b.rate) })
	for _, cp := range sw.cells {
		sw.rates = append(sw.rates, cp.rate)
	}
	return sw
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
	slices.SortFunc(rates, compareRates)
	return rates, nil
}

// compareRates orders rates ascending with the closed loop (0) last.
func compareRates(a, b float64) int {
	switch {
	case a == b:
		return 0
	case a == 0 || (b != 0 && a > b):
		return 1
	}
	return -1
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
// the plan lacks it. Every cell of the sweep is marked so (cellPlan.sweep).
func planSweep(p *plan, o *options, srvs []server) {
	ss := keep(srvs, func(s server) bool { return swept(s.name) })
	if len(ss) == 0 {
		p.notes = append(p.notes, fmt.Sprintf("Sweep skipped: none of %s among the configurations.", strings.Join(sweepConfigs, ", ")))
		return
	}
	shape := sweepShape
	shape.unpinned = !o.pinned
	for _, rate := range o.rates {
		if rate == 0 {
			if cp := p.find(shape); cp != nil {
				cp.sweep = true
			} else {
				p.cells = append(p.cells, &cellPlan{cell: shape, srvs: ss, rounds: o.sweepRounds,
					warmup: o.warmup, duration: o.duration, file: rawFile, sweep: true})
			}
			continue
		}
		c := shape
		c.rate = rate
		p.cells = append(p.cells, &cellPlan{cell: c, srvs: ss, rounds: o.sweepRounds,
			warmup: o.warmup, duration: o.duration, file: sweepFile, sweep: true})
	}
}

// sweepLines are the sweep's lines for benchstat, in the order measured,
// each round's after a "round: N" line: its cells' results of its
// configurations, the closed loop's labelled rate=closed (loadgen names
// only an open loop's rate), every line with the server's CPU utilisation
// (utilUnit) appended.
func sweepLines(t *table, sw *sweep) []result {
	var rs []result
	for _, r := range t.results {
		if r.round < 1 || !slices.Contains(sw.cells, r.cell) || !slices.ContainsFunc(sw.srvs, func(s server) bool { return s.name == r.labels["cfg"] }) {
			continue
		}
		line := r.line
		if r.cell.rate == 0 {
			name, rest, _ := strings.Cut(line, "\t")
			line = name + "/rate=closed\t" + rest
		}
		if u, ok := value(r, utilUnit); ok {
			line += fmt.Sprintf("\t%.4f %s", u, utilUnit)
		}
		rs = append(rs, newResult(r.cell, r.round, line))
	}
	return rs
}

// renderSweep writes the sweep's benchstat tables (rows rate, columns
// configuration) from sweep.txt, which the render stage wrote before, and
// draws its plots; it returns the tables' file and the plots'.
func renderSweep(ctx context.Context, root, dir string, t *table, sw *sweep) (string, []string, error) {
	tables, err := benchstat(ctx, root, "-ignore", "round", "-row", "/rate", "-col", cfgColumns(sw.srvs),
		"-filter", ".unit:(p50-ns OR p99-ns OR server-cpu-ns/op OR "+utilUnit+")", filepath.Join(dir, sweepFile))
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Open-loop sweep: %s, offered load in requests/s (rate), latency from each request's intended send time;\n", sw.shape)
	fmt.Fprintf(&b, "configurations in a random order within each of %d rounds", sw.rounds)
	if closed := sw.cells[len(sw.cells)-1]; closed.rate == 0 {
		fmt.Fprintf(&b, "; rate=closed is the %s cell's, over its %d rounds", closed.cell, closed.rounds)
	}
	fmt.Fprintf(&b, ".\n%s is server CPU seconds per second (1 = one whole CPU). A rate a configuration cannot keep up\n", utilUnit)
	fmt.Fprintf(&b, "with queues its requests: its latency is then the queue's and grows with -duration (the plots say saturated).\n")
	fmt.Fprintf(&b, "Columns compare with the first (%s). Raw: %s\n", sw.srvs[0].name, sweepFile)
	for _, s := range t.skipped {
		if name, _, _ := strings.Cut(s, ":"); swept(name) {
			fmt.Fprintf(&b, "Skipped %s\n", s)
		}
	}
	b.WriteString("\n" + tables)
	tablesPath := filepath.Join(dir, "sweep-tables.txt")
	if err := os.WriteFile(tablesPath, []byte(b.String()), 0o644); err != nil {
		return "", nil, err
	}
	plots, err := drawSweep(dir, sw, sweepLines(t, sw))
	return tablesPath, plots, err
}
