package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The plan is what a run measures, every experiment of it: a list of
// cells, each a shape (a load, idle connections, the herd) and where its
// servers run, with the configurations it compares (their exact flags),
// how many rounds, how long each measurement, and which file its lines
// go to. The runner measures a plan into one table, and the render stage
// (render.go) writes every file from that table alone. A new experiment is
// a new cell here, not another pass through main.

// cellPlan is one cell of the plan.
type cellPlan struct {
	cell
	srvs             []server
	rounds           int
	warm             bool // its configurations may be warmed up in the discarded round 0
	warmup, duration time.Duration
	file             string // the benchmark lines' file in the output directory; "" for none (the herd's table)
	sweep            bool   // a point of the open-loop sweep: an open cell, or the closed cell of its shape
}

// plan is a whole run.
type plan struct {
	cells []*cellPlan
	notes []string // experiments left out, and why
}

// The files the cells' lines go to.
const (
	rawFile       = "raw.txt"       // closed-loop echo and net/http, pinned and unpinned
	sweepFile     = "sweep.txt"     // the open-loop sweep (its closed loop's lines too, labelled rate=closed)
	quotaFile     = "quota.txt"     // under a CPU quota
	neighbourFile = "neighbour.txt" // the blocked-neighbour cell
	idleFile      = "idle.txt"      // the idle experiment
	warmupFile    = "warmup.txt"    // the warm-up round, set aside
)

// defaultCfg is netpoll's defaults (edge-triggered, spin auto, short reads
// on): the configuration the verdict judges. onDemandCfg is the default
// serving on demand (netpoll.Server), the library's answer to idle
// connections, judged beside it. spinNever is the default without
// spinning.
const (
	defaultCfg  = "auto"
	onDemandCfg = "ondemand"
	spinNever   = "et"
)

// quotaConfigs are the quota cell's configurations, those of them the run
// has: package net, netpoll without spinning, netpoll's defaults and on
// demand, and package net's server on the patched toolchain without a
// setting, with the runtime's adaptive spinning (netpollspin=auto), which
// reads the quota too, and with the runtime's profile.
var quotaConfigs = []string{"net", spinNever, defaultCfg, onDemandCfg, "rt-none", "rt-spinauto", profileCfg}

// neighbourConfigs are the blocked-neighbour cell's configurations, those
// of them the run has: package net, netpoll's default and on demand, (when
// asked for in -configs) the default under wait=inline and on demand with
// a goroutine per call, and on the loop (ondemand-loop), whose tails
// issue 35 compares, and the profile's rows; all of them cmd/echoserver
// (the rt- rows built with the patched toolchain), which honours
// loadgen's Delay requests.
var neighbourConfigs = []string{"net", defaultCfg, onDemandCfg, "auto-inline", "ondemand-go", "ondemand-role", "ondemand-inline", "ondemand-loop", "rt-none", profileCfg}

// httpIdleConfigs are the HTTP idle cell's configurations, those of them
// among the run's net/http configurations (-http): cmd/httpserver on
// package net, on stock Go and on the patched toolchain without a setting
// and under the profile, whose httpidlezeroread lets net/http's idle
// keep-alive connections wait without buffers. An echo server never calls
// Read(nil), so the profile cannot change its idle memory: the echo idle
// cell has no rt- rows but rt-zeroread's (idleServer).
var httpIdleConfigs = []string{"net", "rt-none", profileCfg}

// neighbourDelay is how long the server holds each request of the
// blocked connection in the blocked-neighbour cell: a backend call, far
// longer than a round trip (bench.BenchmarkBlockedNeighbour's block).
const neighbourDelay = 2 * time.Millisecond

