package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// The summary: per cell, one line per configuration with the medians over
// rounds that decide (req/s, p50, p99, server CPU and syscalls per
// request), its throughput against package net and against the best peer
// library, and whether each difference is significant. Lines fit in
// summaryWidth columns; the full benchstat tables go to files.

const summaryWidth = 120

// peers are the configurations that are not this project's: the callback
// libraries and the C reference, against which "best peer" is taken.
var peers = []string{"gnet", "nbio", "cloudwego", "c"}

// significance is the two-sided p-value below which a difference counts.
const significance = 0.05

// minSamples is the smallest number of rounds for which the U test can
// reach significance at 0.05 with both sides of equal size (6 gives
// p = 0.002 at best, 3 gives 0.1).
const minSamples = 6

// cellSummary is one cell's lines.
type cellSummary struct {
	title string
	rows  []summaryRow
}

type summaryRow struct {
	cfg     string
	n       int       // rounds measured
	rps     []float64 // per round
	p50     float64   // medians, ns; NaN when missing
	p99     float64
	cpu     float64
	sys     float64
	vsNet   string // "1.05x*", "—" for net itself, "missing"
	vsPeer  string
	missing bool
}

// summarize builds the summary of every cell from the results, for the
// configurations in order.
func summarize(rs []result, srvs []server, cells []cell) []cellSummary {
	var out []cellSummary
	for _, c := range cells {
		cs := cellSummary{title: c.title()}
		var rows []summaryRow
		for _, s := range srvs {
			match := func(r result) bool { return r.labels["cfg"] == s.name && c.matches(r) }
			row := summaryRow{cfg: s.name, p50: math.NaN(), p99: math.NaN(), cpu: math.NaN(), sys: math.NaN()}
			row.rps = perSecond(positive(samplesOf(rs, "ns/op", match)))
			row.n = len(row.rps)
			row.missing = row.n == 0
			for unit, dst := range map[string]*float64{"p50-ns": &row.p50, "p99-ns": &row.p99, "server-cpu-ns/op": &row.cpu, "syscalls/op": &row.sys} {
				if v, ok := medianOf(rs, unit, match); ok {
					*dst = v
				}
			}
			rows = append(rows, row)
		}
		byName := func(name string) *summaryRow {
			i := slices.IndexFunc(rows, func(r summaryRow) bool { return r.cfg == name })
			if i < 0 || rows[i].missing {
				return nil
			}
			return &rows[i]
		}
		net := byName("net")
		var best *summaryRow
		for _, p := range peers {
			if r := byName(p); r != nil && (best == nil || med(r.rps) > med(best.rps)) {
				best = r
			}
		}
		for i := range rows {
			r := &rows[i]
			r.vsNet, r.vsPeer = versus(r, net), versus(r, best)
		}
		if best != nil {
			cs.title += fmt.Sprintf("; best peer %s", best.cfg)
		}
		cs.rows = rows
		out = append(out, cs)
	}
	return out
}

// versus is row's throughput against base's: the ratio of medians, with
// "*" when the U test finds the rounds differ (p < significance).
func versus(row, base *summaryRow) string {
	switch {
	case row.missing:
		return "missing"
	case base == nil:
		return "n/a"
	case row == base:
		return "—"
	}
	s := fmt.Sprintf("%.2fx", med(row.rps)/med(base.rps))
	if utest(row.rps, base.rps) < significance {
		s += "*"
	} else {
		s += " "
	}
	return s
}

// writeSummary prints the summary. A missing measurement is "missing",
// never a zero.
func writeSummary(w io.Writer, sums []cellSummary) {
	fmt.Fprintln(w, "Medians over rounds. vs net, vs peer: req/s ratio; * = significant (Mann-Whitney U, p < 0.05).")
	fmt.Fprintln(w, "Lower is better for latency, CPU and syscalls; higher for req/s and the ratios.")
	for _, cs := range sums {
		fmt.Fprintf(w, "\n%s\n", cs.title)
		fmt.Fprintf(w, "  %-12s %3s %10s %10s %10s %11s %8s %8s %8s\n",
			"config", "n", "req/s", "p50", "p99", "CPU/req", "sys/req", "vs net", "vs peer")
		for _, r := range cs.rows {
			if r.missing {
				fmt.Fprintf(w, "  %-12s %3d %10s\n", r.cfg, 0, "missing")
				continue
			}
			fmt.Fprintf(w, "  %-12s %3d %10.0f %10s %10s %11s %8s %8s %8s\n",
				r.cfg, r.n, med(r.rps), fmtMicros(r.p50), fmtMicros(r.p99), fmtMicros(r.cpu), fmtCount(r.sys), r.vsNet, r.vsPeer)
		}
		if lead := leaders(cs.rows); lead != "" {
			fmt.Fprintf(w, "  %s\n", lead)
		}
	}
}

