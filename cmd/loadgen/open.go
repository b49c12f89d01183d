package main

import "time"

// schedule spaces a run's requests evenly at a fixed total rate: request j
// of the run is due at start + j/rate. Connection i of n sends requests i,
// i+n, i+2n, ...
type schedule struct {
	start  time.Time
	rate   float64 // requests/s, over all connections
	first  uint64  // the connection's index i
	stride uint64  // the number of connections n
}

// due returns when the connection's k-th request is due.
func (s schedule) due(k uint64) time.Time {
	j := s.first + k*s.stride
	return s.start.Add(time.Duration(float64(j) * float64(time.Second) / s.rate))
}

// openLoop sends the connection's requests on schedule until t's window
// ends or a request fails, one at a time. A request that falls due while
// the previous one is outstanding waits, and goes out as soon as that
// response arrives. Its latency runs from when it was due, not from when it
// was sent, so a slow response shows in the latency of every request that
// queued behind it rather than hiding them (coordinated omission). The
// client's own lateness in waking for a request is part of that latency
// too; t.wake keeps it apart so the report can show it.
func openLoop(pc protoConn, clk clock, s schedule, t *tally) {
	for k := uint64(0); ; k++ {
		due := s.due(k)
		if !due.Before(t.end) {
			return
		}
		if now := clk.now(); now.Before(due) {
			clk.sleep(due.Sub(now))
			t.woke(due, clk.now())
		}
		err := pc.send(k)
		if err == nil {
			err = pc.recv(k)
		}
		if !t.record(due, clk.now(), err) {
			return
		}
	}
}
