package main

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	maxNap      = 10 * time.Millisecond // longest sleep before the pacer looks at abort again
	backoffNap  = time.Millisecond      // wait for room in a full source
	clockPacing = unix.CLOCK_MONOTONIC
)

// pacer holds the emitter to an absolute schedule: event i is due at
// start + i*interval, so an oversleep shortens the next gap instead of
// stretching the run.
//
// It sleeps with clock_nanosleep(TIMER_ABSTIME), an hrtimer, as usleep does in
// the kernel's test. time.Sleep will not do: when nothing else is due the
// runtime waits for timers in epoll_wait, whose timeout is in milliseconds, so
// a 100us schedule turns into bursts of about ten events a millisecond, and a
// burst wakes a herd once instead of ten times. Spinning would keep the
// schedule, but at the price of a whole CPU, which the CPU figures would then
// mostly measure.
type pacer struct {
	start    int64 // ns on clockPacing
	interval int64 // ns
}

func newPacer(interval time.Duration) (pacer, error) {
	now, err := monotonic()
	return pacer{start: now, interval: interval.Nanoseconds()}, err
}

// wait returns when event i is due, or when abort is set.
func (p pacer) wait(i int, abort *atomic.Bool) error {
	due := p.start + int64(i)*p.interval
	for !abort.Load() {
		now, err := monotonic()
		if err != nil || now >= due {
			return err
		}
		if err := sleepUntil(min(due, now+maxNap.Nanoseconds())); err != nil {
			return err
		}
	}
	return nil
}

// nap sleeps briefly, to let the waiters catch up.
func (p pacer) nap() error {
	now, err := monotonic()
	if err != nil {
		return err
	}
	return sleepUntil(now + backoffNap.Nanoseconds())
}

func monotonic() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(clockPacing, &ts); err != nil {
		return 0, os.NewSyscallError("clock_gettime", err)
	}
	return ts.Nano(), nil
}

func sleepUntil(ns int64) error {
	ts := unix.NsecToTimespec(ns)
	for {
		err := unix.ClockNanosleep(clockPacing, unix.TIMER_ABSTIME, &ts, nil)
		if err != unix.EINTR {
			return os.NewSyscallError("clock_nanosleep", err)
		}
	}
}
