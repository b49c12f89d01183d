package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// The summary: the machine and its calibration once, then the verdict
// (rows per cell: netpoll's default, and serving on demand, against
// package net and the best peer, paired within rounds), then each cell in
// detail, idle memory among them.
// Both summary.txt and report.html render the same blocks; lines of the
// text fit in summaryWidth columns, and the full benchstat tables go to
// files.

const summaryWidth = 120

// block is a table for people: the text summary and the HTML render it.
type block struct {
	id     string // HTML anchor
	title  string
	notes  []string // under the title
	head   []string
	rows   [][]string
	left   int      // the first left columns are left-aligned (text), the rest right-aligned but for "vs ..."
	foot   []string // under the table
	indent string   // the text rendering's indent of the rows and notes
}

// leftAligned reports whether column i holds text (the first left
// columns, and the "vs ..." comparisons) rather than a number.
func (b block) leftAligned(i int) bool {
	return i < b.left || (i < len(b.head) && strings.HasPrefix(b.head[i], "vs "))
}

// summaryBlocks builds the verdict and the detail of every cell.
func summaryBlocks(t *table, vs []cellVerdict) []block {
	bs := []block{verdictBlock(t, vs)}
	if b := profileBlock(vs); b != nil {
		bs = append(bs, *b)
	}
	if b := beforeBlock(t, vs); b != nil {
		bs = append(bs, *b)
	}
	for i, v := range vs {
		id := fmt.Sprintf("cell%d", i+1)
		if v.cp.kind == kindIdle {
			bs = append(bs, idleBlock(id, v))
			continue
		}
		bs = append(bs, detailBlock(id, v))
	}
	return bs
}

// verdictConfigs are the configurations the verdict has rows for, in
// every cell they are in: netpoll's default, and serving on demand.
var verdictConfigs = []string{defaultCfg, onDemandCfg}

// verdictBlock is the first screen: a row per cell for the default, and
// one for serving on demand under it, indented.
func verdictBlock(t *table, vs []cellVerdict) block {
	b := block{id: "verdict", title: fmt.Sprintf("Verdict: netpoll's default (%s), and serving on demand (%s, indented), against package net and the best peer",
		defaultCfg, onDemandCfg),
		head: []string{"cell", "measure", "figure", "vs net", "vs best peer"}, left: 2, indent: "  "}
	count := map[string]wordCount{} // cfg -> its cells by word against net
	for _, v := range vs {
		net := v.row("net")
		if net != nil && net.missing {
			net = nil
		}
		m := v.measure
		for _, cfg := range verdictConfigs {
			x := v.row(cfg)
			if x == nil {
				continue
			}
			label := "  " + cfg
			switch {
			case cfg == defaultCfg:
				label = v.cp.short()
			case v.row(defaultCfg) == nil:
				// The cell's name on a row of its own, over on demand's.
				b.rows = append(b.rows, []string{v.cp.short(), "", "", "", ""})
			}
			peer := "no peer"
			if v.peer != "" {
				peer = v.peer + " " + compact(x.vsPeer, m)
			}
			vsNet := "no net"
			if net != nil {
				vsNet = compact(x.vsNet, m)
			}
			b.rows = append(b.rows, []string{label, m.name, fmtUnit(m.unit, x.med[m.unit]), vsNet, peer})
			if net != nil && x.vsNet != nil {
				if count[cfg] == nil {
					count[cfg] = wordCount{}
				}
				count[cfg].add(x.vsNet, m, v.cp.short())
			}
		}
	}
	// Open loop: what the default's spinning costs against not spinning.
	var prices []string
	for _, v := range vs {
		if v.spin != nil {
			prices = append(prices, fmt.Sprintf("%g req/s %s", v.cp.rate, v.spin))
		}
	}
	// The one line each: where the default and on demand win, are
	// level, lose against net.
	for _, cfg := range verdictConfigs {
		if words := count[cfg].String(); words != "" {
			who := "the default"
			if cfg != defaultCfg {
				who = "serving on demand"
			}
			b.notes = append(b.notes, "Against package net, "+who+" "+words+".")
		}
	}
	if n := beforeNote(t, vs); n != "" {
		b.notes = append(b.notes, n)
	}
	if len(prices) > 0 {
		b.notes = append(b.notes, "Its spinning in the open loop, against "+spinNever+" (never spins): "+strings.Join(prices, "; ")+".")
		b.foot = append(b.foot, "Spinning: "+spinRule+".")
	}
	if slices.ContainsFunc(t.plan.cells, func(cp *cellPlan) bool { return cp.kind == kindHerd }) {
		b.rows = append(b.rows, []string{"herd", "—", "", "not judged", "epoll's own modes"})
	}
	b.foot = append(b.foot, ratioRule)
	return b
}