// makePlan lays out the run o asks for over the servers srvs (built).
// quotaErr is why no cgroup can be made here, if so: the quota cell is
// then left out with that reason.
func makePlan(o *options, srvs []server, quotaErr error) *plan {
	p := &plan{}
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
		// The default run keeps net/http and the runtime's rows to the
		// first placement, but for the profile's (profileConfigs), which
		// are in every cell; -full measures them all in both.
		extra := i > 0 && !o.full
		for _, c := range o.shapes {
			c.unpinned = unpinned
			ss := srvs
			if extra {
				ss = keep(srvs, func(s server) bool { return !strings.HasPrefix(s.name, "rt-") || isProfileRow(s) })
			}
			closed(c, ss)
		}
		for _, n := range o.httpConns {
			if !extra {
				closed(cell{proto: "http", conns: n, unpinned: unpinned}, httpSrvs)
			}
		}
	}
	if o.neighbour {
		planNeighbour(p, o, srvs)
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
		planSweep(p, o, srvs)
	}
	if o.idle > 0 {
		planIdle(p, o, srvs)
	}
	if o.herd {
		p.cells = append(p.cells, herdCells(o.full)...)
	}
	return p
}

// planNeighbour adds the blocked-neighbour cell: two connections, one of
// whose requests the server holds neighbourDelay each (loadgen -blocked 1,
// echoserver -delay), the other pinging; unpinned, where a server's
// goroutines can run beside the held one. Its servers are
// neighbourConfigs' with -delay.
func planNeighbour(p *plan, o *options, srvs []server) {
	var ss []server
	for _, s := range keep(srvs, func(s server) bool { return slices.Contains(neighbourConfigs, s.name) }) {
		s.args = append(slices.Clone(s.args), "-delay", neighbourDelay.String())
		ss = append(ss, s)
	}
	if len(ss) == 0 {
		p.notes = append(p.notes, fmt.Sprintf("Blocked-neighbour cell skipped: none of %s among the configurations.", strings.Join(neighbourConfigs, ", ")))
		return
	}
	p.cells = append(p.cells, &cellPlan{cell: cell{conns: 2, size: 64, blocked: 1, delay: neighbourDelay, unpinned: true}, srvs: ss,
		rounds: o.rounds, warm: true, warmup: o.warmup, duration: o.duration, file: neighbourFile})
}

// planIdle adds the idle cells: o.idle connections to a fresh process of
// each idle server (idleServer), placed as the run's first placement, one
// sample each; and the same over net/http (loadgen -idle -proto http) for
// httpIdleConfigs among the run's net/http configurations.
func planIdle(p *plan, o *options, srvs []server) {
	var ss []server
	for _, s := range keep(srvs, idleServer) {
		ss = append(ss, idleArgs(s))
	}
	c := cell{kind: kindIdle, conns: o.idle, size: idleMsgSize, unpinned: !o.pinned}
	if len(ss) > 0 {
		p.cells = append(p.cells, &cellPlan{cell: c, srvs: ss, rounds: 1, file: idleFile})
	}
	hs := keep(srvs, func(s server) bool {
		return slices.Contains(httpIdleConfigs, s.name) && slices.Contains(o.http, s.name)
	})
	if len(hs) > 0 {
		c.proto, c.size = "http", 0
		p.cells = append(p.cells, &cellPlan{cell: c, srvs: hs, rounds: 1, file: idleFile})
	}
}

