package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The plan is what a run measures: a list of cells, each a load shape and
// where its server runs (pinned, unpinned, under a CPU quota), with the
// servers it compares, how many rounds, how long each measurement, and
// which file its lines go to; then the idle-memory experiment and the
// herd. The runner measures a plan into one results table, and the
// renderers (summary, benchstat files, plots, HTML) read only that table.
// A new cell is a new entry here, not another pass through main.

// cellPlan is one cell of the plan.
type cellPlan struct {
	cell
	srvs             []server
	rounds           int
	warm             bool // its configurations may be warmed up in the discarded round 0
	warmup, duration time.Duration
	file             string // the benchmark lines' file in the output directory
}

// plan is a whole run.
type plan struct {
	cells     []*cellPlan
	idle      []server // servers of the idle-memory experiment
	idleConns int
	herd      bool
	sweep     *sweep // the open-loop cells, for their report; nil without
	notes     []string
}

// The files the cells' lines go to.
const (
	rawFile   = "raw.txt"   // closed-loop echo and net/http, pinned and unpinned
	sweepFile = "sweep.txt" // the open-loop sweep
	quotaFile = "quota.txt" // under a CPU quota
)

// defaultCfg is netpoll's defaults (edge-triggered, spin auto, short reads
// on): the configuration the verdict judges. spinNever is the same
// without spinning.
const (
	defaultCfg = "auto"
	spinNever  = "et"
)

// quotaConfigs are the quota cell's configurations, those of them the run
// has: package net, netpoll without spinning and netpoll's defaults, and
// package net's server on the patched toolchain without a setting and
// with the runtime's adaptive spinning (netpollspin=auto), which reads the
// quota too.
var quotaConfigs = []string{"net", spinNever, defaultCfg, "rt-none", "rt-spinauto"}

// makePlan lays out the run o asks for over the servers srvs (built).
// quotaErr is why no cgroup can be made here, if so: the quota cell is
// then left out with that reason.
func makePlan(o *options, srvs []server, skipped []string, quotaErr error) *plan {
	p := &plan{herd: o.herd}
	closed := func(c cell, ss []server) {
		if len(ss) > 0 {
			p.cells = append(p.cells, &cellPlan{cell: c, srvs: ss, rounds: o.rounds, warm: true,
				warmup: o.warmup, duration: o.duration, file: rawFile})
		}
	}
	httpSrvs := keep(srvs, func(s server) bool { return slices.Contains(o.http, s.name) })
	// Pinned first (when the run pins), then unpinned: the cells where
	// users live, GOMAXPROCS as Go sets it.
	placements := []bool{false}
	if !o.pinned {
		placements = []bool{true}
	} else if o.unpinned {
		placements = append(placements, true)
	}
	for i, unpinned := range placements {
		// The default run keeps the runtime's rows and net/http to the
		// first placement; -full measures them in both.
		extra := i > 0 && !o.full
		for _, c := range o.shapes {
			c.unpinned = unpinned
			ss := srvs
			if extra {
				ss = keep(srvs, func(s server) bool { return !strings.HasPrefix(s.name, "rt-") })
			}
			closed(c, ss)
		}
		for _, n := range o.httpConns {
			if !extra {
				closed(cell{proto: "http", conns: n, unpinned: unpinned}, httpSrvs)
			}
		}
	}
	if o.quota > 0 {
		qs := keep(srvs, func(s server) bool { return slices.Contains(quotaConfigs, s.name) })
		switch {
		case len(qs) == 0:
		case quotaErr != nil:
			p.notes = append(p.notes, fmt.Sprintf("Quota cell skipped: %v", quotaErr))
		default:
			p.cells = append(p.cells, &cellPlan{cell: cell{conns: 1, size: 64, quota: o.quota, unpinned: !o.pinned}, srvs: qs,
				rounds: o.quotaRounds, warmup: o.quotaWarmup, duration: o.quotaDuration, file: quotaFile})
		}
	}
	if o.sweep {
		p.sweep = planSweep(p, o, srvs, skipped)
	}
	if o.idle > 0 {
		// Not the runtime's rows but rt-zeroread (idleServer).
		p.idle = keep(srvs, idleServer)
		p.idleConns = o.idle
	}
	return p
}

// rounds is the most rounds of any cell.
func (p *plan) rounds() int {
	n := 0
	for _, c := range p.cells {
		n = max(n, c.rounds)
	}
	return n
}

// find returns the plan's cell c, or nil.
func (p *plan) find(c cell) *cellPlan {
	for _, cp := range p.cells {
		if cp.cell == c {
			return cp
		}
	}
	return nil
}

// keep returns the servers of ss for which f is true.
func keep(ss []server, f func(server) bool) []server {
	return slices.DeleteFunc(slices.Clone(ss), func(s server) bool { return !f(s) })
}

// jobs lists round's measurements: the cells in a random order, and
// within each cell its configurations in a random order, both drawn from
// shuffle. Round 0 is the warm-up round, set aside: each configuration
// once, in one of its cells (the first measurements of a run are slower:
// caches, CPU frequency, the host). A cell's measurements stay together,
// a few seconds apart: the host's speed moves within a round too, and the
// paired ratio cancels only the drift its two measurements share. The
// random order keeps any configuration from always running first or after
// the same neighbour.
func (p *plan) jobs(round int, shuffle func(n int, swap func(i, j int))) []job {
	var cells []*cellPlan
	for _, cp := range p.cells {
		if (round > 0 || cp.warm) && round <= cp.rounds {
			cells = append(cells, cp)
		}
	}
	warmed := map[string]bool{}
	shuffle(len(cells), func(i, j int) { cells[i], cells[j] = cells[j], cells[i] })
	var js []job
	for _, cp := range cells {
		srvs := slices.Clone(cp.srvs)
		if round == 0 {
			srvs = keep(srvs, func(s server) bool { return !warmed[s.name] })
			for _, s := range srvs {
				warmed[s.name] = true
			}
		}
		shuffle(len(srvs), func(i, j int) { srvs[i], srvs[j] = srvs[j], srvs[i] })
		for _, s := range srvs {
			js = append(js, job{round: round, s: s, c: cp})
		}
	}
	return js
}

// duration estimates how long the cells take, for the progress line.
func (p *plan) duration() time.Duration {
	var d time.Duration
	for _, cp := range p.cells {
		n := cp.rounds
		if cp.warm {
			n++
		}
		d += time.Duration(n*len(cp.srvs)) * (cp.warmup + cp.duration + 200*time.Millisecond)
	}
	return d
}
