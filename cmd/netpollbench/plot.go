package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// drawPlots draws, from the medians over rounds: latency percentiles, server
// CPU and syscalls per request for each cell, and throughput against
// connections for each size. It returns the files written.
func drawPlots(dir string, srvs []server, cells []cell, rs []result) ([]string, error) {
	var files []string
	save := func(p *plot.Plot, name string) error {
		path := filepath.Join(dir, name)
		if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
			return err
		}
		files = append(files, path)
		return nil
	}
	for _, c := range cells {
		p, ok := bars(srvs, c, rs, "Latency, "+c.String(), "µs",
			[]string{"p50-ns", "p90-ns", "p99-ns", "p99.9-ns"}, []string{"p50", "p90", "p99", "p99.9"}, 1e-3)
		if ok {
			if err := save(p, fmt.Sprintf("latency-conns%d-size%d.svg", c.conns, c.size)); err != nil {
				return files, err
			}
		}
		p, ok = bars(srvs, c, rs, "Server CPU per request, "+c.String(), "µs",
			[]string{"server-cpu-ns/op"}, []string{"server CPU"}, 1e-3)
		if ok {
			if err := save(p, fmt.Sprintf("cpu-conns%d-size%d.svg", c.conns, c.size)); err != nil {
				return files, err
			}
		}
		p, ok = bars(srvs, c, rs, "Server syscalls per request, "+c.String(), "syscalls",
			[]string{"syscalls/op"}, []string{"syscalls"}, 1)
		if ok {
			if err := save(p, fmt.Sprintf("syscalls-conns%d-size%d.svg", c.conns, c.size)); err != nil {
				return files, err
			}
		}
	}
	var sizes, conns []int
	for _, c := range cells {
		if !slices.Contains(sizes, c.size) {
			sizes = append(sizes, c.size)
		}
		if !slices.Contains(conns, c.conns) {
			conns = append(conns, c.conns)
		}
	}
	if len(conns) < 2 {
		return files, nil // a line against connections needs two counts (and a log axis two values)
	}
	for _, size := range sizes {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("Throughput against connections, size=%d", size)
		p.X.Label.Text = "connections"
		p.Y.Label.Text = "requests/s"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		drawn := 0
		for i, s := range srvs {
			var pts plotter.XYs
			for _, c := range cells {
				if v, ok := median(rs, cfgName(s), c, "ns/op"); ok && c.size == size && v > 0 {
					pts = append(pts, plotter.XY{X: float64(c.conns), Y: 1e9 / v})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return files, err
			}
			line.Color = plotutil.Color(i)
			points.Color = plotutil.Color(i)
			points.Shape = plotutil.Shape(i)
			p.Add(line, points)
			p.Legend.Add(s.name, line, points)
			drawn++
		}
		if drawn == 0 {
			continue
		}
		p.Legend.Top = true
		if err := save(p, fmt.Sprintf("throughput-size%d.svg", size)); err != nil {
			return files, err
		}
	}
	return files, nil
}

// bars draws one group of bars per server: one bar per unit, scaled.
func bars(srvs []server, c cell, rs []result, title, ylabel string, units, names []string, scale float64) (*plot.Plot, bool) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	var xnames []string
	var present []server
	for _, s := range srvs {
		if _, ok := median(rs, cfgName(s), c, units[0]); ok {
			xnames = append(xnames, s.name)
			present = append(present, s)
		}
	}
	if len(present) == 0 {
		return nil, false
	}
	w := vg.Points(40 / float64(len(units)))
	for i, u := range units {
		vals := make(plotter.Values, len(present))
		for j, s := range present {
			v, _ := median(rs, cfgName(s), c, u)
			vals[j] = v * scale
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, false
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Color = color.Black
		b.Offset = w * vg.Length(float64(i)-float64(len(units)-1)/2)
		p.Add(b)
		if len(units) > 1 {
			p.Legend.Add(names[i], b)
		}
	}
	p.Legend.Top = true
	p.NominalX(xnames...)
	return p, true
}

// cfgName is the cfg label of a server (the first key of its labels).
func cfgName(s server) string { return labels("Benchmark/" + s.label + "\t")["cfg"] }
