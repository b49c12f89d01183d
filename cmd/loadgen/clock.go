package main

import "time"

// clock is the time source of the request loops. Tests replace it to run a
// loop on simulated time, with a fake protoConn that advances it.
type clock struct {
	now   func() time.Time
	sleep func(time.Duration)
}
