package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/aclements/go-moremath/stats"
)

// driftingRounds simulates 6 rounds on a drifting host: round r has a
// drift factor in [0.7, 1.3] shared by both configurations, and each
// figure has its own normal noise of sd 1.5%. x is effect times base.
func driftingRounds(rng *rand.Rand, effect float64) (xs, base []float64) {
	const rounds, rate, noise = 6, 100000.0, 0.015
	for range rounds {
		d := 0.7 + 0.6*rng.Float64()
		base = append(base, rate*d*(1+noise*rng.NormFloat64()))
		xs = append(xs, effect*rate*d*(1+noise*rng.NormFloat64()))
	}
	return xs, base
}

func TestPairedDetectsWhatUnpairedMisses(t *testing.T) {
	const trials = 1000
	rng := rand.New(rand.NewPCG(1, 2))
	rate := func(k int) float64 { return float64(k) / trials }

	var wins, unpaired, covered int
	for range trials {
		c := compare(driftingRounds(rng, 1.05))
		if c.verdict(true) == verdictWins {
			wins++
		}
		if c.pUnpaired < 0.05 {
			unpaired++
		}
		if c.lo <= 1.05 && 1.05 <= c.hi {
			covered++
		}
	}
	t.Logf("effect 1.05, %d trials of 6 rounds: paired verdict wins %.1f%%, Mann-Whitney p<0.05 %.1f%%, interval covers 1.05 %.1f%%",
		trials, 100*rate(wins), 100*rate(unpaired), 100*rate(covered))
	if rate(wins) < 0.90 {
		t.Errorf("paired verdict wins in %.1f%% of trials, want >= 90%%", 100*rate(wins))
	}
	if rate(unpaired) > 0.20 {
		t.Errorf("Mann-Whitney p < 0.05 in %.1f%% of trials, want <= 20%%", 100*rate(unpaired))
	}
	if rate(covered) < 0.90 {
		t.Errorf("interval covers the true 1.05 in %.1f%% of trials, want >= 90%%", 100*rate(covered))
	}

	var decided, level int
	for range trials {
		switch compare(driftingRounds(rng, 1.00)).verdict(true) {
		case verdictWins, verdictLoses:
			decided++
		case verdictLevel:
			level++
		}
	}
	t.Logf("effect 1.00, %d trials of 6 rounds: paired verdict wins or loses %.1f%%, level %.1f%%",
		trials, 100*rate(decided), 100*rate(level))
	if rate(decided) > 0.08 {
		t.Errorf("null effect: wins or loses in %.1f%% of trials, want <= 8%%", 100*rate(decided))
	}
	if rate(level) < 0.80 {
		t.Errorf("null effect: level in %.1f%% of trials, want >= 80%%", 100*rate(level))
	}
}

func TestPairedVerdict(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name           string
		c              comparison
		higherIsBetter bool
		want           string
		interval       string
	}{
		{"higher/wins", comparison{n: 6, geo: 1.06, lo: 1.02, hi: 1.10}, true, verdictWins, "1.06x [1.02,1.10]"},
		{"higher/loses", comparison{n: 6, geo: 0.94, lo: 0.90, hi: 0.98}, true, verdictLoses, "0.94x [0.90,0.98]"},
		{"lower/wins", comparison{n: 6, geo: 0.94, lo: 0.90, hi: 0.98}, false, verdictWins, "0.94x [0.90,0.98]"},
		{"lower/loses", comparison{n: 6, geo: 1.06, lo: 1.02, hi: 1.10}, false, verdictLoses, "1.06x [1.02,1.10]"},
		{"higher/level-excluding-1", comparison{n: 6, geo: 1.02, lo: 1.01, hi: 1.04}, true, verdictLevel, "1.02x [1.01,1.04]"},
		{"lower/level-excluding-1", comparison{n: 6, geo: 0.97, lo: 0.96, hi: 0.99}, false, verdictLevel, "0.97x [0.96,0.99]"},
		{"higher/level-straddling-1", comparison{n: 6, geo: 1, lo: 0.97, hi: 1.03}, true, verdictLevel, "1.00x [0.97,1.03]"},
		{"higher/level-band-edges", comparison{n: 6, geo: 1, lo: levelLo, hi: levelHi}, true, verdictLevel, "1.00x [0.95,1.05]"},
		{"higher/unresolved", comparison{n: 6, geo: 1, lo: 0.93, hi: 1.08}, true, verdictUnresolved, "1.00x [0.93,1.08]"},
		{"lower/unresolved", comparison{n: 6, geo: 1, lo: 0.93, hi: 1.08}, false, verdictUnresolved, "1.00x [0.93,1.08]"},
		{"higher/wide", comparison{n: 2, geo: 2.74, lo: 0.0001, hi: 1.32e8}, true, verdictUnresolved, "2.74x [0.00,>999]"},
		{"higher/wide-past-10", comparison{n: 3, geo: 12.5, lo: 11.04, hi: 999}, true, verdictWins, "12.50x [11,999]"},
		{"higher/n=1", comparison{n: 1, geo: 1.5, lo: nan, hi: nan}, true, verdictUnresolved, "n/a"},
		{"lower/n=0", comparison{lo: nan, hi: nan}, false, verdictUnresolved, "n/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.verdict(tt.higherIsBetter); got != tt.want {
				t.Errorf("verdict(%v) of [%v, %v] = %q, want %q", tt.higherIsBetter, tt.c.lo, tt.c.hi, got, tt.want)
			}
			if got := tt.c.interval(); got != tt.interval {
				t.Errorf("interval() = %q, want %q", got, tt.interval)
			}
		})
	}
}

