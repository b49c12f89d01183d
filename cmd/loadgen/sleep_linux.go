package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// newWallClock returns a clock whose sleep waits on a timerfd of its own,
// and the function that closes it. A goroutine may sleep on one clock at a
// time.
//
// time.Sleep is too coarse for the open loop: while the process is idle,
// the runtime waits for timers in epoll_wait, whose timeout is whole
// milliseconds, so a sleep ends up to 1ms late and that lateness would be
// counted as latency. A timerfd fires to the microsecond, and the runtime
// poller wakes the goroutine as soon as it does.
func newWallClock() (clock, func() error, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return clock{}, nil, os.NewSyscallError("timerfd_create", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd") // non-blocking: served by the runtime poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return clock{}, nil, err
	}
	var expirations [8]byte
	sleep := func(d time.Duration) {
		if d <= 0 {
			return
		}
		var serr error
		err := rc.Control(func(fd uintptr) {
			spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
			serr = unix.TimerfdSettime(int(fd), 0, &spec, nil)
		})
		if err == nil {
			err = os.NewSyscallError("timerfd_settime", serr)
		}
		if err == nil {
			_, err = f.Read(expirations[:])
		}
		if err != nil {
			// The clock is closed only after its goroutine has returned.
			panic(fmt.Sprintf("loadgen: sleep on an open timerfd: %v", err))
		}
	}
	return clock{now: time.Now, sleep: sleep}, f.Close, nil
}