// ratioRule says how the verdict's ratios and words are made.
const ratioRule = "Ratios: the configuration's figure over the other's, paired within rounds (every configuration measured once per round, " +
	"in a random order): geometric mean and 95% interval (t-interval of the mean log ratio over rounds). wins/loses: the interval " +
	"excludes 1.0 on that side; level: it lies within [0.95, 1.05]; unresolved: neither. For a time, CPU or memory a ratio " +
	"under 1 is better. Idle memory is one sample per configuration: its word is from the ratio alone."

// wordCount is a configuration's cells by its verdict word against
// another.
type wordCount map[string][]string

// add counts cell under c's word on m.
func (wc wordCount) add(c *comparison, m measure, cell string) {
	w := c.verdict(m.higherBetter)
	wc[w] = append(wc[w], cell)
}

// String is the count for people: "wins in 2 (echo, 1 conn; http, 1
// conn), level in 1 (echo, 50 conns)"; "" for none.
func (wc wordCount) String() string {
	var parts []string
	for _, w := range []string{verdictWins, verdictLevel, verdictLoses, verdictUnresolved} {
		if cs := wc[w]; len(cs) > 0 {
			parts = append(parts, fmt.Sprintf("%s in %d (%s)", w, len(cs), strings.Join(cs, "; ")))
		}
	}
	return strings.Join(parts, ", ")
}

// detailBlock is a cell's table: every configuration's medians and its
// paired ratio to net on each of the cell's measures.
func detailBlock(id string, v cellVerdict) block {
	cp, m := v.cp, v.measure
	b := block{id: id, title: cp.title(), left: 1, indent: "  "}
	place := "pinned: server on CPU 0 (GOMAXPROCS=1), load generator on CPU 1"
	if cp.unpinned {
		place = "unpinned: server and load generator share the machine, GOMAXPROCS as Go sets it"
	}
	if cp.quota > 0 {
		place += fmt.Sprintf(", the server in a cgroup limited to %g CPU", cp.quota)
	}
	b.notes = []string{place + fmt.Sprintf("; %d rounds of %v after %v.", cp.rounds, cp.duration, cp.warmup),
		fmt.Sprintf("Measure: %s (%s), because %s.", m.name, direction(m), v.why)}
	second := v.second
	// The medians shown, by column.
	type col struct {
		name   string
		figure func(cfgRow) string
	}
	median := func(name, unit string) col {
		return col{name, func(r cfgRow) string { return fmtUnit(unit, r.med[unit]) }}
	}
	cols := []col{median("req/s", "req/s"), median("p50", "p50-ns"), median("CPU/req", "server-cpu-ns/op"),
		median("sys/req", "syscalls/op"), median("load", "client-cpu-util")}
	if cp.blocked > 0 {
		cols = []col{median("req/s", "req/s"), median("p50", "p50-ns"), median("p99", "p99-ns"), median("max", "max-ns"),
			median("CPU/req", "server-cpu-ns/op"), {"held", func(r cfgRow) string { return fmt.Sprintf("%.0f", r.med["blocked-requests"]) }}}
	}
	if cp.quota > 0 {
		// p99.99 is in quota.txt and tables-quota.txt: with the
		// runtime's rows' names the cell has no room for it in 120
		// columns, and p99.9 and max bound the tail it lies between.
		cols = []col{median("req/s", "req/s"), median("p50", "p50-ns"), median("p99.9", "p99.9-ns"),
			median("max", "max-ns"), median("throttled", "throttled-ns"),
			{"periods", func(r cfgRow) string { // throttled of all, in the measured window
				return fmtUnit("throttled-periods", r.med["throttled-periods"]) + "/" + fmtUnit("quota-periods", r.med["quota-periods"])
			}}}
	}
	b.head = []string{"config", "n"}
	for _, c := range cols {
		b.head = append(b.head, c.name)
	}
	b.head = append(b.head, "vs net, "+m.name, "U p", "vs net, "+second.name)
	for _, r := range v.rows {
		line := []string{r.cfg, fmt.Sprint(r.n)}
		if r.missing {
			line = append(line, "missing")
			b.rows = append(b.rows, line)
			continue
		}
		for _, c := range cols {
			line = append(line, c.figure(r))
		}
		p := "—"
		if r.vsNet != nil {
			p = fmt.Sprintf("%.3f", r.vsNet.pUnpaired)
		}
		line = append(line, compact(r.vsNet, m), p, ratioWord(r.vsNet2, second))
		b.rows = append(b.rows, line)
	}
	if v.peer != "" {
		if def := v.row(defaultCfg); def != nil && def.vsPeer != nil {
			b.foot = append(b.foot, fmt.Sprintf("Best peer on %s: %s; the default against it: %s.", m.name, v.peer, compact(def.vsPeer, m)))
		}
	}
	if v.spin != nil {
		b.foot = append(b.foot, fmt.Sprintf("Spinning: %s against %s, %s.", defaultCfg, spinNever, v.spin))
	}
	legend := "load: the load generator's CPU (1 CPU = 100%). "
	if cp.blocked > 0 {
		legend = fmt.Sprintf("req/s, p50, p99, max, CPU/req: the pinging connection's; held: the blocked connection's requests, each held %v "+
			"by the server (loadgen -blocked, echoserver -delay), in the measured window. ", cp.delay)
	}
	if cp.quota > 0 {
		legend = "throttled: time the kernel throttled the server's group; periods: throttled periods of all (100 ms each) in the measured window. "
	}
	b.foot = append(b.foot, legend+"vs net: paired, as in the verdict. "+
		"U p: Mann-Whitney U on the unpaired rounds, as benchstat tests them, for reference; the verdict uses the paired interval.")
	return b
}

