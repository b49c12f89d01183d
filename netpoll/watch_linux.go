package netpoll

import (
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The watch port: a second epoll instance that holds the poller's epoll fd
// (E1) and nothing else, registered with the runtime's netpoller like E1
// itself. While it is armed, the first event E1 gets makes the port
// readable, and the runtime readies the goroutine parked on the port (the
// watcher) on the thread it wakes for it, as it would package net's reader:
// a goroutine can watch E1 for others without polling it, and without a
// timer. Disarmed, E1's events reach nobody through it.
//
// E1 is held with EPOLLIN|EPOLLONESHOT: arm is EPOLL_CTL_MOD to those
// events, disarm EPOLL_CTL_MOD to none. What the kernel does with that
// (TestWatchPort pins each point):
//
//  1. disarmed, an event on E1 makes the port neither ready nor readable;
//  2. arm with E1 ready already fires at once (the MOD polls E1 again), so
//     an event between the watcher's last look and the arm is not lost;
//  3. once epoll_wait on the port has reported E1, ONESHOT keeps the port
//     quiet until the next arm;
//  4. arm, then disarm, then an event: quiet;
//  5. a fire nobody reports stays on the port's ready list, and a later
//     arm adds no new edge: the runtime, edge-triggered on the port, wakes
//     nobody for it. So whoever parks on the port polls it first (fired),
//     in every RawRead callback, as RawRead itself resets the runtime's
//     readiness before it parks;
//  6. a goroutine in E1's RawRead and one in the port's are each woken by
//     their own registration.
type watchPort struct {
	p  *poller
	fd int // set once by newWatchPort, never written again
	// e1 is the poller's epoll fd the port watches, as newWatchPort found
	// it: arm and disarm name it without reading p.epfd, which the
	// poller's stop writes (-1) with no lock an arm in flight takes (the
	// race detector saw the two meet in TestServeInlineHops).
	e1 int
	f  *os.File // registers fd with the runtime's netpoller; closing it closes fd
	rc syscall.RawConn
	// mu orders close after every arm and disarm in flight: a goroutine
	// whose CAS on the role word set or cleared the armed bit just before
	// stop retired the word still makes its epoll_ctl, and that must not
	// reach a closed fd, whose number the process may have reused. arm and
	// disarm hold it shared and do nothing once closed is set; close holds
	// it exclusively. Readers never wait on each other, so the role word's
	// hot path pays one atomic add each way.
	mu     sync.RWMutex
	closed bool // under mu
	// ev is fired's buffer: only the goroutine inside the port's RawRead
	// polls the port.
	ev [1]unix.EpollEvent
}

// newWatchPort makes p's watch port, disarmed.
func newWatchPort(p *poller) (_ *watchPort, err error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	ev := unix.EpollEvent{Fd: int32(p.epfd)} // no events: disarmed
	if err := epollCtl(fd, unix.EPOLL_CTL_ADD, p.epfd, &ev); err != nil {
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	// os.NewFile registers a non-blocking fd with the runtime's netpoller.
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	w := &watchPort{p: p, fd: fd, e1: p.epfd, f: os.NewFile(uintptr(fd), "netpoll-watch")}
	if w.rc, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return nil, err
	}
	return w, nil
}

// arm makes the port fire at E1's next event, or at once if E1 has one.
// Once the port is closed it does nothing: stop retired the role word
// first, so nobody is left to wake.
func (w *watchPort) arm() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return nil
	}
	w.p.st.inc(cWatchArms)
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(w.e1)}
	if err := epollCtl(w.fd, unix.EPOLL_CTL_MOD, w.e1, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// disarm makes E1's events reach nobody through the port. A fire already
// on the port's ready list is dropped with it. Once the port is closed it
// does nothing, as arm.
func (w *watchPort) disarm() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return nil
	}
	ev := unix.EpollEvent{Fd: int32(w.e1)}
	if err := epollCtl(w.fd, unix.EPOLL_CTL_MOD, w.e1, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	// Counted once done: a test that waits for as many disarms as arms
	// then knows that no event can reach the port any more.
	w.p.st.inc(cWatchDisarms)
	return nil
}

// fired polls the port without blocking: whether it fired since it was
// last polled. A fire it reports is used up (ONESHOT): the port stays quiet
// until the next arm. The kernel polls E1 again as it reports, so a fire is
// reported only while E1 still has an event: one that somebody polling E1
// has taken meanwhile is not. Only the goroutine in the port's RawRead
// calls it, with the fd its callback was given: while the callback runs,
// the os.File keeps the fd open even if close has begun.
func (w *watchPort) fired(fd uintptr) bool {
	for {
		n, err := unix.EpollWait(int(fd), w.ev[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			panic("netpoll: epoll_wait on our own watch port failed: " + err.Error())
		}
		return n > 0
	}
}

// wake makes the goroutine parked in the port's RawRead return, with
// os.ErrDeadlineExceeded, and every later RawRead on it at once: a read
// deadline in the past, which needs no epoll_ctl (inlineWait.retire).
func (w *watchPort) wake() {
	w.f.SetReadDeadline(time.Unix(1, 0)) // fails only once closed: nobody is parked then
}

// close closes the port once every arm and disarm in flight is done (see
// mu); later ones do nothing. The goroutine parked in its RawRead, if any,
// returns with an error. f is kept, closed, so that a late wake (lose on
// a goroutine still leaving) finds a file whose SetReadDeadline fails
// harmlessly.
func (w *watchPort) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.f.Close()
	}
}
