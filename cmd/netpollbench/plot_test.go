package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func TestSpreadOf(t *testing.T) {
	seq := func(n int) []float64 {
		var vs []float64
		for i := n; i >= 1; i-- { // descending: spreadOf sorts
			vs = append(vs, float64(i))
		}
		return vs
	}
	for _, tt := range []struct {
		name        string
		vs          []float64
		med, lo, hi float64
		ci          bool
	}{
		{"one", []float64{7}, 7, 7, 7, false},
		{"n=5 has no 95% interval: the range", seq(5), 3, 1, 5, false},
		{"n=6: min to max covers 1-2/64", seq(6), 3.5, 1, 6, true},
		{"n=8: still min to max (2·9/256 > 5%)", seq(8), 4.5, 1, 8, true},
		{"n=9: second smallest to second largest", seq(9), 5, 2, 8, true},
		{"n=20: ranks 6 and 15", seq(20), 10.5, 6, 15, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := spreadOf(tt.vs)
			want := spread{med: tt.med, lo: tt.lo, hi: tt.hi, n: len(tt.vs), ci: tt.ci}
			if got != want {
				t.Errorf("spreadOf(%v) = %+v, want %+v", tt.vs, got, want)
			}
		})
	}
}

func TestLabelTicks(t *testing.T) {
	for _, r := range [][2]float64{{0, 1}, {194e3, 260e3}, {2.1, 9.7}, {-3, 3}, {5, 5}} {
		ticks := labelTicks{sig3}.Ticks(r[0], r[1])
		var labelled []string
		for _, tk := range ticks {
			if tk.Value < r[0] || tk.Value > r[1] {
				t.Errorf("%v: tick %v outside", r, tk.Value)
			}
			if tk.Label != "" {
				labelled = append(labelled, tk.Label)
			}
		}
		if len(labelled) < 1 || len(labelled) > 10 || (r[1] > r[0] && len(labelled) < 3) {
			t.Errorf("%v: labels %q, want 3 to 10", r, labelled)
		}
	}
}

// fakeResults are the results of rounds rounds of cfgs in cell c: latency
// grows with the percentile, each configuration is slower than the one
// before. The units in drop ("unit", or "cfg:unit" for one configuration)
// are left out, as an old or a failed measurement leaves them out.
func fakeResults(cfgs []string, c cell, rounds int, drop ...string) []result {
	var rs []result
	for round := range rounds {
		for i, cfg := range cfgs {
			f := float64(1+i) * (1 + 0.01*float64(round))
			m := map[string]float64{
				"ns/op": 20e3 * f, "p50-ns": 18e3 * f, "p90-ns": 25e3 * f, "p99-ns": 60e3 * f, "p99.9-ns": 150e3 * f, "p99.99-ns": 400e3 * f,
				"server-cpu-ns/op": 15e3 * f, "syscalls/op": 4 * f,
			}
			for _, u := range drop { // "unit", or "cfg:unit" for one configuration
				if k, unit, ok := strings.Cut(u, ":"); !ok {
					delete(m, u)
				} else if k == cfg {
					delete(m, unit)
				}
			}
			rs = append(rs, result{
				labels:  map[string]string{"cfg": cfg, "conns": fmt.Sprint(c.conns), "size": fmt.Sprint(c.size)},
				metrics: m,
				round:   round + 1,
			})
		}
	}
	return rs
}

// TestDrawPlotsMissing draws from results without p99.99 (recorded before
// loadgen had it) and with one configuration's CPU missing: the plots are
// drawn, the missing says so, and fewer than 6 rounds give ranges.
func TestDrawPlotsMissing(t *testing.T) {
	dir := t.TempDir()
	srvs, err := pickServers([]string{"net", "spin"})
	if err != nil {
		t.Fatal(err)
	}
	c := cell{conns: 1, size: 64}
	files, err := drawPlots(dir, &cellPlan{cell: c, srvs: srvs, rounds: 4}, fakeResults([]string{"net", "spin"}, c, 4, "p99.99-ns", "spin:server-cpu-ns/op"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	want := []string{"latency-conns1-size64.svg", "throughput-conns1-size64.svg", "cpu-conns1-size64.svg", "syscalls-conns1-size64.svg"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}
	for _, tt := range []struct {
		file string
		want []string
	}{
		{"latency-conns1-size64.svg", []string{">net<", ">spin<", "No p99.99", ">99.99<", "lower is better"}},
		{"throughput-conns1-size64.svg", []string{">net<", ">spin<", "higher is better", "min to max of 4 rounds"}},
		{"cpu-conns1-size64.svg", []string{">missing<", ">15.2<", "lower is better", "does not start"}},
	} {
		b, err := os.ReadFile(filepath.Join(dir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q", tt.file, w)
			}
		}
	}
}

// TestFigureFitsTitle saves a figure whose title is wider than the plot
// and a legend: the canvas widens to hold both.
func TestFigureFitsTitle(t *testing.T) {
	title := strings.Repeat("a long title ", 12)
	f := newFigure("wide.svg", title, 4*vg.Inch, 3*vg.Inch)
	f.add("net", part{pts: plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: 2}}, join: true})
	f.addLegend("net")
	path := filepath.Join(t.TempDir(), f.file)
	if err := f.save(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<svg width="([0-9.]+)pt"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no <svg width=...pt> in %.200s", b)
	}
	w, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	need := f.p.Title.TextStyle.Width(title) + f.legend.Rectangle(draw.Canvas{}).Size().X
	if vg.Length(w) < need {
		t.Errorf("canvas %vpt wide, want at least %vpt for the title and the legend", w, need)
	}
}
