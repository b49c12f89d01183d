package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// experiment is one run: the source, the stop eventfd and the waiters.
type experiment struct {
	cfg     config
	src     source
	stopfd  int // eventfd in every epoll instance, level-triggered: once written, every waiter sees it
	waiters []*waiter

	delivered atomic.Int64  // events taken so far by all waiters
	done      chan struct{} // closed by the waiter that takes the last event
	errc      chan error    // the first failure of a waiter or the emitter
}

// runOnce runs the experiment once with cfg.
func runOnce(cfg config) (res *result, err error) {
	x := &experiment{
		cfg:    cfg,
		stopfd: -1,
		done:   make(chan struct{}),
		errc:   make(chan error, 1),
	}
	defer func() {
		if cerr := x.close(); err == nil && cerr != nil {
			res, err = nil, cerr
		}
	}()
	if err := x.setup(); err != nil {
		return nil, err
	}
	before, after, err := x.stream()
	if err != nil {
		return nil, err
	}
	return x.result(before, after)
}

// setup opens the source, the stop eventfd and one epoll instance per waiter.
// What it opened is in x for close, even when it fails.
func (x *experiment) setup() error {
	var err error
	if x.src, err = openSource(x.cfg); err != nil {
		return err
	}
	if x.stopfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		x.stopfd = -1
		return os.NewSyscallError("eventfd", err)
	}
	// Level-triggered, as in the kernel's pipe test: a waiter whose epoll
	// reports the source reads once and goes back to epoll_wait, which
	// reports it again while anything is left. Edge-triggered registration
	// would change what a wakeup means, not whether the herd happens.
	events := uint32(unix.EPOLLIN)
	if x.cfg.mode == modeExclusive {
		events |= unix.EPOLLEXCLUSIVE
	}
	for i := range x.cfg.waiters {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return os.NewSyscallError("epoll_create1", err)
		}
		x.waiters = append(x.waiters, &waiter{epfd: epfd})
		if err := epollAdd(epfd, x.stopfd, unix.EPOLLIN); err != nil {
			return err
		}
		err = epollAdd(epfd, x.src.fd(i), events)
		if err != nil && events&unix.EPOLLEXCLUSIVE != 0 && errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("the kernel rejects EPOLLEXCLUSIVE (added in Linux 4.5): %w", err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func epollAdd(epfd, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	return os.NewSyscallError("epoll_ctl", unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev))
}

// stream starts the waiters and, once they are all about to wait, the event
// stream; it returns the process's usage at the start and at the delivery of
// the last event. All goroutines it starts have ended when it returns.
func (x *experiment) stream() (before, after usage, err error) {
	var (
		wg    sync.WaitGroup
		ready sync.WaitGroup
		abort atomic.Bool // tells the emitter to stop early
	)
	defer func() {
		abort.Store(true)
		x.stop()
		wg.Wait()
		if err == nil {
			select {
			case err = <-x.errc: // a failure after the last event
			default:
			}
		}
	}()
	ready.Add(len(x.waiters))
	for _, w := range x.waiters {
		wg.Go(func() { w.loop(x, &ready) })
	}
	ready.Wait()

	if before, err = readUsage(); err != nil {
		return
	}
	wg.Go(func() {
		if err := x.emit(&abort); err != nil {
			x.fail(err)
		}
	})
	timer := time.NewTimer(x.cfg.timeout)
	defer timer.Stop()
	select {
	case <-x.done:
	case err = <-x.errc:
		return
	case <-timer.C:
		err = fmt.Errorf("timed out after %v: %d of %d events delivered", x.cfg.timeout, x.delivered.Load(), x.cfg.events)
		return
	}
	after, err = readUsage()
	return
}

// emit makes cfg.events events ready on the pacer's schedule.
func (x *experiment) emit(abort *atomic.Bool) error {
	p, err := newPacer(x.cfg.interval)
	if err != nil {
		return err
	}
	for i := range x.cfg.events {
		if err := p.wait(i, abort); err != nil {
			return err
		}
		for {
			if abort.Load() {
				return nil
			}
			err := x.src.emit()
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EAGAIN) {
				return err
			}
			// The source is full: the waiters are behind.
			if err := p.nap(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fail records the first failure; the rest are dropped.
func (x *experiment) fail(err error) {
	select {
	case x.errc <- err:
	default:
	}
}

// stop makes the stop eventfd readable, which ends every waiter.
func (x *experiment) stop() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := unix.Write(x.stopfd, one[:]); err != nil {
		// The counter is written once and cannot overflow: only a bad fd
		// fails here, and then the waiters could never be joined.
		panic("herd: cannot write the stop eventfd: " + err.Error())
	}
}

// close closes every descriptor setup opened. The waiters must have ended.
func (x *experiment) close() error {
	var errs []error
	for _, w := range x.waiters {
		errs = append(errs, closeFD("epoll", w.epfd))
	}
	if x.stopfd >= 0 {
		errs = append(errs, closeFD("eventfd", x.stopfd))
	}
	if x.src != nil {
		errs = append(errs, x.src.close())
	}
	return errors.Join(errs...)
}

func closeFD(what string, fd int) error {
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close %s: %w", what, os.NewSyscallError("close", err))
	}
	return nil
}

// result checks that every event was delivered exactly once and gathers the figures.
func (x *experiment) result(before, after usage) (*result, error) {
	got := make([]int64, len(x.waiters))
	empty := make([]int64, len(x.waiters))
	var sum int64
	for i, w := range x.waiters {
		got[i], empty[i] = w.got, w.empty
		sum += w.got
	}
	if sum != int64(x.cfg.events) {
		return nil, fmt.Errorf("waiters took %d events, %d were sent", sum, x.cfg.events)
	}
	res := &result{
		Source:      x.cfg.source,
		Mode:        x.cfg.mode,
		Waiters:     x.cfg.waiters,
		Events:      x.cfg.events,
		Interval:    x.cfg.interval,
		Wall:        after.at.Sub(before.at),
		User:        after.user - before.user,
		Sys:         after.sys - before.sys,
		Voluntary:   after.voluntary - before.voluntary,
		Involuntary: after.involuntary - before.involuntary,
		Got:         got,
		EmptyBy:     empty,
	}
	res.summarize()
	return res, nil
}
