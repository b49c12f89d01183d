package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestIdle runs an idle cell of 200 connections through the runner, as
// the plan lists it: net, et and the on-demand echo servers (one with an
// idle timeout, which must not close them) and the C reference (a peer,
// when a C compiler is there), next to a server whose binary is not there
// and one that refuses its flags: those two are failures, shown as
// missing, never as zero. The echoservers answer loadgen's memstats
// request; the peer shows — for those figures.
func TestIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds echoserver and loadgen and runs processes; skipped with -short")
	}
	const conns = 200
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // the watchdog
	defer cancel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	srvs := mustServers(t, "net", "et", "ondemand", "ondemand-net", "ondemand-timeout", "c")
	bins, srvs, skipped, err := build(ctx, root, t.TempDir(), srvs, false, false, "", beforeCommit{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) > 0 {
		t.Logf("no peer measured: %s", skipped)
	}
	measured := len(srvs)
	bins["nothere"] = filepath.Join(t.TempDir(), "nothere")
	srvs = append(srvs,
		server{name: "nothere", label: "cfg=nothere", bin: "nothere"},
		server{name: "badflags", label: "cfg=badflags/impl=bogus", bin: "echoserver", args: []string{"-impl", "bogus"}})
	p := &plan{}
	planIdle(p, &options{idle: conns}, srvs)
	if len(p.cells) != 1 || len(p.cells[0].srvs) != len(srvs) {
		t.Fatalf("plan %+v: want one idle cell of every server", p.cells)
	}
	cp := p.cells[0]
	var stderr bytes.Buffer
	r := &runner{bins: bins, stderr: &stderr}
	tb := &table{plan: p}
	if err := r.runPlan(ctx, p, tb); err != nil {
		t.Fatalf("runPlan: %v\n%s", err, stderr.String())
	}
	if len(tb.results) != measured {
		t.Errorf("%d results, want one per server measured (%d)", len(tb.results), measured)
	}
	for _, s := range srvs[:measured] {
		rs := keepResults(tb.results, s.name)
		if len(rs) != 1 {
			t.Errorf("%s: %d results, want 1", s.name, len(rs))
			continue
		}
		checkIdleResult(t, s, rs[0], conns)
	}
	if len(tb.failures) != 2 || !strings.HasPrefix(tb.failures[0], "nothere: ") || !strings.HasPrefix(tb.failures[1], "badflags: ") {
		t.Errorf("failures %q: want one for nothere, one for badflags", tb.failures)
	}
	if len(tb.failures) == 2 && !strings.Contains(tb.failures[1], "-impl") {
		t.Errorf("badflags' failure %q does not pass on the server's complaint", tb.failures[1])
	}
	v := judgeCell(tb, cp, 2)
	table := checkIdleTable(t, v)
	t.Logf("progress:\n%s\ntable:\n%s", stderr.String(), table)
	for _, name := range []string{"nothere", "badflags"} {
		if row := v.row(name); row == nil || !row.missing {
			t.Errorf("%s: row %+v, want missing", name, row)
		}
	}
	if !strings.Contains(table, "1.00x") {
		t.Errorf("no 1.00x for net in:\n%s", table)
	}
	for _, s := range srvs[:measured] {
		f := strings.Fields(tableLine(table, "  "+s.name+" "))
		dashes := strings.Count(strings.Join(f, " "), "—")
		if want := map[bool]int{true: 0, false: 3}[isEchoserver(s)]; len(f) != 13 || dashes != want {
			t.Errorf("%s: table row %q: want 11 columns (RSS in two words), %d of them —", s.name, f, want)
		}
	}
}

// keepResults are the results of configuration cfg.
func keepResults(rs []result, cfg string) []result {
	var out []result
	for _, r := range rs {
		if r.labels["cfg"] == cfg {
			out = append(out, r)
		}
	}
	return out
}

// checkIdleResult checks a measured idle line: its labels, RSS readings,
// and the GC figures an echoserver gives and a peer does not. RSS after
// GC may not grow at 200 connections (the on-demand server's growth is
// within loadgen's settling slack), and the kernel figure is system-wide,
// moved by whatever else runs (other tests), so it is checked for being
// there, not its sign.
func checkIdleResult(t *testing.T, s server, r result, conns int) {
	t.Helper()
	m := r.metrics
	if !strings.HasPrefix(r.line, "BenchmarkIdle/cfg="+s.name+"/") || !strings.Contains(r.line, "/conns=200/size=64\t1\t") ||
		strings.Contains(r.line, "/buf=4096/") != isEchoserver(s) {
		t.Errorf("%s: benchmark line %q", s.name, r.line)
	}
	if m["rss-1conn-bytes"] <= 0 || m["rss-bytes"] <= m["rss-1conn-bytes"] || m["rss-bytes/conn"] <= 0 || m["rss-burst-bytes/conn"] <= 0 {
		t.Errorf("%s: RSS %v -> %v, %v bytes/conn, %v after the burst: want RSS growing", s.name, m["rss-1conn-bytes"], m["rss-bytes"],
			m["rss-bytes/conn"], m["rss-burst-bytes/conn"])
	}
	if _, ok := m["slab-bytes/conn"]; !ok {
		t.Errorf("%s: no kernel figure", s.name)
	}
	gc := []string{"rss-gc-bytes/conn", "heap-live-bytes/conn", "heap-objects/conn", "goroutines/conn", "stack-bytes/conn", "heap-live-burst-bytes/conn"}
	for _, u := range gc {
		if _, ok := m[u]; ok != isEchoserver(s) {
			t.Errorf("%s: %s there %v, want %v", s.name, u, ok, isEchoserver(s))
		}
	}
	if !isEchoserver(s) {
		return
	}
	if m["heap-live-bytes/conn"] <= 0 || m["heap-objects/conn"] <= 0 {
		t.Errorf("%s: heap live %v B, %v objects per conn: want growth", s.name, m["heap-live-bytes/conn"], m["heap-objects/conn"])
	}
	// A goroutine per connection on package net, and on netpoll but for
	// the on-demand servers there, which hold none for an idle one.
	onDemand := s.name == "ondemand" || s.name == "ondemand-timeout"
	if g := m["goroutines/conn"]; onDemand != (g < 0.5) {
		t.Errorf("%s: %.2f goroutines per connection", s.name, g)
	}
}

