package netpoll

import (
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// waitInline: the operation about to park waits on the epoll fd itself.
//
// waitNested costs two goroutine hops per wakeup: the runtime's netpoller
// readies the poller's goroutine, whose epoll_wait(0) finds the event and
// readies the parked operation. Under waitInline the operation that parks
// when nobody else watches the epoll fd takes the poller's role (the
// "holder"): it enters RawConn.Read on the epoll fd itself, so the runtime
// readies it directly, it polls, dispatches what it found to others, and
// carries on without a switch when its own direction was among them. A
// holder whose poll woke others before its own event came steps aside: it
// moves the role out and waits on its channel, so that one of those it woke
// takes the role when it parks again. Without that, a server's Accept,
// parked first and woken rarely, would keep the role and wake every reader
// through its channel: two hops again (measured so).
//
// The role is one word, laid out as
//
//	bits 0-1   role (below)
//	bit  2     armed: the watch port is armed (or its arm is under way by
//	           the goroutine that set the bit, or its fire is not yet
//	           taken); whoever clears it in a CAS disarms, unless the fire
//	           was reported to it
//	bits 3-31  gen: +1 at each takeover, so that a CAS made on a word
//	           loaded before a takeover fails (29 bits: ABA needs 2^29
//	           takeovers between a load and its CAS)
//	bits 32-63 the count of operations parked on their channels (waiters)
//
// and the roles are:
//
//	roleLoop    the poller's goroutine holds the role: in (or entering)
//	            RawRead on the epoll fd, watching for the waiters, and
//	            leaving after a poll that woke one (it will come back to
//	            park and may take it); or, called by a crowd or by an
//	            operation with a deadline, parked on the armed watch port,
//	            to enter at the epoll fd's first event
//	roleInline  a parking operation is in (or entering) RawRead
//	roleOut     a holder left with waiters (fewer than inlineCrowd, else
//	            the role goes to loop): nobody polls the epoll fd, the
//	            watch port is armed, and the poller's goroutine (the
//	            watcher) takes the role at the epoll fd's first event
//	            (a takeover), unless an operation parking takes it first;
//	            the last waiter to leave it makes it vacant
//	roleVacant  nobody watches and no operation waits
//
// Invariants: an operation parks on its channel only by adding itself to the
// waiters of a word whose role is loop or inline, by moving the role to
// loop itself (with a deadline, see park), or by moving it out (or, in a
// crowd, to loop) as it steps aside; every move into roleOut, and every
// call of the loop, arms the watch port, so a waiter is never left
// unwatched: the first event on the epoll fd wakes the watcher through the
// runtime, as it would a reader of package net; the loop goroutine polls
// the epoll fd only while the role is loop; and whoever enters RawRead, on
// the epoll fd or on the watch port, polls before it parks, since entering
// resets the runtime's readiness of the fd and an edge that came while
// nobody was inside would otherwise be lost (for the port, see
// watch_linux.go, point 5).
const (
	roleLoop uint64 = iota
	roleInline
	roleOut
	roleVacant

	roleMask   uint64 = 3
	armedBit   uint64 = 4
	genUnit    uint64 = 8
	genMask    uint64 = 1<<32 - genUnit
	waiterUnit uint64 = 1 << 32
)

// inlineCrowd is the count of parked operations from which the role stays
// with the loop goroutine: waitNested's loop, whose one goroutine polls for
// them all. With one P a holder carries on with its own event where the
// loop would hop; but with several, while the holder, having left with its
// event, serves it, nobody polls for the others, and an idle P that
// package net's poller would have fed with their events stays idle. (Echo
// at 50 connections, unpinned on 2 vCPUs: holders handing the role round
// served 0.90x net's req/s at net's CPU per request.)
const inlineCrowd = 4

type inlineWait struct {
	p      *poller
	word   atomic.Uint64 // role | armed | gen | waiters, see above
	rc     syscall.RawConn
	file   *os.File            // the epoll fd's, whose SyscallConn rc is; closed by poller.stop
	port   *watchPort          // armed while the role is out, or called to loop
	kickfd int                 // eventfd registered edge-triggered: written to wake the holder
	holder atomic.Pointer[dir] // the direction waiting inline, nil if none
	// polling is set while the holder polls: a token sent meanwhile is seen
	// by the holder's check after the poll, so it needs no kick.
	polling atomic.Bool
	quit    chan struct{}      // closed by stop
	step    func(uintptr) bool // holderStep, made once: a method value made per park would allocate
	aside   bool               // the holder steps aside; owned by the holder
	// held is the holders' pollStep, passed from one to the next with the
	// role: the role word's CAS orders one holder's use before the next's.
	// It spins by the poller's adaptive spinning policy (p.auto), which under
	// waitInline only holders touch, the loop goroutine never spinning. A
	// holder gives up its spinning slot as it leaves (leaveRole), so that a
	// slot is never held while nobody holds the role.
	held pollStep
}

func newInlineWait(p *poller) (*inlineWait, error) {
	iw := &inlineWait{p: p, kickfd: -1, quit: make(chan struct{})}
	iw.word.Store(roleVacant) // the loop goroutine starts watching a disarmed port
	iw.step = iw.holderStep
	iw.held = pollStep{p: p, spins: true}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	iw.kickfd = fd
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}
	if err := epollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		iw.close()
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	if iw.port, err = newWatchPort(p); err != nil {
		iw.close()
		return nil, err
	}
	return iw, nil
}

