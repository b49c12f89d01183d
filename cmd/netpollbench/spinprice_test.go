package main

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestSpinPrice judges three open-loop cells of 6 rounds on a drifting
// host (±25% a round, shared by the round; 2% noise each) by the rule of
// spinprice.go: auto at 1.02x et's CPU per request (pays its way), at
// 1.3x with a p50 0.6x et's (buys latency), and at 1.3x with the same p50
// (overspends); and the verdict says each beside its rate.
func TestSpinPrice(t *testing.T) {
	srvs, err := pickServers([]string{"net", "et", "auto"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rate     float64
		cpu, p50 float64 // auto's over et's
		want     string
	}{
		{2000, 1.02, 1.0, spinPays},
		{5000, 1.3, 0.6, spinBuys},
		{10000, 1.3, 1.0, spinOverpays},
	}
	tb := &table{plan: &plan{}}
	rng := rand.New(rand.NewPCG(5, 5))
	noise := func() float64 { return 1 + 0.02*rng.NormFloat64() }
	for _, tt := range tests {
		cp := &cellPlan{cell: cell{conns: 1, size: 64, rate: tt.rate}, srvs: srvs, rounds: 6, file: sweepFile}
		tb.plan.cells = append(tb.plan.cells, cp)
		for round := 1; round <= 6; round++ {
			drift := 0.75 + 0.5*rng.Float64()
			for _, cfg := range []string{"net", "et", "auto"} {
				cpu, p50 := 40e3*drift, 100e3*drift
				if cfg == "auto" {
					cpu, p50 = cpu*tt.cpu, p50*tt.p50
				}
				addResult(tb, cp, cfg, round, map[string]float64{"ns/op": 1e9 / tt.rate, "server-cpu-ns/op": cpu * noise(), "p50-ns": p50 * noise()})
			}
		}
	}
	vs := judge(tb, 2)
	for i, tt := range tests {
		if vs[i].spin == nil {
			t.Fatalf("%g req/s: no spin price judged", tt.rate)
		}
		if got := vs[i].spin.word(); got != tt.want {
			t.Errorf("%g req/s: %s, want %s", tt.rate, vs[i].spin, tt.want)
		}
	}
	text := writeSummary(tb, summaryBlocks(tb, vs), nil, nil)
	t.Log("\n" + text)
	for _, tt := range tests {
		if want := strconv.FormatFloat(tt.rate, 'f', -1, 64) + " req/s CPU/req "; !strings.Contains(text, want) {
			t.Errorf("the verdict lacks %q", want)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(text), " "), ": "+spinOverpays+".") {
		t.Errorf("the verdict's spinning note does not end with the last cell's word")
	}
	// A closed-loop cell has no spin price.
	if v := judge(syntheticTable(t), 2); v[0].spin != nil {
		t.Errorf("a closed-loop cell was judged for spinning: %s", v[0].spin)
	}
}
