package netpoll

import (
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// How a poller waits (Config.Wait). Measured on the 2-vCPU KVM machine this
// project targets, 64-byte echo ping-pong with client and server in one
// process (bench/, BenchmarkEcho, -count 6; testdata/core/):
//
//	                 1 conn            50 conns
//	net              4.3 µs/op         3.8 µs/op
//	nested           7.4 µs/op         4.1 µs/op
//	block           28.8 µs/op         9.0 µs/op
//	yield           27.6 µs/op         4.0 µs/op
//
//   - WaitBlock, a locked OS thread in epoll_wait(-1), readies goroutines
//     onto the P of a thread that goes straight back into a blocking
//     syscall: they run only once sysmon retakes that P or another thread
//     steals them, a cross-core wakeup each time (4 context switches/op).
//   - WaitYield yields the P after each batch, but when events stop it
//     still blocks a thread holding its P.
//   - WaitNested parks the epoll fd in the runtime's netpoller, so the
//     thread the kernel wakes runs the poller and then, on the same P, the
//     goroutines it readied; no thread is dedicated to the poller.
//
// WaitNested is the default. Its remaining cost against package net is one
// epoll_wait(0) and one goroutine switch per wakeup, plus, when a P is idle,
// the runtime's wakep() on every goroutine it readies (net's netpoll hands
// goroutines to the scheduler directly and avoids it): +23% at 1 conn with
// GOMAXPROCS=1, +71% with GOMAXPROCS=2.

// pollBatch is how many events one epoll_wait returns at most.
const pollBatch = 128

// levelRepeatWindow is how long a LevelTriggered poller keeps getting
// batches that wake nobody (yielding the P after each) before it disarms
// the readers that are not reading. See doc.go, "LevelTriggered".
const levelRepeatWindow = 10 * time.Millisecond

// poller owns one epoll instance and its event loop.
type poller struct {
	id   int
	epfd int
	evfd int // eventfd registered level-triggered: written once to stop the loop
	mode Mode
	wait Wait
	spin time.Duration // Config.Spin
	auto *autoSpin     // SpinAuto's state, nil otherwise

	shortRead bool // Config.ShortRead resolved: its connections skip after short transfers

	table fdTable

	stopped chan struct{} // closed when the loop has returned

	// Owned by the loop goroutine.
	events      []unix.EpollEvent
	lastEvent   time.Time // when a poll last returned events (spinning)
	repeatSince time.Time // start of a run of LevelTriggered batches that woke nobody

	st pollerCounters
}

// pollerCounters are written by the poller's loop (and, for ctl counts and
// accepts, by registration and acceptors) and read by Stats. Per-I/O
// counters live in desc and are folded in when a descriptor closes.
type pollerCounters struct {
	waits          atomic.Uint64 // epoll_wait calls
	blockingWaits  atomic.Uint64 // times the loop blocked (epoll_wait(-1) or a park)
	wakeups        atomic.Uint64 // blocking waits that returned
	emptyWakeups   atomic.Uint64 // wakeups whose first poll woke no goroutine
	spinPolls      atomic.Uint64 // epoll_wait(0) calls made while spinning
	spinHits       atomic.Uint64 // spin polls that returned events
	spinDecisions  atomic.Uint64 // SpinAuto: idle periods it chose to spin through
	spinFound      atomic.Uint64 // SpinAuto: of those, spins that found an event
	spinGaveUp     atomic.Uint64 // SpinAuto: of those, spins that used up the budget
	spinNanos      atomic.Uint64 // SpinAuto: time spent in those spins
	blockCost      atomic.Uint64 // SpinAuto: median process CPU (ns) of a sampled blocked idle period
	spinBudget     atomic.Uint64 // SpinAuto: the budget (ns) of its latest idle moment
	events         atomic.Uint64 // events returned
	stale          atomic.Uint64 // events dropped: fd closed or generation reused
	ctlAdd         atomic.Uint64
	ctlDel         atomic.Uint64
	levelDisarms   atomic.Uint64 // LevelTriggered readers disarmed for not reading
	accepts        atomic.Uint64 // connections accepted on this poller
	acceptBackoffs atomic.Uint64 // accept back-offs while out of fds or memory
	rotations      atomic.Uint64 // Exclusive listener registrations re-queued
	handOffs       atomic.Uint64 // accept edges handed to this poller's acceptor
	sendfiles      atomic.Uint64 // sendfile calls (Conn.ReadFrom)
	sendfileBytes  atomic.Uint64 // bytes they sent
	splices        atomic.Uint64 // splice calls, into and out of the pipe (ReadFrom, WriteTo)
	spliceBytes    atomic.Uint64 // bytes spliced out to the destination
}

func newPoller(id int, cfg Config) (_ *poller, err error) {
	p := &poller{id: id, epfd: -1, evfd: -1, mode: cfg.Mode, wait: cfg.wait(), spin: cfg.Spin,
		shortRead: cfg.shortRead(), stopped: make(chan struct{}), events: make([]unix.EpollEvent, pollBatch)}
	defer func() {
		if err != nil {
			p.closeFDs() // p, not the nil result
		}
	}()
	if cfg.autoSpin() {
		if err = acquireWake(); err != nil {
			return nil, err
		}
		p.auto = newAutoSpin(wakeCost) // closeFDs releases it
	}
	if p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if cfg.BusyPoll != 0 {
		if err = setBusyPoll(p.epfd, cfg.BusyPoll); err != nil {
			return nil, err
		}
	}
	if p.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	// The eventfd is told apart by its fd number, which the table never holds.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.evfd)}
	if err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, p.evfd, &ev); err != nil {
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return p, nil
}

// closeFDs closes the poller's fds and lets go of what it shares with other
// pollers (SpinAuto's measurement of W).
func (p *poller) closeFDs() {
	if p.auto != nil {
		releaseWake()
		p.auto = nil
	}
	if p.evfd >= 0 {
		unix.Close(p.evfd)
	}
	if p.epfd >= 0 {
		unix.Close(p.epfd)
	}
}

// start runs the loop in its own goroutine.
func (p *poller) start() error {
	var nested *os.File
	if p.wait == WaitNested {
		// os.NewFile registers a non-blocking fd with the runtime poller.
		if err := unix.SetNonblock(p.epfd, true); err != nil {
			return os.NewSyscallError("fcntl", err)
		}
		nested = os.NewFile(uintptr(p.epfd), "netpoll-epoll")
	}
	go func() {
		defer close(p.stopped)
		if p.auto != nil {
			defer p.auto.release()
		}
		switch p.wait {
		case WaitNested:
			p.runNested(nested)
		case WaitBlock:
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p.runBlocking(false)
		case WaitYield:
			p.runBlocking(true)
		}
	}()
	return nil
}

// stop ends the loop, waits for it and closes the epoll fd and eventfd.
func (p *poller) stop() {
	var one = [8]byte{1}
	for {
		_, err := unix.Write(p.evfd, one[:])
		if err != unix.EINTR {
			break
		}
	}
	<-p.stopped
	if p.wait == WaitNested {
		p.epfd = -1 // closed by the os.File in runNested
	}
	p.closeFDs()
}

// runBlocking is the loop of WaitBlock and WaitYield: epoll_wait(-1), and in
// between, while events keep coming (yield) or within the spin budget,
// epoll_wait(0) with the P yielded between polls.
func (p *poller) runBlocking(yield bool) {
	for {
		p.st.blockingWaits.Add(1)
		n, woke, stop := p.poll(-1)
		if stop {
			return
		}
		p.st.wakeups.Add(1)
		if woke == 0 {
			p.st.emptyWakeups.Add(1)
		}
		for {
			spin := p.spinning(p.news(n, woke))
			if !spin && !(yield && n > 0) {
				break
			}
			runtime.Gosched() // let the goroutines just woken run on this P
			if n, woke, stop = p.poll(0); stop {
				return
			}
			if spin && n > 0 {
				p.st.spinHits.Add(1)
			}
		}
	}
}

func (p *poller) runNested(f *os.File) {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		panic("netpoll: SyscallConn of an os.File failed: " + err.Error())
	}
	stopped, parked, spun := false, false, false
	// RawConn.Read calls the function until it returns true, parking on the
	// runtime's netpoller (edge-triggered on our epoll fd) in between. An
	// edge after our epoll_wait(0) found the ready list empty makes the
	// runtime wake us, so returning false with nothing pending loses nothing.
	err = rc.Read(func(uintptr) bool {
		first := parked
		parked = false
		for {
			n, woke, stop := p.poll(0)
			if stop {
				stopped = true
				return true
			}
			if spun && n > 0 {
				p.st.spinHits.Add(1)
			}
			spun = false
			if first {
				p.st.wakeups.Add(1)
				if woke == 0 {
					p.st.emptyWakeups.Add(1)
				}
				first = false
			}
			if n == len(p.events) {
				continue // more may be pending
			}
			if p.spinning(p.news(n, woke)) {
				runtime.Gosched()
				spun = true
				continue
			}
			p.st.blockingWaits.Add(1)
			parked = true
			return false
		}
	})
	if err != nil || !stopped {
		panic("netpoll: nested poller stopped without being asked: " + errString(err))
	}
}

