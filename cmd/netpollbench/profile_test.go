package main

import (
	"strings"
	"testing"
)

// profileTable is a run of 6 rounds judged in TestProfileBlock: echo at 1
// connection, where rt-profile serves 1.3x the req/s of rt-none and net
// (1% noise); the quota cell, where rt-none and rt-profile are throttled
// about 1.4x as long as net, ±20% from one round to the next (so each
// loses to net with an interval wider than ±10%), and rt-profile level
// with rt-none; the net/http idle cell, one sample each, rt-profile at
// 0.6x the memory per connection of rt-none and of net; the blocked
// neighbour and the open loop at 2,000 req/s, where all three are alike
// (level); and echo at 50 connections without the runtime's rows, which
// the block leaves out.
func profileTable(t *testing.T) (*table, []cellVerdict) {
	t.Helper()
	rows := mustServers(t, "net", "rt-none", profileCfg)
	one := &cellPlan{cell: cell{conns: 1, size: 64}, srvs: rows, rounds: 6, warmup: 150e6, duration: 400e6, file: rawFile}
	quota := &cellPlan{cell: cell{conns: 1, size: 64, quota: 0.5}, srvs: rows, rounds: 6, warmup: 500e6, duration: 2e9, file: quotaFile}
	idle := &cellPlan{cell: cell{kind: kindIdle, proto: "http", conns: 18000}, srvs: rows, rounds: 1, file: idleFile}
	fifty := &cellPlan{cell: cell{conns: 50, size: 64}, srvs: mustServers(t, "net", "auto"), rounds: 6, file: rawFile}
	neighbour := &cellPlan{cell: cell{conns: 2, size: 64, blocked: 1, delay: neighbourDelay, unpinned: true}, srvs: rows, rounds: 6,
		warmup: 150e6, duration: 400e6, file: neighbourFile}
	open := &cellPlan{cell: cell{conns: 1, size: 64, rate: 2000}, srvs: rows, rounds: 6, warmup: 150e6, duration: 400e6, file: sweepFile, sweep: true}
	tb := &table{plan: &plan{cells: []*cellPlan{one, quota, idle, fifty, neighbour, open}}}
	for round := 1; round <= 6; round++ {
		drift := 1 + 0.1*float64(round%3)
		noise := 1 + 0.01*float64(round%2)
		swing := 1 + 0.2*float64(2*(round%2)-1) // ±20%, alternating
		for _, x := range []struct {
			cfg           string
			speed, thrott float64
		}{{"net", 1, 1}, {"rt-none", 1, 1.4 * swing}, {profileCfg, 1.3 * noise, 1.4 * swing * noise}} {
			nsop := 40e3 / (drift * x.speed)
			addResult(tb, one, x.cfg, round, map[string]float64{"ns/op": nsop, "server-cpu-ns/op": nsop * 0.8, "client-cpu-ns/op": nsop * 0.6})
			addResult(tb, quota, x.cfg, round, map[string]float64{"ns/op": 70e3, "p50-ns": 30e3, "p99.9-ns": 1e6, "max-ns": 30e6,
				"throttled-ns": 3e8 * x.thrott * drift, "throttled-periods": 10, "quota-periods": 30, "client-cpu-ns/op": 20e3})
			addResult(tb, neighbour, x.cfg, round, map[string]float64{"ns/op": 30e3 / drift, "p50-ns": 27e3, "p99-ns": 60e3 * drift, "max-ns": 2.5e6,
				"server-cpu-ns/op": 24e3, "client-cpu-ns/op": 15e3, "blocked-requests": 150})
			addResult(tb, open, x.cfg, round, map[string]float64{"ns/op": 500e3, "p50-ns": 30e3 * drift, "p99-ns": 60e3, "server-cpu-ns/op": 20e3 * drift,
				"client-cpu-ns/op": 10e3, "syscalls/op": 4})
		}
		for _, cfg := range []string{"net", "auto"} {
			addResult(tb, fifty, cfg, round, map[string]float64{"ns/op": 8e3 / drift, "server-cpu-ns/op": 6e3, "client-cpu-ns/op": 4e3})
		}
	}
	for cfg, kib := range map[string]float64{"net": 10, "rt-none": 10, profileCfg: 6} {
		addResult(tb, idle, cfg, 1, map[string]float64{"rss-bytes/conn": kib * 1024, "rss-1conn-bytes": 5 << 20, "rss-bytes": 5<<20 + 18000*kib*1024,
			"rss-burst-bytes/conn": kib * 1024, "slab-bytes/conn": 8 * 1024, "unsettled-readings": 0})
	}
	return tb, judge(tb, 2)
}

