package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// saturated is the fraction of the offered rate below which a point is
// labelled saturated: the configuration cannot keep up, its requests
// queue, and its latency is the queue's, growing with the window.
const saturated = 0.9

// figure is one of the sweep's plots. Its log axes are linear axes over
// log10 of the data with ticks labelled in data units: gonum's LogScale
// misplaces the axis titles' glyph boxes and pads the plot out of shape.
type figure struct {
	p          *plot.Plot
	file       string
	logX, logY func(float64) string // tick labels of a log axis; nil: linear
	series     int                  // configurations drawn
	labels     []pointLabel
}

// pointLabel is the text beside one point of series i.
type pointLabel struct {
	i    int
	at   plotter.XY
	text string
}

// drawSweep draws the sweep from the medians over rounds: the frontier
// (server CPU per request against p50 latency, each configuration's points
// joined in rate order and labelled with the rate) and the server's CPU
// utilisation against the offered load. It returns the files written.
func drawSweep(dir string, sw *sweep, rs []result) ([]string, error) {
	at := func(s server, rate float64, unit string) (float64, bool) {
		v, ok := medianOf(rs, unit, func(r result) bool {
			return r.labels["cfg"] == cfgName(s) && r.labels["rate"] == rateLabel(rate)
		})
		return v, ok && v > 0
	}
	lg := math.Log10

	frontier := &figure{p: plot.New(), file: "sweep-frontier.svg", logX: micros, logY: micros}
	frontier.p.Title.Text = "Server CPU per request against p50 latency, open loop by offered rate, 1 conn, 64 B"
	frontier.p.X.Label.Text = "server CPU per request, log scale (lower is better)"
	frontier.p.Y.Label.Text = "p50 latency, log scale (lower is better)"

	util := &figure{p: plot.New(), file: "sweep-utilisation.svg", logX: kilo}
	util.p.Title.Text = "Server CPU utilisation against offered load, 1 conn, 64 B"
	util.p.X.Label.Text = "offered load, requests/s (log scale; closed loop: the rate it reached)"
	util.p.Y.Label.Text = "server CPU utilisation, CPUs (lower is better)"
	util.p.Y.Min = 0

	for i, s := range sw.srvs {
		var cost, busy, closed plotter.XYs
		var names []string
		for _, rate := range sw.rates {
			nsop, ok := at(s, rate, "ns/op")
			if !ok {
				continue
			}
			name := shortRate(rate)
			if rate > 0 && 1e9/nsop < saturated*rate {
				name += " (saturated)"
			}
			cpu, okCPU := at(s, rate, "server-cpu-ns/op")
			p50, okP50 := at(s, rate, "p50-ns")
			if okCPU && okP50 {
				cost = append(cost, plotter.XY{X: lg(cpu), Y: lg(p50)})
				names = append(names, name)
			}
			switch u, ok := at(s, rate, utilUnit); {
			case ok && rate > 0:
				busy = append(busy, plotter.XY{X: lg(rate), Y: u})
			case ok:
				closed = append(closed, plotter.XY{X: lg(1e9 / nsop), Y: u})
			}
		}
		for _, x := range []struct {
			f     *figure
			parts []part
		}{
			{frontier, []part{{cost, names, true}}},
			// The closed loop has no offered load: a labelled point
			// apart from the line.
			{util, []part{{busy, nil, true}, {closed, []string{"closed"}, false}}},
		} {
			drew := false
			for _, pt := range x.parts {
				if len(pt.pts) == 0 {
					continue
				}
				if err := x.f.add(i, pt); err != nil {
					return nil, err
				}
				drew = true
			}
			if drew {
				x.f.p.Legend.Add(s.name, thumbs(i)...)
				x.f.series++
			}
		}
	}

	var files []string
	for _, f := range []*figure{frontier, util} {
		if f.series == 0 {
			continue
		}
		path := filepath.Join(dir, f.file)
		if err := f.save(path, 9*vg.Inch, 5.5*vg.Inch); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// part is some points of a series: joined by a line or not, and
// labelled point by point if labels is not nil.
type part struct {
	pts    plotter.XYs
	labels []string
	join   bool
}

// add draws pt as part of series i; its labels wait for the axes to be
// final (save).
func (f *figure) add(i int, pt part) error {
	ls, gs := style(i)
	if pt.join {
		line, err := plotter.NewLine(pt.pts)
		if err != nil {
			return err
		}
		line.LineStyle = ls
		f.p.Add(line)
	}
	points, err := plotter.NewScatter(pt.pts)
	if err != nil {
		return err
	}
	points.GlyphStyle = gs
	f.p.Add(points)
	for j, l := range pt.labels {
		f.labels = append(f.labels, pointLabel{i, pt.pts[j], l})
	}
	return nil
}

// save sets the axes, labels the points, and writes the SVG, w×h, with
// the legend in a column right of the axes, where it covers no data.
func (f *figure) save(path string, w, h vg.Length) error {
	if f.logX != nil {
		logAxis(&f.p.X, f.logX)
	}
	if f.logY != nil {
		logAxis(&f.p.Y, f.logY)
	} else {
		f.p.Y.Max += 0.05 * (f.p.Y.Max - f.p.Y.Min) // headroom for the top labels
	}
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	pad := vg.Points(8)
	lw := f.p.Legend.Rectangle(dc).Size().X + 2*pad
	f.p.Legend.Top, f.p.Legend.Left = true, false
	f.p.Legend.XOffs = lw - pad
	area := draw.Crop(dc, 0, -lw, 0, 0)
	if err := f.placeLabels(f.p.DataCanvas(area)); err != nil {
		return err
	}
	f.p.Draw(area)
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// placeLabels adds the labels, thinned out where points crowd, as they do
// where configurations perform alike: the labels of a series' points that
// nearly coincide become one ("2k, 10k"); a label goes right of its point,
// or below, or left, wherever it overlaps no label placed before it, and
// is left out if there is no such place. The markers and lines still tell
// the series apart. data is where the points are drawn.
func (f *figure) placeLabels(data draw.Canvas) error {
	trX, trY := f.p.Transforms(&data)
	at := func(xy plotter.XY) vg.Point { return vg.Point{X: trX(xy.X), Y: trY(xy.Y)} }
	var merged []pointLabel
	for _, l := range f.labels {
		k := slices.IndexFunc(merged, func(m pointLabel) bool {
			d := at(m.at).Sub(at(l.at))
			return m.i == l.i && math.Hypot(float64(d.X), float64(d.Y)) < 8
		})
		if k >= 0 {
			merged[k].text += ", " + l.text
			continue
		}
		merged = append(merged, l)
	}
	var taken []vg.Rectangle
	for _, l := range merged {
		lp, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{l.at}, Labels: []string{l.text}})
		if err != nil {
			return err
		}
		_, gs := style(l.i)
		lp.TextStyle[0].Color = gs.Color
		size := lp.TextStyle[0].Rectangle(l.text).Size()
		gap := vg.Points(6)
		for _, off := range []vg.Point{
			{X: gap, Y: 2}, {X: gap, Y: -size.Y - 2}, {X: -gap - size.X, Y: 2}, {X: -gap - size.X, Y: -size.Y - 2},
		} {
			min := at(l.at).Add(off)
			box := vg.Rectangle{Min: min, Max: min.Add(size)}
			if !slices.ContainsFunc(taken, func(r vg.Rectangle) bool { return overlap(r, box) }) {
				taken = append(taken, box)
				lp.Offset = off
				f.p.Add(lp)
				break
			}
		}
	}
	return nil
}

func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// style is the line and marker of series i.
func style(i int) (draw.LineStyle, draw.GlyphStyle) {
	ls := plotter.DefaultLineStyle
	ls.Color = plotutil.Color(i)
	ls.Dashes = plotutil.Dashes(i)
	gs := plotter.DefaultGlyphStyle
	gs.Color = plotutil.Color(i)
	gs.Shape = plotutil.Shape(i)
	gs.Radius = vg.Points(4)
	return ls, gs
}

// thumbs are the legend thumbnails of series i: its line and marker.
func thumbs(i int) []plot.Thumbnailer {
	ls, gs := style(i)
	return []plot.Thumbnailer{&plotter.Line{LineStyle: ls}, &plotter.Scatter{GlyphStyle: gs}}
}

// shortRate is a rate for a point's label: 2k, 10k, closed.
func shortRate(rate float64) string {
	if rate == 0 {
		return "closed"
	}
	return kilo(rate)
}

// kilo formats a count, thousands as k: 500, 2k, 30k.
func kilo(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// micros formats nanoseconds as a duration: 50µs, 2ms.
func micros(ns float64) string { return time.Duration(ns).String() }

// logAxis makes a, over log10 of the data, a log axis from the
// integer-times-power-of-ten steps around the data, labelled by format.
func logAxis(a *plot.Axis, format func(float64) string) {
	step := func(v float64) float64 { return math.Pow(10, math.Floor(math.Log10(v))) }
	lo := math.Pow(10, a.Min) * (1 + 1e-9)
	hi := math.Pow(10, a.Max) * (1 - 1e-9)
	a.Min = math.Log10(math.Floor(lo/step(lo)) * step(lo))
	a.Max = math.Log10(math.Ceil(hi/step(hi)) * step(hi))
	a.Tick.Marker = logTicks{format}
}

// logTicks marks an axis over log10 of the data at the integers times
// powers of ten, labelling 1, 2 and 5 times them (every mark, if that
// labels fewer than two).
type logTicks struct{ format func(float64) string }

func (t logTicks) Ticks(min, max float64) []plot.Tick {
	lo, hi := math.Pow(10, min)*(1-1e-9), math.Pow(10, max)*(1+1e-9)
	var ticks []plot.Tick
	var values []float64
	labelled := 0
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for m := 1.0; m < 10; m++ {
			v := m * p
			if v < lo || v > hi {
				continue
			}
			tick := plot.Tick{Value: math.Log10(v)}
			if m == 1 || m == 2 || m == 5 {
				tick.Label = t.format(v)
				labelled++
			}
			ticks = append(ticks, tick)
			values = append(values, v)
		}
	}
	if labelled < 2 {
		for i, v := range values {
			ticks[i].Label = t.format(v)
		}
	}
	return ticks
}
