package main

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Range and precision of latency.
const (
	latencyMin    = time.Microsecond // resolution of the smallest values
	latencyMax    = time.Minute
	latencyDigits = 3 // significant decimal digits kept
)

// latency is a histogram of request latencies: an HDR histogram of
// nanoseconds, from 1µs to 60s to 3 significant digits. Each connection
// fills its own, and the run merges them. It is not safe for concurrent use.
type latency struct {
	h *hdrhistogram.Histogram
}

func newLatency() *latency {
	return &latency{h: hdrhistogram.New(int64(latencyMin), int64(latencyMax), latencyDigits)}
}

// record adds d, clamped to [0, 60s] so that nothing is dropped.
func (l *latency) record(d time.Duration) {
	d = min(max(d, 0), latencyMax)
	if err := l.h.RecordValue(int64(d)); err != nil {
		panic("loadgen: latency histogram rejected a clamped value: " + err.Error())
	}
}

// merge adds the values of o.
func (l *latency) merge(o *latency) {
	if dropped := l.h.Merge(o.h); dropped != 0 {
		panic("loadgen: latency histograms of the same range dropped values in a merge")
	}
}

func (l *latency) count() int64 { return l.h.TotalCount() }

// percentile returns the value below or at which p percent of the values
// lie, 0 if there are none.
func (l *latency) percentile(p float64) time.Duration {
	if l.h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(l.h.ValueAtPercentile(p))
}

func (l *latency) max() time.Duration {
	if l.h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(l.h.Max())
}

func (l *latency) mean() time.Duration { return time.Duration(l.h.Mean()) }
