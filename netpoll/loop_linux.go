package netpoll

import (
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// The wait loops: how a poller waits (Config.Wait).
//
//   - WaitBlock, a locked OS thread in epoll_wait(-1), readies goroutines
//     onto the P of a thread that goes straight back into a blocking
//     syscall: they run only once sysmon retakes that P or another thread
//     steals them, a cross-core wakeup each time.
//   - WaitYield yields the P after each batch, but when events stop it
//     still blocks a thread holding its P.
//   - WaitNested parks the epoll fd in the runtime's netpoller, so the
//     thread the kernel wakes runs the poller and then, on the same P, the
//     goroutines it readied; no thread is dedicated to the poller. It is
//     the default; its cost against package net is one epoll_wait(0) and
//     one goroutine switch more per wakeup.
//   - WaitInline lets the operation about to park wait on the epoll fd
//     itself, so the thread the kernel wakes runs it with no switch; the
//     poller's goroutine runs only to watch for operations with deadlines
//     or left unwatched (inline_linux.go).
//
// What each costs is measured in the recorded runs, not here: testdata/core/
// (in-process echo under each Wait, the choice of WaitNested) and
// testdata/default/ (cmd/netpollbench: netpoll's default against package
// net, with the machine's calibration); testdata/README.md gives their
// commands and machines.

// runBlocking is the loop of WaitBlock and WaitYield: epoll_wait(-1), and in
// between, while events keep coming (yield) or within the spin budget,
// epoll_wait(0) with the P yielded between polls.
func (p *poller) runBlocking(yield bool) {
	for {
		p.st.inc(cBlockingWaits)
		n, woke, stop := p.poll(-1)
		if stop {
			return
		}
		p.countWakeup(woke)
		for {
			spin := p.chooseSpin(p.freshEvents(n, woke))
			if !spin && !(yield && n > 0) {
				break
			}
			runtime.Gosched() // let the goroutines just woken run on this P
			if n, woke, stop = p.poll(0); stop {
				return
			}
			if spin && n > 0 {
				p.st.inc(cSpinHits)
			}
		}
	}
}

// runNested is the loop of WaitNested: one RawConn.Read on the epoll fd
// (f) that polls with epoll_wait(0) and parks in the runtime's netpoller
// when nothing is ready. It returns only to stop: re-entering RawRead would
// reset the runtime's readiness of the fd (see poller.strategy).
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
				p.st.inc(cSpinHits)
			}
			spun = false
			if first {
				p.countWakeup(woke)
				first = false
			}
			if n == len(p.events) {
				continue // more may be pending
			}
			if p.chooseSpin(p.freshEvents(n, woke)) {
				runtime.Gosched()
				spun = true
				continue
			}
			p.st.inc(cBlockingWaits)
			parked = true
			return false
		}
	})
	if err != nil || !stopped {
		panic("netpoll: nested poller stopped without being asked: " + errString(err))
	}
}

// countWakeup counts a blocking wait that returned, whose first poll woke
// woke goroutines.
func (p *poller) countWakeup(woke int) {
	p.st.inc(cWakeups)
	if woke == 0 {
		p.st.inc(cEmptyWakeups)
	}
}

// freshEvents is how many of a poll's n events, of which woke woke a goroutine,
// tell the spin policy that traffic goes on. A LevelTriggered poller
// reports a ready fd at every poll until it is read or disarmed: events
// that woke nobody there are repeats, such as a listener kept readable
// while its acceptor backs off out of fds, and must not keep the poller
// spinning (TestFaultAcceptOutOfFDs). In the other modes each event is a
// new edge.
func (p *poller) freshEvents(n, woke int) int {
	if p.mode == LevelTriggered {
		return woke
	}
	return n
}

// chooseSpin decides, after a poll that returned n events, whether the loop
// should poll again without blocking: Spin < 0 always, Spin > 0 until Spin
// has passed since events were last seen, SpinAuto as autoSpin.next
// decides. It counts the spin poll to come.
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
	if p.mode == LevelTriggered {
		p.levelGuard(p.events[:n], woke)
	}
	return n, woke, stop
}
