package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plots show what the tables show, the medians over rounds, and how
// far the rounds let one trust them: an interval of each median (spread).
// Every figure keeps its legend and its caption off the data, fits its
// title, and says on each value axis which way is better; a configuration
// has the same colour, marker and dashes in every figure.

// spectrum is the latency percentile spectrum: loadgen's percentile units
// and the percentiles they are. A run recorded before loadgen reported
// p99.99 lacks that point.
var spectrum = []struct {
	unit  string
	pct   float64
	label string
}{
	{"p50-ns", 50, "50"}, {"p90-ns", 90, "90"}, {"p99-ns", 99, "99"}, {"p99.9-ns", 99.9, "99.9"}, {"p99.99-ns", 99.99, "99.99"},
}

// drawPlots draws a cell's latency percentile spectrum, throughput,
// server CPU and syscalls per request from its results over rounds, rs.
// It returns the files written.
func drawPlots(dir string, cp *cellPlan, rs []result) ([]string, error) {
	c, srvs := cp.cell, cp.srvs
	samples := func(s server, unit string) []float64 { return samplesOf(rs, unit, ofConfig(cfgName(s))) }
	load := c.title()
	figs := []*figure{
		spectrumFigure("latency-"+c.fileName()+".svg", "Latency percentile spectrum, "+load, srvs, samples),
		dotFigure("throughput-"+c.fileName()+".svg", "Throughput, "+load, "requests/s (higher is better)", srvs,
			func(s server) []float64 { return perSecond(samples(s, "ns/op")) }, kilo),
		dotFigure("cpu-"+c.fileName()+".svg", "Server CPU per request, "+load, "server CPU per request, µs (lower is better)", srvs,
			func(s server) []float64 {
				return mapped(samples(s, "server-cpu-ns/op"), func(v float64) float64 { return v / 1e3 })
			}, sig3),
		dotFigure("syscalls-"+c.fileName()+".svg", "Server syscalls per request, "+load, "server syscalls per request (lower is better)", srvs,
			func(s server) []float64 { return samples(s, "syscalls/op") }, sig3),
	}
	return saveFigures(dir, figs)
}

// drawScaling draws echo's throughput against connections for each size
// and placement that has two connection counts or more.
func drawScaling(dir string, t *table) ([]string, error) {
	var figs []*figure
	for _, unpinned := range []bool{false, true} {
		var sizes, conns []int
		var srvs []server
		for _, cp := range t.plan.cells {
			if cp.kind != kindLoad || cp.http() || cp.rate > 0 || cp.quota > 0 || cp.blocked > 0 || cp.unpinned != unpinned {
				continue
			}
			if !slices.Contains(sizes, cp.size) {
				sizes = append(sizes, cp.size)
			}
			if !slices.Contains(conns, cp.conns) {
				conns = append(conns, cp.conns)
			}
			for _, s := range cp.srvs {
				if !slices.ContainsFunc(srvs, func(x server) bool { return x.name == s.name }) {
					srvs = append(srvs, s)
				}
			}
		}
		if len(conns) < 2 { // a line against connections needs two counts
			continue
		}
		slices.Sort(conns)
		for _, size := range sizes {
			figs = append(figs, scalingFigure(cell{size: size, unpinned: unpinned}, conns, srvs, t))
		}
	}
	return saveFigures(dir, figs)
}