// close closes the watch port and the kick eventfd. The poller closes
// its epoll fd after them.
func (iw *inlineWait) close() {
	if iw.port != nil {
		iw.port.close()
	}
	if iw.kickfd >= 0 {
		unix.Close(iw.kickfd)
		iw.kickfd = -1
	}
}

// testHookInlinePark, when set by a test, runs as an operation commits to
// its wait: inline (it holds the role) or on its channel (a waiter).
var testHookInlinePark atomic.Pointer[func(inline bool)]

func inlineParkHook(inline bool) {
	if h := testHookInlinePark.Load(); h != nil {
		(*h)(inline)
	}
}

// withRole returns w with its role replaced, gen and waiters kept, and the
// armed bit set or cleared.
func withRole(w, role uint64, armed bool) uint64 {
	w = w&^(roleMask|armedBit) | role
	if armed {
		w |= armedBit
	}
	return w
}

// armed follows a CAS that set the armed bit: it arms the port if the bit
// was clear in the word replaced (was).
func (iw *inlineWait) armed(was uint64) {
	if was&armedBit == 0 {
		iw.portCtl(iw.port.arm())
	}
}

// disarmed follows a CAS that cleared the armed bit: it disarms the port if
// the bit was set in the word replaced (was).
func (iw *inlineWait) disarmed(was uint64) {
	if was&armedBit != 0 {
		iw.portCtl(iw.port.disarm())
	}
}

// portCtl checks an arm or disarm of the watch port. EPOLL_CTL_MOD of the
// poller's own epoll fd in its own port fails only if the registration is
// gone (ENOENT: a broken invariant) or the process is being killed (EINTR);
// a failed arm would leave waiters unwatched for good.
func (iw *inlineWait) portCtl(err error) {
	if err != nil {
		panic("netpoll: epoll_ctl on the poller's own watch port failed: " + err.Error())
	}
}

