package main

import (
	"fmt"
	"math"
	"path/filepath"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// saturated is the fraction of the offered rate below which a point is
// labelled saturated: the configuration cannot keep up, its requests
// queue, and its latency is the queue's, growing with the window.
const saturated = 0.9

// drawSweep draws the sweep from the medians over rounds, with their
// intervals: the frontier (server CPU per request against p50 latency,
// each configuration's points joined in rate order and labelled with the
// rate) and the server's CPU utilisation against the offered load. It
// returns the files written.
func drawSweep(dir string, sw *sweep, rs []result) ([]string, error) {
	at := func(s server, rate float64, unit string) (spread, bool) {
		vs := positive(samplesOf(rs, unit, func(r result) bool {
			return r.labels["cfg"] == cfgName(s) && r.labels["rate"] == rateLabel(rate)
		}))
		if len(vs) == 0 {
			return spread{}, false
		}
		return spreadOf(vs), true
	}
	lg := math.Log10
	// logErr is the error bar of sp on a log axis.
	logErr := func(sp spread) struct{ Low, High float64 } {
		return struct{ Low, High float64 }{lg(sp.med) - lg(sp.lo), lg(sp.hi) - lg(sp.med)}
	}
	load := sw.shape.title()

	frontier := newFigure("sweep-frontier.svg", "Server CPU per request against p50 latency, by offered rate, "+load, 9*vg.Inch, 5.5*vg.Inch)
	frontier.logX, frontier.logY = micros, micros
	frontier.p.X.Label.Text = "server CPU per request, log scale (lower is better)"
	frontier.p.Y.Label.Text = "p50 latency, log scale (lower is better)"

	util := newFigure("sweep-utilisation.svg", "Server CPU utilisation against offered load, "+load, 9*vg.Inch, 5.5*vg.Inch)
	util.logX = kilo
	util.p.X.Label.Text = "offered load, requests/s, log scale (closed loop: the rate it reached)"
	util.p.Y.Label.Text = "server CPU utilisation, CPUs (lower is better)"

	var ns []int
	for _, s := range sw.srvs {
		var cost, busy, closed part
		cost.join, busy.join = true, true
		for _, rate := range sw.rates {
			nsop, ok := at(s, rate, "ns/op")
			if !ok {
				continue
			}
			name := shortRate(rate)
			if rate > 0 && 1e9/nsop.med < saturated*rate {
				name += " (saturated)"
			}
			cpu, okCPU := at(s, rate, "server-cpu-ns/op")
			p50, okP50 := at(s, rate, "p50-ns")
			if okCPU && okP50 {
				cost.pts = append(cost.pts, plotter.XY{X: lg(cpu.med), Y: lg(p50.med)})
				cost.xerr = append(cost.xerr, logErr(cpu))
				cost.yerr = append(cost.yerr, logErr(p50))
				cost.labels = append(cost.labels, name)
				ns = append(ns, cpu.n, p50.n)
			}
			u, ok := at(s, rate, utilUnit)
			if !ok {
				continue
			}
			x, pt := lg(rate), &busy
			if rate == 0 {
				// The closed loop has no offered load: a labelled point
				// apart from the line.
				x, pt = lg(1e9/nsop.med), &closed
				pt.labels = []string{"closed"}
			}
			pt.pts = append(pt.pts, plotter.XY{X: x, Y: u.med})
			pt.yerr = append(pt.yerr, u.bar())
			ns = append(ns, u.n)
		}
		for _, x := range []struct {
			f     *figure
			parts []part
		}{
			{frontier, []part{cost}},
			{util, []part{busy, closed}},
		} {
			drew := false
			for _, pt := range x.parts {
				if len(pt.pts) > 0 {
					x.f.add(s.name, pt)
					drew = true
				}
			}
			if drew {
				x.f.addLegend(s.name)
			}
		}
	}
	if len(ns) > 0 {
		bars := intervalNote(ns)
		frontier.note = fmt.Sprintf("Points: medians over rounds, joined in rate order and labelled with the offered rate, requests/s (closed: the closed loop; "+
			"saturated: under %.0f%% of the offered rate completed, its latency the queue's). %s", saturated*100, bars)
		util.note = "Points: medians over rounds; 1 is one whole CPU kept busy. " + bars
	}
	util.p.Y.Min = 0
	util.p.Y.Max *= 1.05 // headroom for the labels at the top

	var files []string
	for _, f := range []*figure{frontier, util} {
		if f.series == 0 {
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

// shortRate is a rate for a point's label: 2k, 10k, closed.
func shortRate(rate float64) string {
	if rate == 0 {
		return "closed"
	}
	return kilo(rate)
}

// micros formats nanoseconds as a duration: 50µs, 2ms.
func micros(ns float64) string { return time.Duration(ns).String() }
