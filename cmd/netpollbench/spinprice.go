package main

import (
	"fmt"
	"math"
)

// The price of spinning in an open loop (issue 21, part 3). At a light
// offered load the default's spinning can only buy latency with CPU, so
// each open-loop cell also judges the default (auto) against the same
// server that never spins (spinNever) by one rule: its CPU per request is
// at most spinCPUAllow times spinNever's unless its median latency is at
// least 1-spinP50Gain lower, both read from the paired 95% intervals
// (paired.go) over the cell's rounds.

const (
	spinCPUAllow = 1.1 // the CPU per request spinning may add, as a ratio
	spinP50Gain  = 0.8 // the p50 ratio that pays for more
)

// The rule's words.
const (
	spinPays      = "pays its way" // CPU within spinCPUAllow
	spinBuys      = "buys latency" // p50 lower by spinP50Gain or more
	spinOverpays  = "overspends"   // neither, with both intervals past the bounds
	spinUndecided = "unresolved"
)

// spinPrice is the default against spinNever in one open-loop cell.
type spinPrice struct {
	cpu, p50 comparison // x = the default, base = spinNever, paired by round
}

// newSpinPrice compares the default's series with spinNever's (cfg ->
// unit -> by round); nil when the cell lacks either.
func newSpinPrice(series map[string]map[string][]float64) *spinPrice {
	def, never := series[defaultCfg], series[spinNever]
	if def == nil || never == nil {
		return nil
	}
	return &spinPrice{cpu: compare(def["server-cpu-ns/op"], never["server-cpu-ns/op"]),
		p50: compare(def["p50-ns"], never["p50-ns"])}
}

// word applies the rule: shown when an interval lies within its bound,
// refuted when both lie past theirs.
func (s *spinPrice) word() string {
	ok := func(c comparison) bool { return c.n >= 2 && !math.IsNaN(c.hi) }
	switch {
	case ok(s.cpu) && s.cpu.hi <= spinCPUAllow:
		return spinPays
	case ok(s.p50) && s.p50.hi <= spinP50Gain:
		return spinBuys
	case ok(s.cpu) && ok(s.p50) && s.cpu.lo > spinCPUAllow && s.p50.lo > spinP50Gain:
		return spinOverpays
	}
	return spinUndecided
}

// String is the judgment for a report line.
func (s *spinPrice) String() string {
	return fmt.Sprintf("CPU/req %s, p50 %s: %s", s.cpu.interval(), s.p50.interval(), s.word())
}

// spinRule is the rule for a report's footnote.
var spinRule = fmt.Sprintf("%s against %s (never spins), paired: it pays its way if the 95%% interval of its CPU per request "+
	"lies under %.1fx, buys latency if that of its p50 lies under %.1fx, overspends if both lie above", defaultCfg, spinNever, spinCPUAllow, spinP50Gain)