// park waits for dr's wake token, as dir.park does, watching the epoll fd
// itself when nobody else does.
func (iw *inlineWait) park(dr *dir) (timedOut bool) {
	for {
		w := iw.word.Load()
		role := w & roleMask
		if role == roleLoop || role == roleInline {
			if iw.word.CompareAndSwap(w, w+waiterUnit) {
				inlineParkHook(false)
				return iw.parkChan(dr)
			}
			continue
		}
		if dr.deadline.Load() != 0 {
			// The holder parks in RawRead without a timer of its own:
			// an operation with a deadline waits on its channel and
			// calls the loop goroutine, which enters at the epoll fd's
			// first event (the port armed).
			if iw.word.CompareAndSwap(w, withRole(w, roleLoop, true)+waiterUnit) {
				iw.armed(w)
				iw.p.st.inc(cTakeovers)
				inlineParkHook(false)
				return iw.parkChan(dr)
			}
			continue
		}
		if iw.word.CompareAndSwap(w, withRole(w, roleInline, false)) {
			iw.disarmed(w)
			iw.p.st.inc(cInlineWaits)
			inlineParkHook(true)
			if !iw.hold(dr) {
				return false
			}
			// Stepped aside: wait on the channel, the role out (or to
			// the loop goroutine, in a crowd).
			iw.p.st.inc(cStepAsides)
			iw.moveOut(waiterUnit)
			inlineParkHook(false)
			return iw.parkChan(dr)
		}
	}
}

func (iw *inlineWait) parkChan(dr *dir) bool {
	t := dr.park()
	for {
		w := iw.word.Load()
		next := w - waiterUnit
		if next < waiterUnit && next&roleMask == roleOut {
			// The last waiter of a role out: nobody is left to watch
			// for, so the role is vacant (else the watcher would take,
			// at the next event, a role with nobody to wake, and the next
			// operation to park would wait behind it, two hops). The
			// port stays armed (the bit kept): a disarm here could land
			// after a later arm by another goroutine; the next holder
			// disarms it, or the watcher's idle fire uses it up. A holder
			// leaves the role out with the waiters it has just woken still
			// counted.
			next = withRole(next, roleVacant, next&armedBit != 0)
		}
		if iw.word.CompareAndSwap(w, next) {
			if next < waiterUnit && next&roleMask == roleLoop {
				// The last waiter of the loop, which may be parked
				// in RawRead with nobody to watch for: kicked, it polls
				// and leaves (runInline), and the next operation to park
				// waits inline.
				iw.kick()
			}
			return t
		}
	}
}

// hold runs the holder's wait: RawRead on the epoll fd until dr's token
// (false), or until a poll woke others and dr's token has not come (true:
// the caller steps aside, the role out, so that one of them takes it when
// it parks again).
func (iw *inlineWait) hold(dr *dir) (stepAside bool) {
	iw.aside, iw.held.spun, iw.held.parked = false, false, false
	iw.holder.Store(dr)
	err := iw.rc.Read(iw.step)
	iw.holder.Store(nil)
	if err != nil {
		panic("netpoll: RawConn.Read on our own epoll fd failed: " + err.Error())
	}
	if a := iw.p.auto; a != nil {
		a.leaveRole()
	}
	if iw.aside {
		return true
	}
	iw.leave()
	return false
}

// holderStep is the holder's RawRead callback: poll, dispatch, and return
// true once the holder's own token has come, or a poll woke others before
// it (the holder steps aside). With adaptive spinning the holder spins as the
// nested loop does, for as long as the policy says; the poll on entry is
// the poll after events the policy expects at an idle moment, since the
// previous holder left with its event.
func (iw *inlineWait) holderStep(uintptr) bool {
	s, dr := &iw.held, iw.holder.Load()
	for {
		iw.polling.Store(true)
		n, woke, _ := s.poll(0) // the stop eventfd is level-triggered: the loop sees it
		iw.polling.Store(false)
		done := false
		select {
		case <-dr.token:
			done = true
		default:
			if woke > 0 {
				iw.aside, done = true, true
			}
		}
		if done {
			s.leave(n, woke)
			return true
		}
		if !s.next(n, woke) {
			return false
		}
	}
}

// leave gives the role up: vacant when nobody waits, else as moveOut does.
// Only the role's holder (an operation or the loop goroutine) calls it.
func (iw *inlineWait) leave() {
	for {
		w := iw.word.Load()
		if w >= waiterUnit {
			iw.moveOut(0)
			return
		}
		if iw.word.CompareAndSwap(w, withRole(w, roleVacant, w&armedBit != 0)) {
			return
		}
	}
}