// saveFigures writes the figures that are not nil into dir.
func saveFigures(dir string, figs []*figure) ([]string, error) {
	var files []string
	for _, f := range figs {
		if f == nil {
			continue
		}
		path := filepath.Join(dir, f.file)
		if err := f.save(path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// spectrumFigure draws latency against percentile, a line per
// configuration through the medians of its percentile units, on a log
// scale of 1/(1−p), where each step right is ten times rarer. The latency
// axis is logarithmic when the values span a factor of ten or more. It
// returns nil when no configuration has a latency.
func spectrumFigure(file, title string, srvs []server, samples func(server, string) []float64) *figure {
	f := newFigure(file, title, 8*vg.Inch, 4.5*vg.Inch)
	type series struct {
		name string
		pts  plotter.XYs
	}
	var all []series
	var ns []int
	lo, hi := math.Inf(1), math.Inf(-1)
	missing := map[string]int{} // configurations without the percentile
	for _, s := range srvs {
		var pts plotter.XYs
		for _, u := range spectrum {
			vs := positive(samples(s, u.unit))
			if len(vs) == 0 {
				missing[u.label]++
				continue
			}
			med := spreadOf(vs).med / 1e3
			pts = append(pts, plotter.XY{X: rarity(u.pct), Y: med})
			lo, hi = min(lo, med), max(hi, med)
			ns = append(ns, len(vs))
		}
		if len(pts) > 0 {
			all = append(all, series{s.name, pts})
		}
	}
	if len(all) == 0 {
		return nil
	}
	logY := lo > 0 && hi/lo >= 10
	for _, sr := range all {
		if logY {
			for i := range sr.pts {
				sr.pts[i].Y = math.Log10(sr.pts[i].Y)
			}
		}
		f.add(sr.name, part{pts: sr.pts, join: true})
		f.addLegend(sr.name)
	}
	var ticks []plot.Tick
	for _, u := range spectrum {
		ticks = append(ticks, plot.Tick{Value: rarity(u.pct), Label: u.label})
	}
	f.p.X.Tick.Marker = plot.ConstantTicks(ticks)
	f.p.X.Min, f.p.X.Max = rarity(spectrum[0].pct)-0.1, rarity(spectrum[len(spectrum)-1].pct)+0.1
	f.p.X.Label.Text = "percentile (log scale of 1/(1−p))"
	f.p.Y.Label.Text = "latency, µs (lower is better)"
	if logY {
		f.logY = sig3
		f.p.Y.Label.Text = "latency, µs, log scale (lower is better)"
	} else {
		f.p.Y.Min = 0
	}
	f.p.Add(plotter.NewGrid())
	f.note = fmt.Sprintf("Each point is the median, over %s rounds, of that percentile of the requests' latency.", nRange(ns))
	for _, u := range spectrum {
		switch n := missing[u.label]; {
		case n == len(srvs):
			f.note += fmt.Sprintf(" No p%s: not in these results.", u.label)
		case n > 0:
			f.note += fmt.Sprintf(" No p%s for %d configuration(s).", u.label, n)
		}
	}
	return f
}

// rarity is the spectrum's x of percentile pct: log10(1/(1−p)).
func rarity(pct float64) float64 { return -math.Log10(1 - pct/100) }

// dotFigure draws one value per configuration, a row each: the median of
// its samples, the interval of the median, and the median's value,
// formatted, beside them; "missing" for a configuration without samples.
// It returns nil when no configuration has samples.
func dotFigure(file, title, axis string, srvs []server, samples func(server) []float64, format func(float64) string) *figure {
	f := newFigure(file, title, 8*vg.Inch, 1.3*vg.Inch+vg.Length(len(srvs))*0.3*vg.Inch)
	var names []string
	var ns []int
	var missing []pointLabel // at the left end of the axis, once it is known
	bottom, top := math.Inf(1), math.Inf(-1)
	for i, s := range srvs {
		y := float64(len(srvs) - 1 - i) // the first configuration on top
		names = append(names, s.name)
		vs := samples(s)
		if len(vs) == 0 {
			missing = append(missing, pointLabel{s.name, plotter.XY{Y: y}, "missing"})
			continue
		}
		sp := spreadOf(vs)
		f.add(s.name, part{
			pts:    plotter.XYs{{X: sp.med, Y: y}},
			xerr:   plotter.XErrors{sp.bar()},
			labels: []string{format(sp.med)},
			labelX: []float64{sp.hi},
			glyph:  draw.CircleGlyph{}, // the row names the configuration
		})
		ns = append(ns, sp.n)
		bottom, top = min(bottom, sp.lo), max(top, sp.hi)
	}
	if len(ns) == 0 {
		return nil
	}
	// The axis spans the intervals, not from zero: a dot marks a value
	// by its place, not by a bar's length, and the values are printed.
	span := top - bottom
	if span <= 0 {
		span = max(math.Abs(top)/10, 1e-9)
	}
	f.p.X.Min, f.p.X.Max = bottom-0.05*span, top+0.2*span // room for the values right of the bars
	if bottom >= 0 {
		f.p.X.Min = max(f.p.X.Min, 0)
	}
	for _, l := range missing {
		l.at.X = f.p.X.Min
		f.labels = append(f.labels, l)
	}
	slices.Reverse(names)
	f.p.NominalY(names...)
	f.p.Y.Min, f.p.Y.Max = -0.6, float64(len(srvs))-0.4
	f.p.X.Label.Text = axis
	f.p.X.Tick.Marker = labelTicks{format}
	f.p.Add(plotter.NewGrid())
	f.note = "Points: medians over rounds. " + intervalNote(ns)
	if f.p.X.Min > 0 {
		f.note += " The axis does not start from zero."
	}
	return f
}

// scalingFigure draws echo's throughput against connections (ascending)
// for one size, a line per configuration through its medians, with their
// intervals. It returns nil when no configuration has a result of that
// size.
func scalingFigure(shape cell, conns []int, srvs []server, t *table) *figure {
	place := ""
	if shape.unpinned {
		place = "-unpinned"
	}
	f := newFigure(fmt.Sprintf("throughput-size%d%s.svg", shape.size, place), "Throughput against connections, "+strings.Replace(shape.title(), "0 conns, ", "", 1), 8*vg.Inch, 4.5*vg.Inch)
	var ns []int
	for _, s := range srvs {
		var pt part
		for _, n := range conns {
			c := shape
			c.conns = n
			cp := t.plan.find(c)
			if cp == nil {
				continue
			}
			vs := perSecond(samplesOf(t.measured(cp), "ns/op", ofConfig(cfgName(s))))
			if len(vs) == 0 {
				continue
			}
			sp := spreadOf(vs)
			pt.pts = append(pt.pts, plotter.XY{X: math.Log10(float64(n)), Y: sp.med})
			pt.yerr = append(pt.yerr, sp.bar())
			ns = append(ns, sp.n)
		}
		if len(pt.pts) == 0 {
			continue
		}
		pt.join = true
		f.add(s.name, pt)
		f.addLegend(s.name)
	}
	if f.series == 0 {
		return nil
	}
	f.logX = kilo
	f.p.X.Label.Text = "connections, log scale"
	f.p.Y.Label.Text = "requests/s (higher is better)"
	f.p.Y.Min = 0
	f.p.Y.Max *= 1.05 // the top bar's cap clear of the frame
	f.p.Y.Tick.Marker = labelTicks{kilo}
	f.p.Add(plotter.NewGrid())
	f.note = "Points: medians over rounds. " + intervalNote(ns)
	return f
}

// ofConfig matches the results of configuration cfg.
func ofConfig(cfg string) func(result) bool {
	return func(r result) bool { return r.labels["cfg"] == cfg }
}

// samplesOf returns unit's values in the results that match: one per
// round, none where the unit is missing.
func samplesOf(rs []result, unit string, match func(result) bool) []float64 {
	var vs []float64
	for _, r := range rs {
		if v, ok := r.metrics[unit]; ok && match(r) {
			vs = append(vs, v)
		}
	}
	return vs
}

func mapped(vs []float64, f func(float64) float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = f(v)
	}
	return out
}

// positive returns the values of vs above zero: a latency, a time per
// request or a rate of zero is a failed measurement's, not a value.
func positive(vs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(vs), func(v float64) bool { return !(v > 0) })
}

// perSecond returns the rates, requests/s, of the times per request in
// ns, those above zero.
func perSecond(nsPerOp []float64) []float64 {
	return mapped(positive(nsPerOp), func(v float64) float64 { return 1e9 / v })
}

// spread is the median of a unit's values over rounds and an interval
// around it.
type spread struct {
	med, lo, hi float64
	n           int
	// ci says [lo, hi] is a 95% confidence interval of the median; if not
	// (fewer than 6 values), it is the range of the values.
	ci bool
}

// bar is the error bar of the interval, relative to the median.
func (sp spread) bar() struct{ Low, High float64 } {
	return struct{ Low, High float64 }{sp.med - sp.lo, sp.hi - sp.med}
}

// minCI is the fewest values that give a 95% interval of the median.
const minCI = 6

// spreadOf returns the median of vs (not empty) and the interval of it
// that the order statistics give, the kind benchstat uses: of the n values
// sorted, the kth smallest and the kth largest, with k the largest rank
// such that P(B < k) ≤ 2.5% for B ~ binomial(n, 1/2), the count of values
// below the true median. The interval then holds the median with
// probability 1 − 2·P(B < k) ≥ 95%, whatever the distribution. Below 6
// values no rank qualifies (2·2⁻⁵ > 5%): the interval is the range.
func spreadOf(vs []float64) spread {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	sp := spread{med: (s[(n-1)/2] + s[n/2]) / 2, lo: s[0], hi: s[n-1], n: n}
	k, below := 0, 0.0
	for i := 0; i < n; i++ {
		lg1, _ := math.Lgamma(float64(n + 1))
		lg2, _ := math.Lgamma(float64(i + 1))
		lg3, _ := math.Lgamma(float64(n - i + 1))
		below += math.Exp(lg1 - lg2 - lg3 - float64(n)*math.Ln2) // P(B = i)
		if below > 0.025 {
			break
		}
		k = i + 1
	}
	if k > 0 {
		sp.lo, sp.hi, sp.ci = s[k-1], s[n-k], true
	}
	return sp
}

// intervalNote says what the bars of intervals from ns values each are.
func intervalNote(ns []int) string {
	lo, hi := slices.Min(ns), slices.Max(ns)
	switch {
	case lo >= minCI:
		return fmt.Sprintf("Bars: 95%% confidence interval of the median (order statistics), %s rounds.", nRange(ns))
	case hi < minCI:
		return fmt.Sprintf("Bars: min to max of %s rounds; fewer than %d rounds give no 95%% interval of the median.", nRange(ns), minCI)
	}
	return fmt.Sprintf("Bars: 95%% confidence interval of the median (order statistics) with %d or more rounds, else min to max; %s rounds.", minCI, nRange(ns))
}

// nRange is the counts ns as "6" or "4–6".
func nRange(ns []int) string {
	lo, hi := slices.Min(ns), slices.Max(ns)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// cfgName is the cfg label of a server (the first key of its labels).
func cfgName(s server) string { return labels("Benchmark/" + s.label + "\t")["cfg"] }
