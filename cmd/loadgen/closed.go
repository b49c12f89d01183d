package main

import "time"

// closedLoop keeps depth requests in flight on pc until t's window ends or
// a request fails, sending a new request as soon as a response arrives. A
// request's latency runs from its send to its full response.
//
// One goroutine both writes and reads, so the requests in flight and their
// responses must fit in the socket buffers; maxInflight keeps them there.
func closedLoop(pc protoConn, clk clock, depth int, t *tally) {
	sent := make([]time.Time, depth) // send time of request seq at seq%depth
	var next, oldest uint64          // next request to send, oldest awaiting its response
	for {
		for next-oldest < uint64(depth) {
			now := clk.now()
			if !now.Before(t.end) {
				return
			}
			sent[next%uint64(depth)] = now
			if err := pc.send(next); err != nil {
				t.record(now, clk.now(), err)
				return
			}
			next++
		}
		err := pc.recv(oldest)
		if !t.record(sent[oldest%uint64(depth)], clk.now(), err) {
			return
		}
		oldest++
	}
}