// news is how many of a poll's n events, of which woke woke a goroutine,
// tell the spin policy that traffic goes on. A LevelTriggered poller
// reports a ready fd at every poll until it is read or disarmed: events
// that woke nobody there are repeats, such as a listener kept readable
// while its acceptor backs off out of fds, and must not keep the poller
// spinning (TestFaultAcceptOutOfFDs). In the other modes each event is a
// new edge.
func (p *poller) news(n, woke int) int {
	if p.mode == LevelTriggered {
		return woke
	}
	return n
}

// spinning reports, after a poll that returned n events, whether the loop
// should poll again without blocking: Spin < 0 always, Spin > 0 until Spin
// has passed since events were last seen, SpinAuto as autoSpin.next
// decides. It counts the spin poll to come.
func (p *poller) spinning(n int) bool {
	if p.auto != nil {
		if !p.auto.next(n, monoNow(), &p.st) {
			return false
		}
	} else if p.spin == 0 {
		return false
	} else if p.spin > 0 {
		now := time.Now()
		if n > 0 {
			p.lastEvent = now
		} else if now.Sub(p.lastEvent) >= p.spin {
			return false
		}
	}
	p.st.spinPolls.Add(1)
	return true
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// poll makes one epoll_wait with the given timeout (ms; -1 blocks) and
// dispatches what it returns: how many events, how many goroutines they
// woke, and whether the stop eventfd fired.
func (p *poller) poll(msec int) (n, woke int, stop bool) {
	p.st.waits.Add(1)
	n, err := unix.EpollWait(p.epfd, p.events, msec)
	if err != nil {
		if err == unix.EINTR {
			return 0, 0, false
		}
		panic("netpoll: epoll_wait on our own epoll fd failed: " + err.Error())
	}
	p.st.events.Add(uint64(n))
	woke, stop = p.dispatch(p.events[:n])
	if p.mode == LevelTriggered {
		p.levelGuard(p.events[:n], woke)
	}
	return n, woke, stop
}

// dispatch hands each event to its descriptor's directions.
func (p *poller) dispatch(evs []unix.EpollEvent) (woke int, stop bool) {
	for i := range evs {
		ev := &evs[i]
		fd := int(ev.Fd)
		if fd == p.evfd {
			stop = true
			continue
		}
		d := p.table.get(fd)
		if d == nil || d.gen != uint32(ev.Pad) {
			p.st.stale.Add(1)
			continue
		}
		woke += d.event(ev.Events)
		if d.mode != EdgeTriggered {
			p.rearmAfterEvent(d)
		}
	}
	return woke, stop
}

// levelGuard stops a LevelTriggered poller from spinning on readers that do
// not read: a batch that woke nobody yields the P so they can run, and once
// such batches have gone on for levelRepeatWindow their read interest is
// disarmed until they park again (two EPOLL_CTL_MOD calls, counted).
func (p *poller) levelGuard(evs []unix.EpollEvent, woke int) {
	if len(evs) == 0 || woke > 0 {
		p.repeatSince = time.Time{}
		return
	}
	now := time.Now()
	if p.repeatSince.IsZero() {
		p.repeatSince = now
	}
	if now.Sub(p.repeatSince) < levelRepeatWindow {
		runtime.Gosched()
		return
	}
	p.repeatSince = time.Time{}
	for i := range evs {
		d := p.table.get(int(evs[i].Fd))
		if d == nil || d.gen != uint32(evs[i].Pad) || d.mode != LevelTriggered || d.rd.state.Load() == stWaiting {
			continue
		}
		if d.incref() != nil {
			continue // closing; and without a reference its fd may be reused under the MOD
		}
		d.armMu.Lock()
		if a := d.armed.Load(); a&unix.EPOLLIN != 0 && d.rd.state.Load() != stWaiting {
			if p.modify(d, a&^readInterest(d)) == nil {
				p.st.levelDisarms.Add(1)
			}
		}
		d.armMu.Unlock()
		d.decref()
	}
}

// readInterest is what d's readers wait for. A connection that skips after
// short reads also asks for EPOLLPRI, in every mode: a read stops short at
// urgent data's mark with the rest already queued, and only the sticky bit
// tells (a LevelTriggered poller nested in the runtime's netpoller does not
// report a level that is still pending again, see TestShortReadPending).
func readInterest(d *desc) uint32 {
	switch {
	case d.kind == kindListener:
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
	case OneShot:
		return unix.EPOLLONESHOT // disarmed: each park arms what it waits for
	case LevelTriggered:
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
	if d.shared {
		d.mode = EdgeTriggered
	}
	d.skip = p.shortRead && d.kind == kindConn
	ev := registration(d)
	d.armed.Store(ev &^ (unix.EPOLLET | unix.EPOLLONESHOT))
	// In the table before epoll_ctl, so the first event finds d.
	return p.table.insert(d, func() error { return p.add(d, ev|extra) })
}

func (p *poller) add(d *desc, events uint32) error {
	e := unix.EpollEvent{Events: events, Fd: int32(d.fd), Pad: int32(d.gen)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, d.fd, &e); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.st.ctlAdd.Add(1)
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
// item in the ready list and wakes the instance's waiters.
func (p *poller) readd(d *desc, events uint32) error {
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, d.fd, nil); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	p.st.ctlDel.Add(1)
	return p.add(d, events)
}

// unregister removes d from epoll and the table and retires its counters.
func (p *poller) unregister(d *desc) {
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, d.fd, nil); err == nil {
		p.st.ctlDel.Add(1)
	}
	p.table.clear(d, true)
}

// modify sets d's epoll interest to events with EPOLL_CTL_MOD. Called with
// d.armMu held.
func (p *poller) modify(d *desc, events uint32) error {
	flags := uint32(0)
	if d.mode == OneShot {
		flags = unix.EPOLLONESHOT
	}
	e := unix.EpollEvent{Events: events | flags, Fd: int32(d.fd), Pad: int32(d.gen)}
	d.ctlMod.Add(1)
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, d.fd, &e); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	d.armed.Store(events)
	return nil
}

