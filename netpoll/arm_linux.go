package netpoll

import (
	"os"

	"golang.org/x/sys/unix"
)

// How a poller registers and arms descriptors in each Mode.

// readInterest is what d's readers wait for. A connection that skips after
// short reads also asks for EPOLLPRI, in every mode: a read stops short at
// urgent data's mark with the rest already queued, and only the sticky bit
// tells (a levelTriggered poller nested in the runtime's netpoller does not
// report a level that is still pending again, see TestShortReadPending).
func readInterest(d *desc) uint32 {
	switch {
	case d.kind != kindConn:
		return unix.EPOLLIN
	case d.skip:
		return unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLPRI
	}
	return unix.EPOLLIN | unix.EPOLLRDHUP
}

// registration returns the epoll events d is added with.
func registration(d *desc) uint32 {
	in := readInterest(d)
	switch d.mode {
	case oneShot:
		return unix.EPOLLONESHOT // disarmed: each park arms what it waits for
	case levelTriggered:
		return in // EPOLLOUT is armed only while a writer is parked
	default:
		ev := in | unix.EPOLLET
		if d.kind == kindConn {
			ev |= unix.EPOLLOUT
		}
		return ev
	}
}

// register adds d to the table and to epoll with extra flags or'ed in
// (EPOLLEXCLUSIVE for a shared listener).
func (p *poller) register(d *desc, extra uint32) error {
	d.p = p
	d.mode = p.mode
	if d.kind == kindShared {
		d.mode = edgeTriggered
	}
	d.skip = p.shortRead && d.kind == kindConn
	ev := registration(d)
	d.armed.Store(ev &^ (unix.EPOLLET | unix.EPOLLONESHOT))
	// In the table before epoll_ctl, so the first event finds d.
	return p.table.insert(d, func() error { return p.add(d, ev|extra) })
}

func (p *poller) add(d *desc, events uint32) error {
	e := unix.EpollEvent{Events: events, Fd: int32(d.fd), Pad: int32(d.gen)}
	if err := epollCtl(p.epfd, unix.EPOLL_CTL_ADD, d.fd, &e); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.st.inc(cCtlAdd)
	return nil
}

// requeue deletes and re-adds d's registration, which moves it to the back
// of the wait queue of d's socket (see Listener.balance). A connection that
// arrives in between wakes another poller; one already queued is reported
// again by the re-add, since epoll_ctl checks readiness when it adds.
func (p *poller) requeue(d *desc, extra uint32) error {
	return p.readd(d, registration(d)|extra)
}

// readd replaces d's registration with EPOLL_CTL_DEL and EPOLL_CTL_ADD of
// events. Unlike a MOD, the ADD checks readiness and, if ready, links the
// item in the ready list and wakes the instance's waiters. An error from
// the ADD leaves d out of epoll.
func (p *poller) readd(d *desc, events uint32) error {
	if err := epollCtl(p.epfd, unix.EPOLL_CTL_DEL, d.fd, nil); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.st.inc(cCtlDel)
	return p.add(d, events)
}

