package main

import (
	"math"
	"strings"
	"testing"
)

// TestUTest checks the exact Mann-Whitney U p-values against known ones:
// two fully separated samples of 6 give 2/924, as benchstat reports
// (p=0.002); identical samples give 1; 3 against 3 cannot go below 0.1.
func TestUTest(t *testing.T) {
	a := []float64{1, 2, 3, 4, 5, 6}
	b := []float64{7, 8, 9, 10, 11, 12}
	if p := utest(a, b); math.Abs(p-2.0/924) > 1e-12 {
		t.Errorf("separated 6 vs 6: p = %v, want %v", p, 2.0/924)
	}
	if p := utest(b, a); math.Abs(p-2.0/924) > 1e-12 {
		t.Errorf("separated, reversed: p = %v", p)
	}
	if p := utest(a, a); p != 1 {
		t.Errorf("identical: p = %v, want 1", p)
	}
	if p := utest(a[:3], b[:3]); math.Abs(p-0.1) > 1e-12 {
		t.Errorf("separated 3 vs 3: p = %v, want 0.1", p)
	}
	// Interleaved: 1 3 5 7 9 11 against 2 4 6 8 10 12 is no difference.
	if p := utest([]float64{1, 3, 5, 7, 9, 11}, []float64{2, 4, 6, 8, 10, 12}); p < 0.5 {
		t.Errorf("interleaved: p = %v, want large", p)
	}
	if p := utest(nil, b); p != 1 {
		t.Errorf("empty: p = %v, want 1", p)
	}
}

// TestSummary builds a summary from fixed results: ratios to net and to
// the best peer with significance, a configuration that failed every round
// shown as missing (never as zero), a missing metric as missing, and no
// line wider than summaryWidth.
func TestSummary(t *testing.T) {
	var rs []result
	add := func(cfg string, nsop float64, withSys bool) {
		m := map[string]float64{"ns/op": nsop, "p50-ns": nsop * 0.9, "p99-ns": nsop * 3, "server-cpu-ns/op": nsop / 2}
		if withSys {
			m["syscalls/op"] = 4
		}
		rs = append(rs, result{labels: map[string]string{"cfg": cfg, "conns": "1", "size": "64"}, metrics: m})
	}
	for i := range 6 {
		d := float64(i)
		add("net", 20000+d, true)
		add("et", 19000+d, false) // faster than net, syscalls missing
		add("gnet", 15000+d, true)
		add("c", 18000+d*1000, true) // wide: not clearly apart from gnet
	}
	srvs, err := pickServers([]string{"net", "et", "auto", "gnet", "c"}) // auto: failed every round
	if err != nil {
		t.Fatal(err)
	}
	sums := summarize(rs, srvs, []cell{{conns: 1, size: 64}})
	var b strings.Builder
	writeSummary(&b, sums)
	out := b.String()
	t.Log("\n" + out)
	row := func(cfg string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == cfg {
				return l
			}
		}
		t.Fatalf("no line for %s in\n%s", cfg, out)
		return ""
	}
	if !strings.Contains(out, "best peer gnet") {
		t.Errorf("best peer is not gnet")
	}
	if f := strings.Fields(row("et")); f[len(f)-2] != "1.05x*" || f[len(f)-3] != "missing" {
		t.Errorf("et: want 1.05x* vs net and syscalls missing, got %q", row("et"))
	}
	if f := strings.Fields(row("gnet")); f[len(f)-1] != "—" || f[len(f)-2] != "1.33x*" {
		t.Errorf("gnet: want 1.33x* vs net and — vs itself, got %q", row("gnet"))
	}
	if f := strings.Fields(row("net")); f[len(f)-2] != "—" || f[len(f)-1] != "0.75x*" {
		t.Errorf("net: want — and 0.75x* vs gnet, got %q", row("net"))
	}
	if l := row("auto"); !strings.Contains(l, "missing") || strings.Contains(l, " 0 req") || strings.Contains(l, "0.0") {
		t.Errorf("auto failed every round: want missing, got %q", l)
	}
	if w := wideLines(out, summaryWidth); len(w) > 0 {
		t.Errorf("lines over %d columns: %q", summaryWidth, w)
	}
	if !strings.Contains(out, "most req/s: gnet") {
		t.Errorf("no leader line")
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