// leaders says who won the cell: the most req/s and the least CPU per
// request, with their margin over the runner-up.
func leaders(rows []summaryRow) string {
	var ok []summaryRow
	for _, r := range rows {
		if !r.missing {
			ok = append(ok, r)
		}
	}
	if len(ok) < 2 {
		return ""
	}
	byRPS := slices.Clone(ok)
	slices.SortFunc(byRPS, func(a, b summaryRow) int { return cmp.Compare(med(b.rps), med(a.rps)) })
	s := fmt.Sprintf("most req/s: %s (%.2fx %s)", byRPS[0].cfg, med(byRPS[0].rps)/med(byRPS[1].rps), byRPS[1].cfg)
	var withCPU []summaryRow
	for _, r := range ok {
		if !math.IsNaN(r.cpu) {
			withCPU = append(withCPU, r)
		}
	}
	if len(withCPU) >= 2 {
		slices.SortFunc(withCPU, func(a, b summaryRow) int { return cmp.Compare(a.cpu, b.cpu) })
		s += fmt.Sprintf("; least CPU/req: %s (%.2fx %s)", withCPU[0].cfg, withCPU[0].cpu/withCPU[1].cpu, withCPU[1].cfg)
	}
	return s
}

// fmtMicros formats ns as µs; NaN is missing.
func fmtMicros(ns float64) string {
	if math.IsNaN(ns) {
		return "missing"
	}
	return fmt.Sprintf("%.1fµs", ns/1e3)
}

func fmtCount(v float64) string {
	if math.IsNaN(v) {
		return "missing"
	}
	return fmt.Sprintf("%.2f", v)
}

// med is the median of vs; NaN when empty.
func med(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// utest is the two-sided exact p-value of the Mann-Whitney U test that a
// and b come from the same distribution, as benchstat computes it for
// small samples without ties (ties count half). 1 when either is empty.
func utest(a, b []float64) float64 {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return 1
	}
	// U counts pairs (x in a, y in b) with x > y, ties half: twice it is
	// an integer.
	u2 := 0
	for _, x := range a {
		for _, y := range b {
			switch {
			case x > y:
				u2 += 2
			case x == y:
				u2++
			}
		}
	}
	// The distribution of U under the null hypothesis: the number of
	// arrangements of n a's and m b's with each U, by the recurrence
	// f(n, m, u) = f(n-1, m, u-m) + f(n, m-1, u).
	dist := uDist(n, m)
	total := 0.0
	for _, c := range dist {
		total += c
	}
	// Two-sided: the probability of a U at least as far from the mean.
	mean2 := n * m // twice the mean n*m/2
	dev := u2 - mean2
	if dev < 0 {
		dev = -dev
	}
	p := 0.0
	for u, c := range dist {
		d := 2*u - mean2
		if d < 0 {
			d = -d
		}
		if d >= dev {
			p += c
		}
	}
	return min(1, p/total)
}

// uDist returns, for u = 0..n*m, how many orderings of n and m distinct
// values give U = u.
func uDist(n, m int) []float64 {
	// f[i][j] is the distribution for i and j values.
	f := make([][][]float64, n+1)
	for i := range f {
		f[i] = make([][]float64, m+1)
		for j := range f[i] {
			d := make([]float64, i*j+1)
			switch {
			case i == 0 || j == 0:
				d[0] = 1
			default:
				for u, c := range f[i-1][j] { // the largest is an a: it beats all j b's
					d[u+j] += c
				}
				for u, c := range f[i][j-1] { // the largest is a b
					d[u] += c
				}
			}
			f[i][j] = d
		}
	}
	return f[n][m]
}

// wideLines returns the lines of s longer than width columns (runes).
func wideLines(s string, width int) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if len([]rune(l)) > width {
			out = append(out, l)
		}
	}
	return out
}