func direction(m measure) string {
	if m.higherBetter {
		return "higher is better"
	}
	return "lower is better"
}

// compact is a comparison as "1.48x [1.40,1.57] wins", "—" for none,
// "0.97x (1 sample) level" for one sample.
func compact(c *comparison, m measure) string {
	if c == nil {
		return "—"
	}
	if c.oneSample && c.n == 1 {
		return c.interval() + " " + c.verdict(m.higherBetter)
	}
	if c.n < 2 {
		return fmt.Sprintf("n=%d: unresolved", c.n)
	}
	return c.interval() + " " + c.verdict(m.higherBetter)
}

// ratioWord is a comparison as "1.03x level", without its interval.
func ratioWord(c *comparison, m measure) string {
	if c == nil {
		return "—"
	}
	if c.n < 2 && !(c.oneSample && c.n == 1) {
		return fmt.Sprintf("n=%d: unresolved", c.n)
	}
	return fmt.Sprintf("%.2fx %s", c.geo, c.verdict(m.higherBetter))
}

// fmtUnit formats a median of unit for people; NaN is missing.
func fmtUnit(unit string, v float64) string {
	if math.IsNaN(v) {
		return "missing"
	}
	switch {
	case unit == "req/s":
		return fmt.Sprintf("%.0f", v)
	case unit == "throttled-ns":
		return fmt.Sprintf("%.0fms", v/1e6)
	case unit == "throttled-periods" || unit == "quota-periods":
		return fmt.Sprintf("%.0f", v)
	case strings.HasSuffix(unit, "-util"):
		return fmt.Sprintf("%.0f%%", 100*v)
	case unit == "syscalls/op":
		return fmt.Sprintf("%.2f", v)
	case unit == byMemory.unit:
		return fmt.Sprintf("%.2f", v/1024)
	case v >= 10e6:
		return fmt.Sprintf("%.1fms", v/1e6)
	}
	return fmt.Sprintf("%.1fµs", v/1e3)
}

// writeBlock renders b as text.
func writeBlock(w io.Writer, b block) {
	fmt.Fprintf(w, "\n%s\n", wrapText(b.title, summaryWidth, "  "))
	for _, n := range b.notes {
		fmt.Fprintln(w, wrapText(b.indent+n, summaryWidth, b.indent+"  "))
	}
	width := make([]int, len(b.head))
	for _, r := range append([][]string{b.head}, b.rows...) {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], len([]rune(c)))
			}
		}
	}
	for _, r := range append([][]string{b.head}, b.rows...) {
		var cells []string
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if b.leftAligned(i) {
				cells = append(cells, c+pad)
			} else {
				cells = append(cells, pad+c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.indent+strings.Join(cells, "  "), " "))
	}
	for _, f := range b.foot {
		fmt.Fprintln(w, wrapText(b.indent+f, summaryWidth, b.indent+"  "))
	}
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
