package main

import (
	"fmt"
	"io"
	"time"
)

// startProgress prints a line a second to w: the phase, the responses per
// second since the previous line, and the failures so far. stop ends it and
// returns once it has stopped writing.
func startProgress(w io.Writer, begin, start time.Time, tallies []*tally) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last int64
		lastAt := begin
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now := time.Now()
			var responses, errs int64
			for _, t := range tallies {
				responses += t.responses.Load()
				for k := range t.errs {
					errs += t.errs[k].Load()
				}
			}
			phase := "warmup"
			if !now.Before(start) {
				phase = "measure"
			}
			fmt.Fprintf(w, "loadgen: %4.0fs %-7s %10.0f req/s %6d errors\n",
				now.Sub(begin).Seconds(), phase, float64(responses-last)/now.Sub(lastAt).Seconds(), errs)
			last, lastAt = responses, now
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
