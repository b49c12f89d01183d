package main

import (
	"fmt"
	"math"
	"slices"
)

// The verdict: for each cell of the plan, what decides it (its measure),
// every configuration's medians, and each configuration's paired ratio to
// package net and to the cell's best peer on that measure (paired.go).

// measure is the figure that decides a cell.
type measure struct {
	unit         string // the table's unit (value)
	name         string // for people
	higherBetter bool
}

var (
	byThroughput = measure{"req/s", "req/s", true}
	byCPU        = measure{"server-cpu-ns/op", "CPU/req", false}
	byThrottling = measure{"throttled-ns", "throttled", false}
	byMemory     = measure{"rss-bytes/conn", "KiB/conn", false}
	byP99        = measure{"p99-ns", "p99", false}
	byMax        = measure{"max-ns", "max", false}
	byBurst      = measure{"rss-burst-bytes/conn", "after burst", false}
)

// clientBound is the share of its CPUs above which the load generator,
// not the server, limits a closed loop's throughput: req/s then measures
// the client, and the cell is decided on the server's CPU per request.
const clientBound = 0.9

// peers are the configurations that are not this project's: the callback
// libraries and the C reference, against which "best peer" is taken.
var peers = []string{"gnet", "nbio", "cloudwego", "c"}

// cellVerdict is one cell judged.
type cellVerdict struct {
	cp         *cellPlan
	measure    measure // decides
	second     measure // shown beside it
	why        string  // why this measure
	clientUtil float64 // the load generator's CPU, in CPUs: median over the cell's measurements; NaN if unknown
	rows       []cfgRow
	peer       string     // the best peer on the measure; "" without one
	spin       *spinPrice // open loop: the default's spinning against spinNever; nil otherwise
}

// cfgRow is one configuration of a cell.
type cfgRow struct {
	cfg      string
	n        int                // rounds measured
	med      map[string]float64 // medians over rounds, by unit (value's units)
	vsNet    *comparison        // on the cell's measure; nil for net itself or without net
	vsNone   *comparison        // the profile's row (profileCfg) against rt-none on the cell's measure; nil for the others or without rt-none
	vsNet2   *comparison        // on its second measure
	vsPeer   *comparison        // against the best peer; nil for the peer itself or without one
	vsBefore *beforePair        // against its before configuration (-before); nil without one
	missing  bool               // no round measured
}

// medianUnits are the units whose medians the rows carry: the load
// cells', the blocked-neighbour cell's held requests, and the idle cell's.
var medianUnits = []string{"req/s", "p50-ns", "p99-ns", "p99.9-ns", "p99.99-ns", "max-ns", "server-cpu-ns/op",
	"syscalls/op", "client-cpu-util", utilUnit, "throttled-periods", "throttled-ns", "quota-periods", "blocked-requests",
	"rss-bytes/conn", "rss-1conn-bytes", "rss-bytes", "rss-gc-bytes/conn", "heap-live-bytes/conn", "heap-objects/conn",
	"rss-burst-bytes/conn", "slab-bytes/conn", "unsettled-readings"}

// judge judges every cell of t's plan but the herd's, which compares the
// kernel's epoll modes, not configurations. ncpu is the machine's CPUs
// (an unpinned cell's client shares them with the server).
func judge(t *table, ncpu int) []cellVerdict {
	var out []cellVerdict
	for _, cp := range t.plan.cells {
		if cp.kind != kindHerd {
			out = append(out, judgeCell(t, cp, ncpu))
		}
	}
	return out
}