func TestPairedHoles(t *testing.T) {
	nan := math.NaN()
	xs := []float64{110, nan, 120, 0, 130, 140, 150}
	base := []float64{100, 95, nan, 105, 102, -1, 98}
	c := compare(xs, base)

	if c.n != 3 {
		t.Errorf("n = %d, want 3 (rounds 0, 4 and 6)", c.n)
	}
	if want := []float64{110.0 / 100, 130.0 / 102, 150.0 / 98}; !slices.Equal(c.ratios, want) {
		t.Errorf("ratios = %v, want %v", c.ratios, want)
	}
	// The unpaired samples keep every positive round of their side.
	u, err := stats.MannWhitneyUTest([]float64{110, 120, 130, 140, 150}, []float64{100, 95, 105, 102, 98}, stats.LocationDiffers)
	if err != nil {
		t.Fatal(err)
	}
	if c.pUnpaired != u.P {
		t.Errorf("pUnpaired = %v, want %v (all positive rounds of each side)", c.pUnpaired, u.P)
	}
	shared, err := stats.MannWhitneyUTest([]float64{110, 130, 150}, []float64{100, 102, 98}, stats.LocationDiffers)
	if err != nil {
		t.Fatal(err)
	}
	if c.pUnpaired == shared.P {
		t.Errorf("pUnpaired = %v, the p of the shared rounds only", c.pUnpaired)
	}
	if math.IsNaN(c.lo) || math.IsNaN(c.hi) || math.IsNaN(c.pPaired) {
		t.Errorf("3 shared rounds: lo, hi, pPaired = %v, %v, %v, want numbers", c.lo, c.hi, c.pPaired)
	}

	// One shared round: no interval.
	c = compare([]float64{110, nan}, []float64{100, 100})
	if c.n != 1 || !math.IsNaN(c.lo) || !math.IsNaN(c.hi) || c.verdict(true) != verdictUnresolved {
		t.Errorf("one shared round: n=%d lo=%v hi=%v verdict %q, want 1, NaN, NaN, %q",
			c.n, c.lo, c.hi, c.verdict(true), verdictUnresolved)
	}
}

func TestPairedMedianInterval(t *testing.T) {
	xs := []float64{103, 98, 110, 101, 107, 104}
	base := []float64{100, 100, 100, 100, 100, 100}
	c := compare(xs, base)

	lo, hi := slices.Min(c.ratios), slices.Max(c.ratios)
	if c.medLo != lo || c.medHi != hi {
		t.Errorf("median interval = [%v, %v], want min..max [%v, %v]", c.medLo, c.medHi, lo, hi)
	}
	if math.Abs(c.medConf-0.969) > 0.001 {
		t.Errorf("medConf = %v, want about 0.969 (1 - 2/64)", c.medConf)
	}
	if want := (1.03 + 1.04) / 2; math.Abs(c.median-want) > 1e-12 {
		t.Errorf("median = %v, want %v", c.median, want)
	}
}

func TestPairedSignTest(t *testing.T) {
	base := []float64{100, 100, 100, 100, 100, 100}
	c := compare([]float64{101, 102, 103, 104, 105, 106}, base)
	if math.Abs(c.pSign-2.0/64) > 1e-12 {
		t.Errorf("6 of 6 above 1: pSign = %v, want 2*(1/64) = 0.03125", c.pSign)
	}
	c = compare([]float64{99, 98, 97, 96, 95, 94}, base)
	if math.Abs(c.pSign-2.0/64) > 1e-12 {
		t.Errorf("6 of 6 below 1: pSign = %v, want 0.03125", c.pSign)
	}
	// A ratio equal to 1 is dropped: 5 of 5 above.
	c = compare([]float64{101, 102, 100, 104, 105, 106}, base)
	if math.Abs(c.pSign-2.0/32) > 1e-12 {
		t.Errorf("5 of 5 above 1 and one tie: pSign = %v, want 2*(1/32) = 0.0625", c.pSign)
	}
}
