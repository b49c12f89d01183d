package main

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// syntheticTable is a run of 6 rounds on a drifting host (±25% a round,
// shared by every configuration of the round, 1% noise each):
//   - echo, 1 conn: auto 1.30x net's req/s, et level with net, gnet 0.90x,
//     c failed every round; the load generator at 60% of its CPU;
//   - echo, 50 conns: every server at the same req/s with the load
//     generator at 97% of its CPU, auto at 0.85x net's CPU per request;
//   - quota: auto's p99.9 1.5x net's;
//
// and idle memory of net, auto and gnet.
func syntheticTable(t *testing.T) *table {
	t.Helper()
	srvs, err := pickServers([]string{"net", "auto", "et", "gnet", "c"})
	if err != nil {
		t.Fatal(err)
	}
	qsrvs, err := pickServers(quotaConfigs)
	if err != nil {
		t.Fatal(err)
	}
	one := &cellPlan{cell: cell{conns: 1, size: 64}, srvs: srvs, rounds: 6}
	fifty := &cellPlan{cell: cell{conns: 50, size: 64}, srvs: srvs, rounds: 6}
	quota := &cellPlan{cell: cell{conns: 1, size: 64, quota: 0.5}, srvs: qsrvs, rounds: 6, file: quotaFile}
	tb := &table{plan: &plan{cells: []*cellPlan{one, fifty, quota}}, herd: []herdRow{{Source: "pipe", Mode: "wakeall"}}}
	rng := rand.New(rand.NewPCG(7, 7))
	noise := func() float64 { return 1 + 0.01*rng.NormFloat64() }
	add := func(c cell, cfg string, round int, m map[string]float64) {
		labels := map[string]string{"cfg": cfg, "conns": strconv.Itoa(c.conns), "size": "64"}
		if c.quota > 0 {
			labels["quota"] = "0.5"
		}
		tb.results = append(tb.results, result{labels: labels, metrics: m, round: round})
	}
	for round := 1; round <= 6; round++ {
		drift := 0.75 + 0.5*rng.Float64()
		// In a fixed order: the noise is drawn from one seeded source.
		for _, x := range []struct {
			cfg   string
			speed float64
		}{{"net", 1}, {"auto", 1.3}, {"et", 1}, {"gnet", 0.9}} {
			cfg, speed := x.cfg, x.speed
			nsop := 40e3 / (drift * speed * noise())
			add(one.cell, cfg, round, map[string]float64{"ns/op": nsop, "p50-ns": nsop * 0.9, "server-cpu-ns/op": nsop * 0.8,
				"client-cpu-ns/op": nsop * 0.6, "syscalls/op": 6})
			cpu := 8e3 / drift * noise()
			if cfg == "auto" {
				cpu *= 0.85
			}
			nsop = 8e3 / (drift * noise())
			add(fifty.cell, cfg, round, map[string]float64{"ns/op": nsop, "p50-ns": nsop * 50, "server-cpu-ns/op": cpu,
				"client-cpu-ns/op": nsop * 0.97, "syscalls/op": 3})
		}
		for _, x := range []struct {
			cfg  string
			tail float64
		}{{"net", 1}, {"auto", 1.5}, {"et", 1.1}} {
			cfg, tail := x.cfg, x.tail
			add(quota.cell, cfg, round, map[string]float64{"ns/op": 70e3, "p99.9-ns": 1e6 * tail / drift * noise(),
				"max-ns": 30e6 * tail, "throttled-ns": 3e8 * tail * noise(), "throttled-periods": 10, "quota-periods": 30, "client-cpu-ns/op": 20e3})
		}
	}
	tb.idle = []idleRow{{cfg: "net", conns: 10000, perConn: 7.7 * 1024}, {cfg: "auto", conns: 10000, perConn: 7.9 * 1024},
		{cfg: "gnet", conns: 10000, perConn: 0.5 * 1024}}
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
	if len(vs) != 3 {
		t.Fatalf("%d cells judged, want 3", len(vs))
	}
	one, fifty, quota := vs[0], vs[1], vs[2]
	check := func(v cellVerdict, cfg string, c *comparison, want string) {
		t.Helper()
		if got := word(c, v.measure); got != want {
			t.Errorf("%s %s on %s: %s (%s), want %s", v.cp.short(), cfg, v.measure.name, got, compact(c, v.measure), want)
		}
	}
	if one.measure != byThroughput || fifty.measure != byCPU || quota.measure != byThrottling {
		t.Errorf("measures %s, %s, %s; want req/s (server-bound), CPU/req (client at 97%%), throttled (quota)", one.measure.name, fifty.measure.name, quota.measure.name)
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
	if r := one.row("c"); !r.missing || r.vsNet != nil {
		t.Errorf("c: missing %v, vsNet %v; want missing with no comparison", r.missing, r.vsNet)
	}
	if !strings.Contains(fifty.why, "load generator is saturated (97%") {
		t.Errorf("50 conns: why %q", fifty.why)
	}

	blocks := summaryBlocks(tb, vs)
	text := writeSummary(tb, blocks, nil)
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
		`(?m)^  herd .* not judged`,
		`Against package net, the default wins in 2 \(echo, 1 conn; echo, 50 conns\), loses in 1 \(echo, 1 conn, quota 0\.5\)\.`,
		`(?m)^  c +0 +missing$`,
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