// TestIdleBlock tabulates an idle cell without net and with a failed
// configuration and one whose readings did not settle: every figure that
// cannot be had says missing or —, and no line is over 120 columns.
func TestIdleBlock(t *testing.T) {
	cp := &cellPlan{cell: cell{kind: kindIdle, conns: 10000, size: 64}, srvs: mustServers(t, "net", "et", "gnet"), rounds: 1, file: idleFile}
	tb := &table{plan: &plan{cells: []*cellPlan{cp}}}
	addResult(tb, cp, "et", 1, map[string]float64{"rss-bytes/conn": 9646, "rss-1conn-bytes": 8 << 20, "rss-bytes": 100 << 20,
		"rss-burst-bytes/conn": 9700, "slab-bytes/conn": 8000, "unsettled-readings": 1})
	addResult(tb, cp, "gnet", 1, map[string]float64{"rss-bytes/conn": 500, "rss-1conn-bytes": 6 << 20, "rss-bytes": 11 << 20,
		"rss-burst-bytes/conn": 500, "slab-bytes/conn": 8000, "unsettled-readings": 0})
	table := checkIdleTable(t, judgeCell(tb, cp, 2))
	et := tableLine(table, "  et ")
	if !strings.Contains(et, "9.42") || !strings.Contains(et, " — ") {
		t.Errorf("et: %q: want 9.42 KiB per conn, the ratio to net —", et)
	}
	if !strings.Contains(table, "et: 1 reading(s) still moving") {
		t.Errorf("no note of et's unsettled reading in:\n%s", table)
	}
	if net := tableLine(table, "  net "); strings.Count(net, "missing") != 9 {
		t.Errorf("net: %q: want its nine figures missing", net)
	}
}

// checkIdleTable writes v's idle block and checks that no line is over
// 120 columns and that each missing row says missing in all its figures.
// It returns the table.
func checkIdleTable(t *testing.T, v cellVerdict) string {
	t.Helper()
	var b strings.Builder
	writeBlock(&b, idleBlock("idle", v))
	table := b.String()
	for _, l := range strings.Split(table, "\n") {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	for _, r := range v.rows {
		if !r.missing {
			continue
		}
		l := tableLine(table, "  "+r.cfg+" ")
		if f := strings.Fields(l); len(f) != 11 || strings.Count(l, "missing") != 9 {
			t.Errorf("missing %s: %q: want its nine figures missing", r.cfg, l)
		}
	}
	return table
}

// TestIdleArgs: echoserver configurations get -buf 4096 unless they set
// -buf, and say so in their labels; peers run as they are.
func TestIdleArgs(t *testing.T) {
	for _, tt := range []struct {
		name  string
		s     server
		args  string
		label string
	}{
		{"echoserver", server{"net", "cfg=net", "echoserver", []string{"-impl", "net"}, nil}, "-impl net -buf 4096", "cfg=net/buf=4096"},
		{"own -buf", server{"n", "cfg=n", "echoserver", []string{"-buf", "65536"}, nil}, "-buf 65536", "cfg=n/buf=65536"},
		{"own -buf=", server{"n", "cfg=n", "echoserver", []string{"-buf=1024"}, nil}, "-buf=1024", "cfg=n/buf=1024"},
		{"peer", server{"gnet", "cfg=gnet", "gnetecho", nil, nil}, "", "cfg=gnet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.s
			args := strings.Join(in.args, " ")
			s := idleArgs(in)
			if strings.Join(s.args, " ") != tt.args || s.label != tt.label {
				t.Errorf("args %q, label %q; want %q, %q", s.args, s.label, tt.args, tt.label)
			}
			if strings.Join(in.args, " ") != args {
				t.Errorf("idleArgs changed the configuration's own flags: %q", in.args)
			}
		})
	}
}

// tableLine returns the table's line that starts with prefix.
func tableLine(table, prefix string) string {
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
