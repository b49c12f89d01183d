package main

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// syntheticTable is a run of 6 rounds on a drifting host (±25% a round,
// shared by every configuration of the round, 1% noise each):
//   - echo, 1 conn: auto 1.30x net's req/s, ondemand 1.10x, et level with
//     net, gnet 0.90x, c failed every round; the load generator at 60% of
//     its CPU;
//   - echo, 50 conns: every server at the same req/s with the load
//     generator at 97% of its CPU, auto at 0.85x net's CPU per request,
//     ondemand level;
//   - quota: auto's throttled time 1.5x net's;
//   - blocked neighbour: the pinger's p99 level with net's on auto, 3x on
//     ondemand;
//
// idle memory of net, auto, ondemand and gnet, one sample each, and the
// herd (not judged).
func syntheticTable(t *testing.T) *table {
	t.Helper()
	srvs := mustServers(t, "net", "auto", "et", "ondemand", "gnet", "c")
	one := &cellPlan{cell: cell{conns: 1, size: 64}, srvs: srvs, rounds: 6, file: rawFile}
	fifty := &cellPlan{cell: cell{conns: 50, size: 64}, srvs: srvs, rounds: 6, file: rawFile}
	quota := &cellPlan{cell: cell{conns: 1, size: 64, quota: 0.5}, srvs: mustServers(t, "net", "auto", "et"), rounds: 6, file: quotaFile}
	neighbour := &cellPlan{cell: cell{conns: 2, size: 64, blocked: 1, delay: neighbourDelay, unpinned: true},
		srvs: mustServers(t, "net", "auto", "ondemand"), rounds: 6, file: neighbourFile}
	idle := &cellPlan{cell: cell{kind: kindIdle, conns: 10000, size: 64}, srvs: mustServers(t, "net", "auto", "ondemand", "gnet"), rounds: 1, file: idleFile}
	cells := append([]*cellPlan{one, fifty, quota, neighbour, idle}, herdCells(false)...)
	tb := &table{plan: &plan{cells: cells}}
	rng := rand.New(rand.NewPCG(7, 7))
	noise := func() float64 { return 1 + 0.01*rng.NormFloat64() }
	for round := 1; round <= 6; round++ {
		drift := 0.75 + 0.5*rng.Float64()
		// In a fixed order: the noise is drawn from one seeded source.
		for _, x := range []struct {
			cfg       string
			speed     float64
			cpu, tail float64
		}{{"net", 1, 1, 1}, {"auto", 1.3, 0.85, 1}, {"et", 1, 1, 1}, {"ondemand", 1.1, 1, 3}, {"gnet", 0.9, 1, 1}} {
			nsop := 40e3 / (drift * x.speed * noise())
			addResult(tb, one, x.cfg, round, map[string]float64{"ns/op": nsop, "p50-ns": nsop * 0.9, "server-cpu-ns/op": nsop * 0.8,
				"client-cpu-ns/op": nsop * 0.6, "syscalls/op": 6})
			cpu := 8e3 / drift * x.cpu * noise()
			nsop = 8e3 / (drift * noise())
			addResult(tb, fifty, x.cfg, round, map[string]float64{"ns/op": nsop, "p50-ns": nsop * 50, "server-cpu-ns/op": cpu,
				"client-cpu-ns/op": nsop * 0.97, "syscalls/op": 3})
			if slices.Contains([]string{"net", "auto", "ondemand"}, x.cfg) {
				nsop = 30e3 / (drift * noise())
				addResult(tb, neighbour, x.cfg, round, map[string]float64{"ns/op": nsop, "p50-ns": nsop * 0.9, "p99-ns": 60e3 * x.tail / drift * noise(),
					"max-ns": 2.5e6 * x.tail, "server-cpu-ns/op": nsop * 0.8, "client-cpu-ns/op": nsop * 0.5, "blocked-requests": 150})
			}
		}
		for _, x := range []struct {
			cfg  string
			tail float64
		}{{"net", 1}, {"auto", 1.5}, {"et", 1.1}} {
			cfg, tail := x.cfg, x.tail
			addResult(tb, quota, cfg, round, map[string]float64{"ns/op": 70e3, "p99.9-ns": 1e6 * tail / drift * noise(),
				"max-ns": 30e6 * tail, "throttled-ns": 3e8 * tail * noise(), "throttled-periods": 10, "quota-periods": 30, "client-cpu-ns/op": 20e3})
		}
	}
	for _, x := range []struct {
		cfg     string
		perConn float64
		gc      bool
	}{{"net", 7.7, true}, {"auto", 7.9, true}, {"ondemand", 0.47, true}, {"gnet", 0.5, false}} {
		m := map[string]float64{"rss-bytes/conn": x.perConn * 1024, "rss-1conn-bytes": 5 << 20, "rss-bytes": 5<<20 + 10000*x.perConn*1024,
			"rss-burst-bytes/conn": x.perConn * 1024 * 1.01, "slab-bytes/conn": 8.1 * 1024, "unsettled-readings": 0}
		if x.gc {
			m["rss-gc-bytes/conn"], m["heap-live-bytes/conn"], m["heap-objects/conn"] = x.perConn*1024*0.98, x.perConn*600, 7
		}
		addResult(tb, idle, x.cfg, 1, m)
	}
	for _, cp := range cells[5:] {
		for _, s := range cp.srvs {
			addResult(tb, cp, s.name, 1, map[string]float64{"wall-ns": 1e9, "cpu-ns": 2e9, "ctxsw": 490778, "empty-wakeups": 309,
				"min-events": 0, "median-events": 20, "max-events": 446, "idle-waiters": 5})
		}
	}
	tb.calStart = calibration{cpu: "Test CPU", ncpu: 2, kernel: "6.18", toolVer: "go1.26.8", syscallNs: 150, sameCoreUs: 6, crossCoreUs: 40,
		pinning: "server pinned to CPU 0"}
	tb.calEnd = tb.calStart
	return tb
}

