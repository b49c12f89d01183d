package main

// Paired comparison of two configurations over rounds.
//
// Every round measures every configuration once, in a random order, and
// the host drifts by 15-30% from one round to the next. The drift is
// shared by all configurations of a round, so the within-round ratio
// x/base cancels it, while the pooled per-configuration samples that an
// unpaired test (benchstat's Mann-Whitney U) compares keep it as noise.
// Everything here is therefore computed on the per-round ratios.
//
// The verdict, the definition the report cites, reads the 95% interval
// [lo, hi] of the ratio x/base:
//
//   - level: the interval lies within [0.95, 1.05]. This is an
//     equivalence call: the data bound the difference to under 5% either
//     way, even when the interval excludes 1.0.
//   - wins: otherwise, the interval excludes 1.0 on the better side
//     (lo > 1 when higher is better, hi < 1 when lower is better).
//   - loses: otherwise, the interval excludes 1.0 on the worse side.
//   - unresolved: anything else, including fewer than 2 shared rounds.
//
// The interval is exp of the Student t-interval (n-1 degrees of freedom)
// of the mean log ratio, around the geometric mean ratio. It assumes the
// per-round noise is roughly log-normal, which the paired ratio makes
// plausible: the drift, the large and skewed part, cancels, and what is
// left is the product of two small measurement errors. The
// order-statistics interval of the median ratio assumes nothing, but
// with the 6 rounds we run it is min..max at 96.9% confidence (and
// unbounded below 6 rounds), far too wide to decide anything; it is
// reported beside the verdict, never used for it.

import (
	"fmt"
	"math"
	"slices"

	"github.com/aclements/go-moremath/stats"
)

// comparison is a configuration x against a base configuration over the
// rounds both were measured in.
type comparison struct {
	n            int       // rounds with both figures (positive, not NaN)
	ratios       []float64 // per round, x/base, in round order
	median       float64   // median of ratios
	geo          float64   // exp(mean of log ratios): the point estimate the interval is around
	lo, hi       float64   // 95% interval of the ratio: exp(t-interval of the mean log ratio, n-1 dof); NaN when n < 2
	medLo, medHi float64   // order-statistics interval of the median ratio (QuantileCI at 95%); ±Inf when n < 6
	medConf      float64   // that interval's actual confidence (0.969 at n=6)
	pPaired      float64   // two-sided p of the one-sample t-test of the log ratios against 0; NaN when undefined
	pSign        float64   // two-sided exact sign test p (ratios equal to 1 dropped)
	pUnpaired    float64   // two-sided Mann-Whitney U p of all positive rounds of each, as benchstat tests them
	// oneSample marks a cell of one sample per configuration (the idle
	// cell): its verdict is from the ratio alone, level within [levelLo,
	// levelHi], with no interval.
	oneSample bool
}

// Verdict words, for everyone: see the top of this file.
const (
	verdictWins       = "wins"
	verdictLoses      = "loses"
	verdictLevel      = "level"
	verdictUnresolved = "unresolved"
)

// levelLo and levelHi bound the band of ratios called level.
const (
	levelLo = 0.95
	levelHi = 1.05
)

// pairedConfidence is the level of every interval of a comparison.
const pairedConfidence = 0.95

// compare pairs xs and base by index: round i is xs[i], base[i]; NaN or
// <= 0 means not measured in that round. Rounds missing on either side
// are left out of the pairing but stay in the unpaired samples.
func compare(xs, base []float64) comparison {
	nan := math.NaN()
	c := comparison{median: nan, geo: nan, lo: nan, hi: nan, medLo: nan, medHi: nan,
		medConf: nan, pPaired: nan, pSign: nan, pUnpaired: nan}
	ok := func(v float64) bool { return v > 0 } // false for NaN too
	var logs []float64
	for i := range min(len(xs), len(base)) {
		if ok(xs[i]) && ok(base[i]) {
			c.ratios = append(c.ratios, xs[i]/base[i])
			logs = append(logs, math.Log(xs[i]/base[i]))
		}
	}
	c.n = len(c.ratios)

	notOK := func(v float64) bool { return !ok(v) }
	ux := slices.DeleteFunc(slices.Clone(xs), notOK)
	ub := slices.DeleteFunc(slices.Clone(base), notOK)
	if u, err := stats.MannWhitneyUTest(ux, ub, stats.LocationDiffers); err == nil {
		c.pUnpaired = u.P
	}
	if c.n == 0 {
		return c
	}

	mean, lo, hi := stats.MeanCI(logs, pairedConfidence)
	c.geo = math.Exp(mean)
	if c.n >= 2 {
		c.lo, c.hi = math.Exp(lo), math.Exp(hi)
	}
	// The t-test is undefined when every round gave the same ratio.
	if t, err := stats.OneSampleTTest(stats.Sample{Xs: logs}, 0, stats.LocationDiffers); err == nil {
		c.pPaired = t.P
	}

	qci := stats.QuantileCI(c.n, 0.5, pairedConfidence)
	c.median, c.medLo, c.medHi = qci.SampleCI(stats.Sample{Xs: c.ratios})
	c.medConf = qci.Confidence

	// Sign test: under the null, each ratio not equal to 1 is above 1
	// with probability 1/2.
	above, trials := 0, 0
	for _, r := range c.ratios {
		if r != 1 {
			trials++
		}
		if r > 1 {
			above++
		}
	}
	b := stats.BinomialDist{N: trials, P: 0.5}
	tail := min(b.CDF(float64(above)), 1-b.CDF(float64(above-1)))
	c.pSign = min(1, 2*tail)
	return c
}

// verdict is one of the verdict words for x against base, by the rule at
// the top of this file; higherIsBetter says which side of 1.0 is better.
func (c comparison) verdict(higherIsBetter bool) string {
	if c.oneSample && c.n == 1 {
		better, worse := c.geo > levelHi, c.geo < levelLo
		if !higherIsBetter {
			better, worse = worse, better
		}
		switch {
		case better:
			return verdictWins
		case worse:
			return verdictLoses
		}
		return verdictLevel
	}
	if c.n < 2 || math.IsNaN(c.lo) || math.IsNaN(c.hi) {
		return verdictUnresolved
	}
	better, worse := c.lo > 1, c.hi < 1
	if !higherIsBetter {
		better, worse = worse, better
	}
	switch {
	case c.lo >= levelLo && c.hi <= levelHi:
		return verdictLevel
	case better:
		return verdictWins
	case worse:
		return verdictLoses
	}
	return verdictUnresolved
}

// interval formats the point estimate and the paired interval of the
// ratio, as "1.05x [1.02,1.08]", or "n/a" with fewer than 2 rounds; a
// one-sample ratio as "1.05x (1 sample)".
func (c comparison) interval() string {
	if c.oneSample && c.n == 1 {
		return fmt.Sprintf("%.2fx (1 sample)", c.geo)
	}
	if c.n < 2 || math.IsNaN(c.lo) {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx [%s,%s]", c.geo, bound(c.lo), bound(c.hi))
}

// bound is an interval's bound: two decimals, three digits past 10, and
// ">999" past that: a run of two or three rounds can give a t-interval
// wider than any ratio means, and its digits would push the summary's
// lines past their width.
func bound(v float64) string {
	if v > 999 {
		return ">999"
	}
	if v >= 10 {
		return fmt.Sprintf("%.3g", v)
	}
	return fmt.Sprintf("%.2f", v)
}