// rounds is the most rounds of any load cell.
func (p *plan) rounds() int {
	n := 0
	for _, c := range p.cells {
		if c.kind == kindLoad {
			n = max(n, c.rounds)
		}
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

// A job is one measurement: a configuration in a cell, in a round (0: the
// warm-up round).
type job struct {
	round int
	s     server
	c     *cellPlan
}

// jobs lists round's measurements of the load cells: the cells in a
// random order, and within each cell its configurations in a random
// order, both drawn from shuffle. Round 0 is the warm-up round, set aside:
// each configuration once, in one of its cells (the first measurements of
// a run are slower: caches, CPU frequency, the host). A cell's
// measurements stay together, a few seconds apart: the host's speed moves
// within a round too, and the paired ratio cancels only the drift its two
// measurements share. The random order keeps any configuration from
// always running first or after the same neighbour.
func (p *plan) jobs(round int, shuffle func(n int, swap func(i, j int))) []job {
	var cells []*cellPlan
	for _, cp := range p.cells {
		if cp.kind == kindLoad && (round > 0 || cp.warm) && round <= cp.rounds {
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

// lastJobs lists the measurements after the rounds, in plan order: the
// idle cell's and the herd's, one sample each (round 1). Idle memory is
// measured on fresh processes, whatever ran before; the herd's 100
// threads would only disturb the rounds.
func (p *plan) lastJobs() []job {
	var js []job
	for _, cp := range p.cells {
		if cp.kind == kindLoad {
			continue
		}
		for _, s := range cp.srvs {
			js = append(js, job{round: 1, s: s, c: cp})
		}
	}
	return js
}

// What a run costs beyond its measurement windows, for the estimate
// (duration). The runner's real costs vary with the machine; these are
// generous, so that the estimate bounds a run on 2 CPUs.
const (
	startCost    = 200 * time.Millisecond  // a server and a load generator started, connected and stopped
	idleCost     = 4 * time.Second         // an idle measurement's seven settled readings (0.5 s each at least) and its server
	idleConnCost = 100 * time.Microsecond  // dialling, echoing and bursting one idle connection
	herdCost     = 500 * time.Millisecond  // a herd run's 100 threads started and stopped
	herdInterval = 100 * time.Microsecond  // cmd/herd's -interval between events
	calibCost    = 1500 * time.Millisecond // one calibration (the syscall loop and two wakeup loops)
)

// duration estimates how long the plan takes to measure: every job of
// every round, the idle and herd measurements, and the calibrations
// before and after. A test bounds the default run's.
func (p *plan) duration() time.Duration {
	d := 2 * calibCost
	keepOrder := func(int, func(int, int)) {}
	for round := 0; round <= p.rounds(); round++ {
		for _, j := range p.jobs(round, keepOrder) {
			d += j.c.warmup + j.c.duration + startCost
		}
	}
	for _, j := range p.lastJobs() {
		switch j.c.kind {
		case kindIdle:
			d += idleCost + time.Duration(j.c.conns)*idleConnCost
		case kindHerd:
			// Waking all takes about twice the events' schedule.
			d += herdCost + 2*time.Duration(j.c.events)*herdInterval
		}
	}
	return d
}

// herdCells are the herd experiment: 100 waiters on a pipe (wakeall,
// exclusive) and on a listening socket (wakeall, exclusive, reuseport),
// each mode a configuration running cmd/herd. Default: 5,000 pipe events
// and 1,000 connections; -full: the seed's 20,000 pipe events, 2,000
// connections. Not pinned: the waiters are threads on every CPU, as in
// the seed.
func herdCells(full bool) []*cellPlan {
	pipeEvents, acceptEvents := 5000, 1000
	if full {
		pipeEvents, acceptEvents = 20000, 2000
	}
	var cps []*cellPlan
	for _, x := range []struct {
		source string
		events int
		modes  []string
	}{
		{"pipe", pipeEvents, []string{"wakeall", "exclusive"}},
		{"accept", acceptEvents, []string{"wakeall", "exclusive", "reuseport"}},
	} {
		cp := &cellPlan{cell: cell{kind: kindHerd, source: x.source, events: x.events, unpinned: true}, rounds: 1}
		for _, mode := range x.modes {
			cp.srvs = append(cp.srvs, server{name: mode, label: "cfg=" + mode + "/source=" + x.source, bin: "herd",
				args: []string{"-source", x.source, "-mode", mode, "-waiters", strconv.Itoa(herdWaiters), "-events", strconv.Itoa(x.events)}})
		}
		cps = append(cps, cp)
	}
	return cps
}

// herdWaiters are the herd's waiters, as in the seed.
const herdWaiters = 100