// TestProfileBlock: the profile's block has a row per cell with
// rt-profile, none for a cell without it, each with its paired ratio to
// rt-none and to net and their words; it counts the words against each,
// says the target is not met and where (the quota cell, once, though it
// loses there to net alone), that rt-none itself loses to net there, and
// that the quota cell's intervals are wider than ±10%, naming the quota
// cell's flags to rerun it with; the summary puts the block right after
// the verdict, within summaryWidth columns.
func TestProfileBlock(t *testing.T) {
	tb, vs := profileTable(t)
	b := profileBlock(vs)
	if b == nil {
		t.Fatal("no profile block")
	}
	want := map[string][2]string{ // cell -> the words vs rt-none and vs net
		"echo, 1 conn":                {verdictWins, verdictWins},
		"echo, 1 conn, quota 0.5":     {verdictLevel, verdictLoses},
		"idle http, 18000 conns":      {verdictWins, verdictWins},
		"blocked neighbour, unpinned": {verdictLevel, verdictLevel},
		"open loop 2000/s":            {verdictLevel, verdictLevel},
	}
	if len(b.rows) != len(want) {
		t.Errorf("%d rows, want %d: %q", len(b.rows), len(want), b.rows)
	}
	for _, r := range b.rows {
		w, ok := want[r[0]]
		if !ok {
			t.Errorf("row for the cell %q", r[0])
			continue
		}
		if !strings.HasSuffix(r[3], " "+w[0]) || !strings.HasSuffix(r[4], " "+w[1]) {
			t.Errorf("%s: vs rt-none %q, vs net %q; want %s, %s", r[0], r[3], r[4], w[0], w[1])
		}
	}
	if !strings.HasPrefix(b.rows[0][3], "1.31x [1.30,1.31]") {
		t.Errorf("echo, 1 conn: vs rt-none %q, want the paired ratio 1.31x [1.30,1.31]", b.rows[0][3])
	}
	notes := strings.Join(b.notes, "\n")
	for _, w := range []string{
		"GODEBUG=" + rtProfile,
		"Against rt-none, the profile wins in 2 (echo, 1 conn; idle http, 18000 conns), level in 3 (echo, 1 conn, quota 0.5; " +
			"blocked neighbour, unpinned; open loop 2000/s).",
		"Against package net, the profile wins in 2 (echo, 1 conn; idle http, 18000 conns), level in 2 (blocked neighbour, unpinned; " +
			"open loop 2000/s), loses in 1 (echo, 1 conn, quota 0.5).",
		"TARGET NOT MET: the profile loses in 1 (echo, 1 conn, quota 0.5).",
		"rt-none itself loses to net in 1 (echo, 1 conn, quota 0.5)",
		"Needs more rounds before it is judged (an interval wider than ±10%): echo, 1 conn, quota 0.5 (vs net ",
		"-quota-rounds 12 -quota-duration 4s",
	} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
	if strings.Contains(notes, "echo, 1 conn (vs") {
		t.Errorf("echo, 1 conn, with a narrow interval, is said to need more rounds:\n%s", notes)
	}
	text := writeSummary(tb, summaryBlocks(tb, vs), nil, nil)
	iv, ip := strings.Index(text, "Verdict: "), strings.Index(text, "The runtime's profile (rt-profile)")
	if iv < 0 || ip < iv || strings.Contains(text[iv:ip], "\n\n\n") {
		t.Errorf("the profile's block is not right after the verdict (at %d, the verdict at %d)", ip, iv)
	}
	if wide := wideLines(text, summaryWidth); len(wide) > 0 {
		t.Errorf("summary lines wider than %d columns:\n%s", summaryWidth, strings.Join(wide, "\n"))
	}
}

// TestProfileBlockTargetMet: the same run without the quota cell meets
// the target; a run without rt-profile has no block.
func TestProfileBlockTargetMet(t *testing.T) {
	_, vs := profileTable(t)
	var kept, fifty []cellVerdict
	for _, v := range vs {
		switch {
		case v.cp.conns == 50:
			fifty = append(fifty, v)
		case v.cp.quota == 0:
			kept = append(kept, v)
		}
	}
	b := profileBlock(kept)
	if b == nil || !strings.Contains(strings.Join(b.notes, "\n"), "Target met: the profile loses in no cell.") ||
		strings.Contains(strings.Join(b.notes, "\n"), "Needs more rounds") {
		t.Errorf("without the quota cell: %+v, want the target met and no cell needing more rounds", b)
	}
	if b := profileBlock(fifty); len(fifty) != 1 || b != nil {
		t.Errorf("a run without %s has a profile block: %+v", profileCfg, b)
	}
}
