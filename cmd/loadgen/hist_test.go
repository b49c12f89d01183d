package main

import (
	"testing"
	"time"
)

// within reports whether got is want to the histogram's 3 significant digits.
func within(got, want time.Duration) bool {
	diff := got - want
	return -want/1000 <= diff && diff <= want/1000
}

func TestLatency(t *testing.T) {
	l := newLatency()
	if l.count() != 0 || l.percentile(50) != 0 || l.max() != 0 {
		t.Fatalf("empty histogram: count %d p50 %v max %v", l.count(), l.percentile(50), l.max())
	}
	// 1..10000µs once each: percentile p is p*100µs.
	for i := 1; i <= 10000; i++ {
		l.record(time.Duration(i) * time.Microsecond)
	}
	tests := []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"p50", l.percentile(50), 5000 * time.Microsecond},
		{"p90", l.percentile(90), 9000 * time.Microsecond},
		{"p99", l.percentile(99), 9900 * time.Microsecond},
		{"p99.9", l.percentile(99.9), 9990 * time.Microsecond},
		{"p99.99", l.percentile(99.99), 9999 * time.Microsecond},
		{"max", l.max(), 10000 * time.Microsecond},
		{"mean", l.mean(), 5000500 * time.Nanosecond},
	}
	for _, tt := range tests {
		if !within(tt.got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if l.count() != 10000 {
		t.Errorf("count = %d, want 10000", l.count())
	}
}

func TestLatencyClamps(t *testing.T) {
	l := newLatency()
	l.record(-time.Second)
	l.record(time.Hour)
	if l.count() != 2 {
		t.Fatalf("count = %d, want 2", l.count())
	}
	if got := l.percentile(50); got > latencyMin {
		t.Errorf("negative latency recorded as %v, want at most %v", got, latencyMin)
	}
	if got := l.max(); !within(got, latencyMax) {
		t.Errorf("max = %v, want %v", got, latencyMax)
	}
}

func TestLatencyMerge(t *testing.T) {
	a, b := newLatency(), newLatency()
	for range 90 {
		a.record(time.Millisecond)
	}
	for range 9 {
		b.record(10 * time.Millisecond)
	}
	b.record(100 * time.Millisecond)
	a.merge(b)
	if a.count() != 100 {
		t.Fatalf("merged count = %d, want 100", a.count())
	}
	if b.count() != 10 {
		t.Errorf("merge changed its argument: count %d, want 10", b.count())
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, time.Millisecond}, {90, time.Millisecond}, {91, 10 * time.Millisecond}, {99, 10 * time.Millisecond}, {100, 100 * time.Millisecond}} {
		if got := a.percentile(tt.p); !within(got, tt.want) {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := a.max(); !within(got, 100*time.Millisecond) {
		t.Errorf("max = %v, want 100ms", got)
	}
}
