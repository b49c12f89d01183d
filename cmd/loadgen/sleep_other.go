//go:build !linux

package main

import "time"

// newWallClock returns a clock that sleeps with time.Sleep.
func newWallClock() (clock, func() error, error) {
	return clock{now: time.Now, sleep: time.Sleep}, func() error { return nil }, nil
}