// interest is what d must be armed for given who is parked: OneShot arms
// exactly the parked directions, LevelTriggered keeps reading armed and adds
// EPOLLOUT while a writer is parked.
func interest(d *desc) uint32 {
	var ev uint32
	in := readInterest(d)
	if d.mode == LevelTriggered || d.rd.state.Load() == stWaiting {
		ev |= in
	}
	if d.wr.state.Load() == stWaiting {
		ev |= unix.EPOLLOUT
	}
	return ev
}

// armForPark makes sure an event will come for a direction about to park.
// EdgeTriggered: nothing to do, ever. OneShot: re-arm (one EPOLL_CTL_MOD per
// park). LevelTriggered: only if the wanted interest is not armed already.
func (p *poller) armForPark(d *desc, dr *dir) error {
	if d.mode == EdgeTriggered {
		return nil
	}
	d.armMu.Lock()
	defer d.armMu.Unlock()
	want := interest(d)
	if d.mode == LevelTriggered && d.armed.Load() == want {
		return nil
	}
	if d.mode == LevelTriggered && p.wait == WaitNested {
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

// rearmAfterEvent runs on the poller after an event for d in OneShot or
// LevelTriggered mode. OneShot: the kernel disarmed the whole fd, so a
// direction still parked must be armed again. LevelTriggered: drop EPOLLOUT
// once no writer is parked, or it would fire on every epoll_wait.
func (p *poller) rearmAfterEvent(d *desc) {
	if d.mode == OneShot && d.rd.state.Load() != stWaiting && d.wr.state.Load() != stWaiting {
		return
	}
	if d.mode == LevelTriggered && d.armed.Load()&unix.EPOLLOUT == 0 {
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
	want := interest(d)
	if (d.mode == OneShot && want != 0) || (d.mode == LevelTriggered && want != d.armed.Load()) {
		// An error means d is being closed concurrently: nothing to arm.
		_ = p.modify(d, want)
	}
}

// stats snapshots the poller: its own counters, its closed descriptors' and
// its live ones'.
func (p *poller) stats() PollerStats {
	s := PollerStats{
		EpollWaits:     p.st.waits.Load(),
		BlockingWaits:  p.st.blockingWaits.Load(),
		Wakeups:        p.st.wakeups.Load(),
		EmptyWakeups:   p.st.emptyWakeups.Load(),
		SpinPolls:      p.st.spinPolls.Load(),
		SpinHits:       p.st.spinHits.Load(),
		SpinDecisions:  p.st.spinDecisions.Load(),
		SpinFound:      p.st.spinFound.Load(),
		SpinGaveUp:     p.st.spinGaveUp.Load(),
		SpinTime:       time.Duration(p.st.spinNanos.Load()),
		BlockCost:      time.Duration(p.st.blockCost.Load()),
		Events:         p.st.events.Load(),
		StaleEvents:    p.st.stale.Load(),
		CtlAdd:         p.st.ctlAdd.Load(),
		CtlDel:         p.st.ctlDel.Load(),
		LevelDisarms:   p.st.levelDisarms.Load(),
		Accepts:        p.st.accepts.Load(),
		AcceptBackoffs: p.st.acceptBackoffs.Load(),
		Rotations:      p.st.rotations.Load(),
		HandOffs:       p.st.handOffs.Load(),
		Sendfiles:      p.st.sendfiles.Load(),
		SendfileBytes:  p.st.sendfileBytes.Load(),
		Splices:        p.st.splices.Load(),
		SpliceBytes:    p.st.spliceBytes.Load(),
	}
	c, live := p.table.counters()
	c.into(&s)
	s.Descriptors = uint64(live)
	return s
}
