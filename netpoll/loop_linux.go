package netpoll

import (
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// The wait loops: how a poller waits (the wait key).
//
//   - waitBlock, a locked OS thread in epoll_wait(-1), readies goroutines
//     onto the P of a thread that goes straight back into a blocking
//     syscall: they run only once sysmon retakes that P or another thread
//     steals them, a cross-core wakeup each time.
//   - waitNested parks the epoll fd in the runtime's netpoller, so the
//     thread the kernel wakes runs the poller and then, on the same P, the
//     goroutines it readied; no thread is dedicated to the poller. It is
//     the default; its cost against package net is one epoll_wait(0) and
//     one goroutine switch more per wakeup.
//   - waitInline lets the operation about to park wait on the epoll fd
//     itself, so the thread the kernel wakes runs it with no switch; the
//     poller's goroutine runs only to watch for operations with deadlines
//     or left unwatched (inline_linux.go).
//
// Every loop, and each waitInline holder in turn, polls through one
// pollStep: poll, count the wakeup, go on after a full batch, ask the spin
// policy, count the block. A loop only says what ends it early (the stop
// eventfd, its own token) and how it blocks (epoll_wait(-1), or returning
// false to RawConn.Read).
//
// What each costs is measured in the recorded runs, not here: testdata/core/
// (in-process echo under each Wait, the choice of waitNested) and
// testdata/default/ (cmd/netpollbench: netpoll's default against package
// net, with the machine's calibration); testdata/README.md gives their
// commands and machines. (WaitYield, a goroutine that yielded its P after
// each batch and blocked its thread in epoll_wait(-1) when events stopped,
// was removed: no configuration netpollbench runs used it.)

// pollStep is what one wait loop keeps between its polls. Only the loop's
// goroutine (for a waitInline holder: the holder of the role, which the
// role word passes from one to the next) touches it.
type pollStep struct {
	p *poller
	// spins: the loop may spin (chooseSpin). waitInline's loop goroutine
	// never does: it runs only while no operation holds the role, and
	// leaves after a poll that woke one.
	spins  bool
	parked bool // the loop blocked since its last poll: the next poll ends a wakeup
	spun   bool // the loop yielded to spin since its last poll: events there are a spin hit
}

// poll makes one epoll_wait with timeout msec (-1 blocks) and dispatches
// its events, counting a wakeup when the loop had blocked and a spin hit
// when it had spun.
func (s *pollStep) poll(msec int) (n, woke int, stop bool) {
	p := s.p
	n, woke, stop = p.poll(msec)
	if s.spun && n > 0 {
		p.st.inc(cSpinHits)
	}
	s.spun = false
	if s.parked {
		s.parked = false
		p.st.inc(cWakeups)
		if woke == 0 {
			p.st.inc(cEmptyWakeups)
		}
	}
	return n, woke, stop
}

// next decides, after a poll that returned n events of which woke woke an
// operation, whether the loop polls again at once (true: the batch was
// full, or the spin policy spins, after the P was yielded so that the
// goroutines just woken run first) or blocks (false, counted).
func (s *pollStep) next(n, woke int) bool {
	p := s.p
	if n == len(p.events) {
		return true // more may be pending
	}
	if s.spins && p.chooseSpin(p.freshEvents(n, woke)) {
		runtime.Gosched()
		s.spun = true
		return true
	}
	s.block()
	return false
}

// block counts a blocking wait the loop is about to make.
func (s *pollStep) block() {
	s.p.st.inc(cBlockingWaits)
	s.parked = true
}

// leave tells the spin policy about a poll with events after which the
// loop returns instead of asking next: a waitInline holder whose own token
// came. The policy learns that an idle period ended; its "poll again" is
// the poll the next holder makes as it takes the role.
func (s *pollStep) leave(n, woke int) {
	if p := s.p; s.spins && n > 0 && p.auto != nil {
		p.auto.next(p.freshEvents(n, woke), monoNow(), &p.st)
	}
}

// runBlocking is the loop of waitBlock: epoll_wait(-1), and, while the
// spin budget says so, epoll_wait(0) with the P yielded between polls.
func (p *poller) runBlocking() {
	s := pollStep{p: p, spins: true}
	s.block()
	msec := -1
	for {
		n, woke, stop := s.poll(msec)
		if stop {
			return
		}
		msec = -1
		if s.next(n, woke) {
			msec = 0
		}
	}
}

// runNested is the loop of waitNested: one RawConn.Read on the epoll fd
// (f) that polls with epoll_wait(0) and parks in the runtime's netpoller
// when nothing is ready. It returns only to stop: re-entering RawRead would
// reset the runtime's readiness of the fd (see poller.strategy).
func (p *poller) runNested(f *os.File) {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		panic("netpoll: SyscallConn of an os.File failed: " + err.Error())
	}
	s := pollStep{p: p, spins: true}
	stopped := false
	// RawConn.Read calls the function until it returns true, parking on the
	// runtime's netpoller (edge-triggered on our epoll fd) in between. An
	// edge after our epoll_wait(0) found the ready list empty makes the
	// runtime wake us, so returning false with nothing pending loses nothing.
	err = rc.Read(func(uintptr) bool {
		for {
			n, woke, stop := s.poll(0)
			if stop {
				stopped = true
				return true
			}
			if !s.next(n, woke) {
				return false
			}
		}
	})
	if err != nil || !stopped {
		panic("netpoll: nested poller stopped without being asked: " + errString(err))
	}
}

// freshEvents is how many of a poll's n events, of which woke woke a goroutine,
// tell the spin policy that traffic goes on. A levelTriggered poller
// reports a ready fd at every poll until it is read or disarmed: events
// that woke nobody there are repeats, such as a listener kept readable
// while its acceptor backs off out of fds, and must not keep the poller
// spinning (TestFaultAcceptOutOfFDs). In the other modes each event is a
// new edge.
func (p *poller) freshEvents(n, woke int) int {
	if p.mode == levelTriggered {
		return woke
	}
	return n
}

// chooseSpin decides, after a poll that returned n events, whether the loop
// should poll again without blocking: Spin < 0 always, Spin > 0 until Spin
// has passed since events were last seen, adaptive spinning as autoSpin.next
// decides. It counts the spin poll to come. Only pollStep.next calls it.
func (p *poller) chooseSpin(n int) bool {
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
	p.st.inc(cSpinPolls)
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
	p.st.inc(cEpollWaits)
	n, err := unix.EpollWait(p.epfd, p.events, msec)
	if err != nil {
		if err == unix.EINTR {
			return 0, 0, false
		}
		panic("netpoll: epoll_wait on our own epoll fd failed: " + err.Error())
	}
	if n == 0 {
		p.st.inc(cEmptyPolls)
	} else {
		p.st.add(cEvents, uint64(n))
	}
	woke, stop = p.dispatch(p.events[:n])
	if woke > 0 {
		p.st.add(cWoken, uint64(woke))
	}
	if p.mode == levelTriggered {
		p.levelGuard(p.events[:n], woke)
	}
	return n, woke, stop
}