// TestVerdict judges the synthetic run: the measure each cell is decided
// on, the paired words, the best peer, a configuration that failed every
// round shown as missing; and the summary text says the machine once,
// puts the verdict first, and fits in summaryWidth columns.
func TestVerdict(t *testing.T) {
	tb := syntheticTable(t)
	vs := judge(tb, 2)
	if len(vs) != 5 {
		t.Fatalf("%d cells judged, want 5 (the herd's are not)", len(vs))
	}
	one, fifty, quota, neighbour, idle := vs[0], vs[1], vs[2], vs[3], vs[4]
	check := func(v cellVerdict, cfg string, c *comparison, want string) {
		t.Helper()
		if got := word(c, v.measure); got != want {
			t.Errorf("%s %s on %s: %s (%s), want %s", v.cp.short(), cfg, v.measure.name, got, compact(c, v.measure), want)
		}
	}
	if one.measure != byThroughput || fifty.measure != byCPU || quota.measure != byThrottling || neighbour.measure != byP99 || idle.measure != byMemory {
		t.Errorf("measures %s, %s, %s, %s, %s; want req/s (server-bound), CPU/req (client at 97%%), throttled (quota), p99 (neighbour), KiB/conn (idle)",
			one.measure.name, fifty.measure.name, quota.measure.name, neighbour.measure.name, idle.measure.name)
	}
	if neighbour.second != byMax || idle.second != byBurst {
		t.Errorf("second measures %s and %s, want max beside the neighbour's p99, after burst beside idle memory", neighbour.second.name, idle.second.name)
	}
	if one.peer != "gnet" {
		t.Errorf("best peer at 1 conn: %q, want gnet (c failed every round)", one.peer)
	}
	check(one, "auto", one.row("auto").vsNet, verdictWins)
	check(one, "et", one.row("et").vsNet, verdictLevel)
	check(one, "gnet", one.row("gnet").vsNet, verdictLoses)
	check(one, "auto", one.row("auto").vsPeer, verdictWins)
	check(fifty, "auto", fifty.row("auto").vsNet, verdictWins) // less CPU per request
	check(fifty, "et", fifty.row("et").vsNet, verdictLevel)
	check(quota, "auto", quota.row("auto").vsNet, verdictLoses) // a longer tail
	check(one, "ondemand", one.row("ondemand").vsNet, verdictWins)
	check(fifty, "ondemand", fifty.row("ondemand").vsNet, verdictLevel)
	check(neighbour, "auto", neighbour.row("auto").vsNet, verdictLevel)
	check(neighbour, "ondemand", neighbour.row("ondemand").vsNet, verdictLoses)
	check(idle, "auto", idle.row("auto").vsNet, verdictLevel)         // 1.03x, one sample: the ratio alone
	check(idle, "ondemand", idle.row("ondemand").vsNet, verdictWins)  // 0.06x
	check(idle, "ondemand", idle.row("ondemand").vsPeer, verdictWins) // 0.94x: under 0.95
	if c := idle.row("auto").vsNet; c.n != 1 || !c.oneSample {
		t.Errorf("idle auto against net: n %d, one sample %v; want 1, true", c.n, c.oneSample)
	}
	if idle.peer != "gnet" || neighbour.peer != "" {
		t.Errorf("best peers %q (idle) and %q (neighbour); want gnet and none", idle.peer, neighbour.peer)
	}
	if r := one.row("c"); !r.missing || r.vsNet != nil {
		t.Errorf("c: missing %v, vsNet %v; want missing with no comparison", r.missing, r.vsNet)
	}
	if !strings.Contains(fifty.why, "load generator is saturated (97%") {
		t.Errorf("50 conns: why %q", fifty.why)
	}

	blocks := summaryBlocks(tb, vs)
	text := writeSummary(tb, blocks, nil, nil)
	t.Log("\n" + text)
	if n := strings.Count(text, "Calibration before:"); n != 1 {
		t.Errorf("the calibration is said %d times, want once", n)
	}
	if i, j := strings.Index(text, "Verdict:"), strings.Index(text, "echo, 1 conn, 64 B\n"); i < 0 || j < 0 || i > j {
		t.Errorf("the verdict (at %d) does not come before the cells' detail (at %d)", i, j)
	}
	for _, want := range []string{
		`(?m)^  echo, 1 conn +req/s +\d+ +1\.\d\dx \[[\d.]+,[\d.]+\] wins +gnet 1\.\d\dx \[[\d.]+,[\d.]+\] wins$`,
		`(?m)^  echo, 50 conns +CPU/req +[\d.]+µs +0\.8\dx \[[\d.]+,[\d.]+\] wins`,
		`(?m)^  echo, 1 conn, quota 0\.5 +throttled +4[4-5]\dms +1\.[45]\dx .* loses +no peer$`,
		`(?m)^  auto +6 +14286 .* 4[4-5]\dms +10/30 +1\.[45]\dx \[[\d.]+,[\d.]+\] loses`,
		`(?m)^  idle, 10000 conns +KiB/conn +7\.90 +1\.03x \(1 sample\) level +gnet 15\.80x \(1 sample\) loses$`,
		`(?m)^    ondemand +KiB/conn +0\.47 +0\.06x \(1 sample\) wins +gnet 0\.94x \(1 sample\) wins$`,
		`(?m)^    ondemand +req/s +\d+ +1\.\d\dx \[[\d.]+,[\d.]+\] wins +gnet 1\.2\dx \[[\d.]+,[\d.]+\] wins$`,
		`(?m)^  blocked neighbour, unpinned +p99 +[\d.]+µs +(1\.0\d|0\.9\d)x \[[\d.]+,[\d.]+\] level +no peer$`,
		`(?m)^    ondemand +p99 +[\d.]+µs +[23]\.\d\dx \[[\d.]+,[\d.]+\] loses +no peer$`,
		`(?m)^  herd .* not judged`,
		spaced(regexp.QuoteMeta(`Against package net, the default wins in 2 (echo, 1 conn; echo, 50 conns), level in 2 (blocked neighbour, unpinned; idle, 10000 conns), loses in 1 (echo, 1 conn, quota 0.5).`)),
		spaced(regexp.QuoteMeta(`Against package net, serving on demand wins in 2 (echo, 1 conn; idle, 10000 conns), level in 1 (echo, 50 conns), loses in 1 (blocked neighbour, unpinned).`)),
		`(?m)^  c +0 +missing$`,
		`(?m)^  ondemand +10000 +5\.0 MiB +9\.6 MiB +0\.47 +0\.06x +0\.46 +282 +7\.0 +0\.47 +8\.10$`,
		`(?m)^  gnet +10000 +5\.0 MiB +9\.9 MiB +0\.50 +0\.06x +— +— +— +0\.5\d +8\.10$`,
		`(?m)^  ondemand +6 +\d+ +[\d.]+µs +[\d.]+µs +7500\.0µs +[\d.]+µs +150 `,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("summary lacks %s", want)
		}
	}
	if w := wideLines(text, summaryWidth); len(w) > 0 {
		t.Errorf("lines over %d columns: %q", summaryWidth, w)
	}
}

// TestWithSyscalls: a syscall count that failed or found nothing is
// missing (no unit, an error), never 0 syscalls/op.
func TestWithSyscalls(t *testing.T) {
	line := "BenchmarkEcho/cfg=net/conns=1/size=64\t1000\t50000 ns/op"
	if got, err := withSyscalls(line, 6000); err != nil || !strings.HasSuffix(got, "\t6.000 syscalls/op") {
		t.Errorf("6000 syscalls over 1000 requests: %q, %v", got, err)
	}
	for _, n := range []float64{0, -1} {
		got, err := withSyscalls(line, n)
		if err == nil || got != line || strings.Contains(got, "syscalls/op") {
			t.Errorf("count %v: %q, %v; want the line unchanged and errNoSyscalls", n, got, err)
		}
	}
	if _, err := withSyscalls("BenchmarkEcho/cfg=net\t0\t0 ns/op", 500); err == nil {
		t.Error("no requests: want errNoSyscalls")
	}
}

// word is the verdict of a comparison on m, or why there is none.
func word(c *comparison, m measure) string {
	if c == nil {
		return "—"
	}
	return c.verdict(m.higherBetter)
}