// unregister removes d from epoll and the table and retires its counters.
// It returns EPOLL_CTL_DEL's error, which destroy keeps for Close: the
// fd's close that follows removes the registration anyway, unless the
// socket lives on in a dup (Conn.File), whose registration then reports
// events of d's generation, which dispatch drops as stale.
func (p *poller) unregister(d *desc) error {
	err := epollCtl(p.epfd, unix.EPOLL_CTL_DEL, d.fd, nil)
	if err == nil {
		p.st.inc(cCtlDel)
	}
	p.table.clear(d)
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// modify sets d's epoll interest to events with EPOLL_CTL_MOD. Called with
// d.armMu held.
func (p *poller) modify(d *desc, events uint32) error {
	flags := uint32(0)
	if d.perPark() {
		flags = unix.EPOLLONESHOT
	}
	e := unix.EpollEvent{Events: events | flags, Fd: int32(d.fd), Pad: int32(d.gen)}
	p.st.op(d.fd, cCtlMod)
	if err := epollCtl(p.epfd, unix.EPOLL_CTL_MOD, d.fd, &e); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	d.armed.Store(events)
	return nil
}

// interest is what d must be armed for given who is parked: oneShot arms
// exactly the parked directions, levelTriggered keeps reading armed and adds
// EPOLLOUT while a writer is parked.
func interest(d *desc) uint32 {
	var ev uint32
	in := readInterest(d)
	if d.mode == levelTriggered || readWaits(d) {
		ev |= in
	}
	if d.wr.state.Load() == stWaiting {
		ev |= unix.EPOLLOUT
	}
	return ev | stickyWatch(d) // readahead_linux.go's watch
}

// readWaits reports whether d's read direction waits for an event: an
// operation is parked in it, or a Server waits on its behalf.
func readWaits(d *desc) bool {
	st := d.rd.state.Load()
	return st == stWaiting || st == stServe
}

// armForPark makes sure an event will come for a direction about to park.
// edgeTriggered: nothing to do, unless the connection is hot
// (hot_linux.go), whose registration is armed per park as oneShot's.
// oneShot: re-arm (one EPOLL_CTL_MOD per park). levelTriggered: only if
// the wanted interest is not armed already.
// An error fails d (fail): the registration may be gone (a DEL whose ADD
// failed), and with armed unchanged a later park would find its interest
// "armed" and wait for good.
func (p *poller) armForPark(d *desc, dr *dir) error {
	if d.mode == edgeTriggered && !d.hot() {
		return nil
	}
	d.armMu.Lock()
	defer d.armMu.Unlock()
	if d.failed() {
		return p.ctl.get(d)
	}
	if d.mode == edgeTriggered && !d.hot() {
		return nil // went cold meanwhile: its whole registration is back
	}
	err := p.arm(d)
	if err != nil {
		p.fail(d, err)
	}
	return err
}

// arm is armForPark's epoll_ctl, with d.armMu held.
func (p *poller) arm(d *desc) error {
	want := interest(d)
	if d.mode == levelTriggered && d.armed.Load() == want {
		return nil
	}
	if d.mode == levelTriggered && p.nested() {
		// DEL and ADD, not MOD. epoll re-links a level-triggered item in
		// its ready list when it reports it, without a wakeup, and a MOD
		// of a linked item makes no wakeup either (ep_modify wakes only
		// when it links). So when readiness came before this re-arm (a
		// writer's space, a disarmed reader's data) no edge would reach
		// the runtime's registration of our epoll fd, and the park would
		// last for good (TestFaultDeadlineStorm/lt and TestShortWrite/lt
		// hung so under -race). A poller in epoll_wait(-1) scans the ready
		// list itself and needs no such care.
		if err := p.readd(d, want); err != nil {
			return err
		}
		d.armed.Store(want)
		return nil
	}
	return p.modify(d, want)
}

// rearmAfterEvent runs on the poller after an event for d in oneShot or
// levelTriggered mode, or hot (hot_linux.go). oneShot and hot: the kernel
// disarmed the whole fd, so a direction still parked must be armed again.
// levelTriggered: drop EPOLLOUT once no writer is parked, or it would fire
// on every epoll_wait. An error
// fails d: the parked direction would wait for good (oneShot), or EPOLLOUT
// fire until Close (levelTriggered).
func (p *poller) rearmAfterEvent(d *desc) {
	if d.perPark() && !readWaits(d) && d.wr.state.Load() != stWaiting && stickyWatch(d) == 0 {
		return
	}
	if d.mode == levelTriggered && d.armed.Load()&unix.EPOLLOUT == 0 {
		return
	}
	// A reference, so that d's fd is not closed (and its number reused by
	// a new registration, which the EPOLL_CTL_MOD would overwrite with d's
	// generation and interest) while we modify it.
	if d.incref() != nil {
		return // closing: nothing to arm
	}
	defer d.decref()
	d.armMu.Lock()
	defer d.armMu.Unlock()
	if d.failed() {
		return
	}
	want := interest(d)
	if (d.perPark() && want != 0) || (d.mode == levelTriggered && want != d.armed.Load()) {
		if err := p.modify(d, want); err != nil {
			p.fail(d, err)
		}
	}
}