// moveOut gives the role up with operations parked, adding add (0 or one
// waiterUnit: the caller itself) to their count: out with the watch port
// armed, or, in a crowd (inlineCrowd waiters or more), to the loop
// goroutine, which enters the epoll fd at its first event.
func (iw *inlineWait) moveOut(add uint64) {
	for {
		w := iw.word.Load()
		role := roleOut
		if (w+add)/waiterUnit >= inlineCrowd {
			role = roleLoop
		}
		if iw.word.CompareAndSwap(w, withRole(w, role, true)+add) {
			iw.armed(w)
			if role == roleLoop {
				iw.p.st.inc(cCrowdHandoffs)
			}
			return
		}
	}
}

// kickIfHolder wakes the holder after a token was sent to dr by someone
// other than the holder's own poll.
func (iw *inlineWait) kickIfHolder(dr *dir) {
	if iw.holder.Load() != dr || iw.polling.Load() {
		return
	}
	iw.kick()
}

// kick makes an event on the epoll fd: whoever polls it looks again.
func (iw *inlineWait) kick() {
	var one = [8]byte{1}
	for {
		if _, err := unix.Write(iw.kickfd, one[:]); err != unix.EINTR {
			return
		}
	}
}

// watch is the watcher's wait: RawRead on the watch port until the port
// fires with the role out (a takeover: the role is the loop's, one
// generation on) or called to the loop, then true; false once stop has
// closed quit. The port is polled first in every callback (watch_linux.go,
// point 5). A fire that finds the role otherwise (taken back by an
// operation parking, or vacant) is an idle fire: the watcher waits again.
func (iw *inlineWait) watch() bool {
	took := false
	err := iw.port.rc.Read(func(uintptr) bool {
		if iw.port.fired() {
			for {
				w := iw.word.Load()
				switch w & roleMask {
				case roleOut:
					// The fire was reported to us: the port is quiet,
					// so the bit clears without a disarm.
					if iw.word.CompareAndSwap(w, withRole(w, roleLoop, false)+genUnit) {
						iw.p.st.inc(cTakeovers)
						took = true
						return true
					}
					continue
				case roleLoop: // called (see the roles above)
					if iw.word.CompareAndSwap(w, withRole(w, roleLoop, false)) {
						took = true
						return true
					}
					continue
				}
				iw.p.st.inc(cWatchIdleFires)
				if w&armedBit != 0 && !iw.word.CompareAndSwap(w, w&^armedBit) {
					continue
				}
				break
			}
		}
		select {
		case <-iw.quit:
			return true
		default:
			return false
		}
	})
	if err != nil {
		panic("netpoll: RawConn.Read on our own watch port failed: " + err.Error())
	}
	return took
}

// runInline is the loop goroutine of waitInline: the watcher while the role
// is out or vacant, and waitNested's loop while it holds the role, leaving
// it after a poll that woke someone, and never spinning (pollStep.spins is
// false).
func (p *poller) runInline() {
	iw := p.inline
	s := pollStep{p: p}
	stopped := false
	step := func(uintptr) bool {
		for {
			n, woke, stop := s.poll(0)
			if stop {
				stopped = true
				return true
			}
			// Leave after a poll that woke someone, unless a crowd
			// waits, or when nobody waits (after a takeover whose
			// waiters left meanwhile): the loop watches for waiters only.
			if waiters := iw.word.Load() / waiterUnit; woke > 0 && waiters < inlineCrowd || waiters == 0 {
				return true
			}
			if !s.next(n, woke) {
				return false
			}
		}
	}
	for {
		if !iw.watch() {
			return
		}
		if err := iw.rc.Read(step); err != nil {
			panic("netpoll: RawConn.Read on our own epoll fd failed: " + err.Error())
		}
		if stopped {
			return
		}
		iw.leave()
	}
}

// stopWatcher wakes the watcher to see quit closed: the stop eventfd,
// level-triggered and written, keeps the epoll fd ready, so the arm fires
// at once.
func (iw *inlineWait) stopWatcher() {
	close(iw.quit)
	iw.portCtl(iw.port.arm())
}
