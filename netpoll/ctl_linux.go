package netpoll

import (
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// epoll_ctl, and what a failed one does to a registered descriptor.
//
// Once a descriptor is registered, every later epoll_ctl on it can lose the
// event a parked operation waits for if its failure is dropped: a oneShot
// re-arm that fails leaves the fd disarmed, a levelTriggered DEL and ADD
// whose ADD fails leaves it out of epoll. The kernel can fail an ADD for
// want of memory (ENOMEM) or of watches (ENOSPC, max_user_watches); a MOD or
// a DEL fails only when the registration is gone already (ENOENT) or the
// process is being killed (EINTR), which are no better. So a failed
// epoll_ctl on a registered connection fails the connection (fail): its
// operations, parked ones included, return the error, and so does its Close.
// An Exclusive listener's registration, lost by the DEL and ADD of
// balancing, is added again instead (Listener.acceptor).

// ctlHook, when a test sets it, is called instead of epoll_ctl by every
// call this package makes (the fault-injection seam of ctlerr_linux_test.go).
var ctlHook atomic.Pointer[func(epfd, op, fd int, event *unix.EpollEvent) error]

// epollCtl is epoll_ctl(2), or ctlHook's fault. The hook gets a copy of
// the event: passing event itself to a call through a pointer would make
// it escape, and every caller's event (a MOD per park in oneShot mode)
// be allocated.
func epollCtl(epfd, op, fd int, event *unix.EpollEvent) error {
	if h := ctlHook.Load(); h != nil {
		var ev *unix.EpollEvent
		if event != nil {
			ev = new(unix.EpollEvent)
			*ev = *event
		}
		return (*h)(epfd, op, fd, ev)
	}
	return unix.EpollCtl(epfd, op, fd, event)
}

// stickyFailed marks a descriptor whose registration a failed epoll_ctl
// lost (fail), or whose EPOLL_CTL_DEL failed as it closed; the error is in
// its poller's ctlFailures. EPOLLONESHOT is never reported as an event
// bit, so the bit is free; as every sticky bit, it turns skipping off.
const stickyFailed uint32 = unix.EPOLLONESHOT

// ctlFailures holds the epoll_ctl errors of a poller's failed descriptors
// (stickyFailed). It is kept off the descriptor, which every connection
// pays for, since a failure is rare.
type ctlFailures struct {
	// mu guards errs. Taken by set (under the descriptor's armMu, or by
	// destroy with no reference left), by get and by the first close after
	// the descriptor is destroyed, which removes its entry: an entry lives
	// from the failure until that close returns it.
	mu   sync.Mutex
	errs map[*desc]error
}

// set records err for d, then marks d failed, so whoever sees the mark
// finds the error. The first error stays.
func (f *ctlFailures) set(d *desc, err error) {
	f.mu.Lock()
	if f.errs == nil {
		f.errs = make(map[*desc]error)
	}
	if _, ok := f.errs[d]; !ok {
		f.errs[d] = err
	}
	f.mu.Unlock()
	d.sticky.Or(stickyFailed)
}

// get returns the error of failed descriptor d: net.ErrClosed if its Close
// has taken it meanwhile (only a caller without a reference can see that).
func (f *ctlFailures) get(d *desc) error {
	f.mu.Lock()
	err := f.errs[d]
	f.mu.Unlock()
	if err == nil {
		return net.ErrClosed
	}
	return err
}

// take removes and returns the error of failed descriptor d, once d is
// destroyed.
func (f *ctlFailures) take(d *desc) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.errs[d]
	delete(f.errs, d)
	return err
}

// failed reports whether an epoll_ctl failure lost d's registration.
func (d *desc) failed() bool { return d.sticky.Load()&stickyFailed != 0 }

// fail fails d after an epoll_ctl on its registration returned err: err is
// recorded (the first one stays), what is left of the registration is
// removed, so that an interest the failed call could not drop (EPOLLOUT, a
// level reader's EPOLLIN) does not fire on every epoll_wait until Close,
// and both directions are nudged, so that a parked operation wakes to
// checkDir's error and a connection idle under a Server starts its handler,
// whose Read returns it. Called with a reference on d and d.armMu held.
func (p *poller) fail(d *desc, err error) {
	if d.failed() {
		return
	}
	p.ctl.set(d, err)
	// ENOENT when the failed call was an ADD after a DEL: nothing is left.
	if epollCtl(p.epfd, unix.EPOLL_CTL_DEL, d.fd, nil) == nil {
		p.st.inc(cCtlDel)
	}
	d.nudge(&d.rd)
	d.nudge(&d.wr)
}