func judgeCell(t *table, cp *cellPlan, ncpu int) cellVerdict {
	v := cellVerdict{cp: cp}
	series := map[string]map[string][]float64{} // cfg -> unit -> by round
	// A measurement is there when it has its kind's main figure.
	there := "req/s"
	if cp.kind == kindIdle {
		there = byMemory.unit
	}
	var clients, totals []float64
	for _, s := range cp.srvs {
		row := cfgRow{cfg: s.name, med: map[string]float64{}}
		series[s.name] = map[string][]float64{}
		for _, u := range medianUnits {
			vs := t.byRound(cp, s.name, u)
			series[s.name][u] = vs
			if cp.kind == kindIdle {
				// Growths per connection: the system-wide Slab may
				// shrink, and a negative reading is one.
				row.med[u] = med(slices.DeleteFunc(slices.Clone(vs), math.IsNaN))
				continue
			}
			row.med[u] = med(present(vs))
		}
		row.n = len(present(series[s.name][there]))
		row.missing = row.n == 0
		cl, srv := series[s.name]["client-cpu-util"], series[s.name][utilUnit]
		for i := range cl {
			if !math.IsNaN(cl[i]) {
				clients = append(clients, cl[i])
				if !math.IsNaN(srv[i]) {
					totals = append(totals, cl[i]+srv[i])
				}
			}
		}
		v.rows = append(v.rows, row)
	}
	v.clientUtil = med(clients)
	if cp.rate > 0 {
		v.spin = newSpinPrice(series)
	}
	switch {
	case cp.kind == kindIdle:
		v.measure, v.why = byMemory, "the server's resident memory per idle connection is what decides how many a machine holds"
	case cp.blocked > 0:
		v.measure, v.why = byP99, fmt.Sprintf("what a handler blocked %v costs its neighbours shows in their tail: the pinging connection's p99, "+
			"its worst round trip beside it", cp.delay)
	case cp.quota > 0:
		v.measure, v.why = byThrottling, "under a quota the time the kernel throttled the server decides: "+
			"every request waiting in a throttled window stalls for the rest of the period (the tail: p99.9, p99.99, max)"
	case cp.rate > 0:
		v.measure, v.why = byCPU, "an open loop's throughput is the offered rate: CPU per request decides, p50 beside it"
	case cp.unpinned && med(totals) >= clientBound*float64(ncpu):
		v.measure = byCPU
		v.why = fmt.Sprintf("the machine is saturated (server and load generator use %.0f%% of its %d CPUs): req/s measures both", 100*med(totals)/float64(ncpu), ncpu)
	case !cp.unpinned && v.clientUtil >= clientBound:
		v.measure = byCPU
		v.why = fmt.Sprintf("the load generator is saturated (%.0f%% of its CPU): req/s measures it, not the server", 100*v.clientUtil)
	case cp.unpinned:
		v.measure = byThroughput
		v.why = fmt.Sprintf("the machine is not saturated (server and load generator use %.0f%% of its %d CPUs)", 100*med(totals)/float64(ncpu), ncpu)
	case math.IsNaN(v.clientUtil):
		v.measure, v.why = byThroughput, "the load generator's CPU was not measured, so req/s (it may measure the client)"
	default:
		v.measure = byThroughput
		v.why = fmt.Sprintf("the server is the bottleneck (load generator %.0f%% of its CPU)", 100*v.clientUtil)
	}
	switch {
	case cp.kind == kindIdle:
		v.second = byBurst
	case cp.quota > 0 || cp.blocked > 0:
		v.second = byMax
	case v.measure == byCPU && cp.rate > 0:
		v.second = measure{"p50-ns", "p50", false}
	case v.measure == byCPU:
		v.second = byThroughput
	default:
		v.second = byCPU
	}
	// The best peer on the measure.
	m := v.measure
	best := -1
	for i, r := range v.rows {
		if r.missing || !slices.Contains(peers, r.cfg) || math.IsNaN(r.med[m.unit]) {
			continue
		}
		if best < 0 || better(m, r.med[m.unit], v.rows[best].med[m.unit]) {
			best = i
		}
	}
	if best >= 0 {
		v.peer = v.rows[best].cfg
	}
	for i := range v.rows {
		r := &v.rows[i]
		if r.missing {
			continue
		}
		// One sample a configuration: the ratio alone decides.
		one := cp.rounds == 1
		if r.cfg != "net" && series["net"] != nil {
			c := compare(series[r.cfg][m.unit], series["net"][m.unit])
			c2 := compare(series[r.cfg][v.second.unit], series["net"][v.second.unit])
			c.oneSample, c2.oneSample = one, one
			r.vsNet, r.vsNet2 = &c, &c2
		}
		if none := v.row("rt-none"); r.cfg == profileCfg && none != nil && !none.missing {
			c := compare(series[r.cfg][m.unit], series["rt-none"][m.unit])
			c.oneSample = one
			r.vsNone = &c
		}
		if v.peer != "" && r.cfg != v.peer {
			c := compare(series[r.cfg][m.unit], series[v.peer][m.unit])
			c.oneSample = one
			r.vsPeer = &c
		}
		r.vsBefore = judgeBefore(series, r.cfg, m, one)
	}
	return v
}

// row returns the row of cfg, or nil.
func (v *cellVerdict) row(cfg string) *cfgRow {
	for i := range v.rows {
		if v.rows[i].cfg == cfg {
			return &v.rows[i]
		}
	}
	return nil
}

// better reports whether a is better than b on m.
func better(m measure, a, b float64) bool {
	if m.higherBetter {
		return a > b
	}
	return a < b
}

// present returns the values of vs that were measured: not NaN, not
// negative (a throttled time of zero is a value).
func present(vs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(vs), func(v float64) bool { return !(v >= 0) })
}
