package main

import (
	"testing"
	"time"
)

// fakeClock is simulated time: sleeping advances it at once.
type fakeClock struct{ t time.Time }

func (f *fakeClock) clock() clock {
	return clock{
		now:   func() time.Time { return f.t },
		sleep: func(d time.Duration) { f.t = f.t.Add(d) },
	}
}

// fakeServer answers on simulated time: a request takes no time to send,
// and its response service(seq) to arrive.
type fakeServer struct {
	clk     *fakeClock
	service func(seq uint64) time.Duration

	sent        []time.Time // when request seq went out
	next        uint64      // next response
	maxInFlight int
	t           *testing.T
}

func (s *fakeServer) send(seq uint64) error {
	if seq != uint64(len(s.sent)) {
		s.t.Fatalf("sent request %d, want %d", seq, len(s.sent))
	}
	s.sent = append(s.sent, s.clk.t)
	s.maxInFlight = max(s.maxInFlight, len(s.sent)-int(s.next))
	return nil
}

func (s *fakeServer) recv(seq uint64) error {
	if seq != s.next || seq >= uint64(len(s.sent)) {
		s.t.Fatalf("awaiting response %d, want %d of %d sent", seq, s.next, len(s.sent))
	}
	s.next++
	s.clk.t = s.clk.t.Add(s.service(seq))
	return nil
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// checkLatencies compares the tally's histogram with one of want.
func checkLatencies(t *testing.T, tl *tally, want []time.Duration) {
	t.Helper()
	w := newLatency()
	for _, d := range want {
		w.record(d)
	}
	if tl.completed != int64(len(want)) || tl.verified != int64(len(want)) {
		t.Errorf("completed %d, verified %d; want %d", tl.completed, tl.verified, len(want))
	}
	if !tl.lat.h.Equals(w.h) {
		t.Errorf("latencies differ: p50 %v p99 %v max %v, want p50 %v p99 %v max %v",
			tl.lat.percentile(50), tl.lat.percentile(99), tl.lat.max(),
			w.percentile(50), w.percentile(99), w.max())
	}
}

func TestOpenLoopOnSchedule(t *testing.T) {
	clk := &fakeClock{t: t0}
	srv := &fakeServer{clk: clk, service: func(uint64) time.Duration { return ms(0.1) }, t: t}
	tl := newTally(t0, t0.Add(ms(10)))
	openLoop(srv, clk.clock(), schedule{start: t0, rate: 1000, first: 0, stride: 1}, tl)

	if len(srv.sent) != 10 {
		t.Fatalf("sent %d requests, want 10", len(srv.sent))
	}
	var want []time.Duration
	for k, at := range srv.sent {
		if due := t0.Add(ms(float64(k))); !at.Equal(due) {
			t.Errorf("request %d sent at +%v, want +%v", k, at.Sub(t0), due.Sub(t0))
		}
		want = append(want, ms(0.1))
	}
	checkLatencies(t, tl, want)
	// Request 0 is due at once; the client sleeps for the other 9 and
	// wakes on time.
	if tl.wake.count() != 9 || tl.wake.max() >= latencyMin {
		t.Errorf("%d wakes, latest %v late; want 9 on time", tl.wake.count(), tl.wake.max())
	}
}

// TestOpenLoopQueueing has response 3 take 10ms instead of 0.1ms. The
// requests due meanwhile queue and go out back to back once it arrives; their
// latency counts from when they were due, so the stall shows in all of them.
func TestOpenLoopQueueing(t *testing.T) {
	clk := &fakeClock{t: t0}
	srv := &fakeServer{clk: clk, t: t, service: func(seq uint64) time.Duration {
		if seq == 3 {
			return ms(10)
		}
		return ms(0.1)
	}}
	// The window starts at 1.5ms: the first two responses are warmup.
	tl := newTally(t0.Add(ms(1.5)), t0.Add(ms(20)))
	openLoop(srv, clk.clock(), schedule{start: t0, rate: 1000, first: 0, stride: 1}, tl)

	// Request k is due at k ms. 3 goes out on time and returns at 13ms;
	// 4..13 go out at 13ms + (k-4)×0.1ms, and 14 is on time again.
	var wantSent []time.Duration
	var wantLat []time.Duration
	for k := range 20 {
		sent, done := ms(float64(k)), ms(float64(k)+0.1)
		switch {
		case k == 3:
			done = ms(13)
		case k >= 4 && k <= 13:
			sent = ms(13 + 0.1*float64(k-4))
			done = sent + ms(0.1)
		}
		wantSent = append(wantSent, sent)
		if k >= 2 {
			wantLat = append(wantLat, done-ms(float64(k)))
		}
	}
	if len(srv.sent) != len(wantSent) {
		t.Fatalf("sent %d requests, want %d", len(srv.sent), len(wantSent))
	}
	for k, at := range srv.sent {
		if got := at.Sub(t0); got != wantSent[k] {
			t.Errorf("request %d sent at +%v, want +%v", k, got, wantSent[k])
		}
	}
	checkLatencies(t, tl, wantLat)
	if got := tl.lat.max(); !within(got, ms(10)) {
		t.Errorf("max latency %v, want 10ms", got)
	}
	if got := tl.lat.percentile(50); got < ms(1) {
		t.Errorf("p50 latency %v: the queued requests' wait is missing", got)
	}
}

func TestScheduleSpreadsConns(t *testing.T) {
	const conns, rate = 4, 4000 // 250µs between requests of the run
	seen := make(map[time.Duration]int)
	for i := range uint64(conns) {
		s := schedule{start: t0, rate: rate, first: i, stride: conns}
		for k := range uint64(3) {
			got := s.due(k).Sub(t0)
			if want := time.Duration(i+k*conns) * 250 * time.Microsecond; got != want {
				t.Errorf("conn %d request %d due at +%v, want +%v", i, k, got, want)
			}
			seen[got]++
		}
	}
	for j := range 3 * conns {
		if d := time.Duration(j) * 250 * time.Microsecond; seen[d] != 1 {
			t.Errorf("slot +%v taken %d times, want once", d, seen[d])
		}
	}
}

// TestClosedLoopPipeline keeps 3 requests in flight against a server that
// takes 1ms per response: latency grows to 3ms as the pipeline fills.
func TestClosedLoopPipeline(t *testing.T) {
	clk := &fakeClock{t: t0}
	srv := &fakeServer{clk: clk, service: func(uint64) time.Duration { return ms(1) }, t: t}
	tl := newTally(t0, t0.Add(ms(10)))
	closedLoop(srv, clk.clock(), 3, tl)

	if srv.maxInFlight != 3 {
		t.Errorf("at most %d requests in flight, want 3", srv.maxInFlight)
	}
	// Response k arrives at k+1 ms; the one at 10ms is past the window.
	checkLatencies(t, tl, []time.Duration{ms(1), ms(2), ms(3), ms(3), ms(3), ms(3), ms(3), ms(3), ms(3)})
}
