package main

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// run is the whole command. It returns an error after printing the results
// if any request failed or if the server's counters could not be read.
func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	if cfg.serverPID != 0 {
		if _, err := sampleProc(cfg.serverPID); err != nil {
			return fmt.Errorf("-server-pid: %w", err)
		}
	}
	if cfg.idle {
		return runIdle(cfg, stdout)
	}

	conns, pcs, err := dialAll(cfg)
	defer closeAll(conns)
	if err != nil {
		return err
	}
	// The open loop sleeps on a timerfd per connection, made before the
	// run starts.
	clocks := make([]clock, cfg.conns)
	for i := range clocks {
		clocks[i] = clock{now: time.Now}
		if cfg.rate > 0 {
			clk, closeClock, err := newWallClock()
			if err != nil {
				return err
			}
			defer closeClock()
			clocks[i] = clk
		}
	}

	// Warmup runs from begin to start, the measured window from start to
	// end. Every connection's deadline is the end, which stops its loop.
	begin := time.Now()
	start := begin.Add(cfg.warmup)
	end := start.Add(cfg.duration)
	for _, c := range conns {
		if err := c.SetDeadline(end); err != nil {
			return err
		}
	}
	tallies := make([]*tally, cfg.conns)
	var wg sync.WaitGroup
	for i, pc := range pcs {
		t := newTally(start, end)
		tallies[i] = t
		if cfg.rate > 0 {
			s := schedule{start: begin, rate: cfg.rate, first: uint64(i), stride: uint64(cfg.conns)}
			wg.Go(func() { openLoop(pc, clocks[i], s, t) })
		} else {
			wg.Go(func() { closedLoop(pc, clocks[i], cfg.pipeline, t) })
		}
	}
	stopProgress := startProgress(stderr, begin, start, tallies)
	time.Sleep(time.Until(start))
	before := takeSample(cfg.serverPID)
	time.Sleep(time.Until(end))
	after := takeSample(cfg.serverPID)
	wg.Wait()
	stopProgress()

	if err := errors.Join(before.clientErr, after.clientErr); err != nil {
		fmt.Fprintf(stderr, "loadgen: client CPU not reported: %v\n", err)
	}
	res := summarize(cfg, tallies, before, after)
	if err := writeResult(stdout, cfg.format, res); err != nil {
		return err
	}
	var serverErr error
	if cfg.serverPID != 0 {
		if serverErr = errors.Join(before.serverErr, after.serverErr); serverErr != nil {
			serverErr = fmt.Errorf("server counters: %w", serverErr)
		}
	}
	return errors.Join(res.err(), serverErr)
}
