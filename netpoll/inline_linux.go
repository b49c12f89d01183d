package netpoll

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"

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
// The role is one word, role in the low bits and the count of operations
// parked on their channels (waiters) above:
//
//	roleLoop    the poller's goroutine is in (or entering) RawRead: it
//	            watches for the waiters, and leaves the role after a poll
//	            that woke one (it will come back to park and may take it)
//	roleInline  a parking operation is in (or entering) RawRead
//	roleOut     a holder left with waiters (fewer than inlineCrowd, else
//	            the role goes to loop): nobody watches until the next
//	            operation to park takes the role, or inlineHandoff has passed
//	            and the timer gives it to the loop goroutine; the last
//	            waiter to leave it, or the timer finding none, makes it vacant
//	roleVacant  nobody watches and no operation waits
//
// Invariants: an operation parks on its channel only by adding itself to the
// waiters of a word whose role is loop or inline, by moving the role to
// loop itself (with a deadline, see park), or by moving it out (or, in a
// crowd, to loop) as it steps aside, and every move out arms the timer
// (wentOut), so a waiter is never left unwatched for longer than twice the
// handoff (at most 2·inlineHandoffMax); the loop goroutine is active
// exactly while the role is loop (the baton, capacity 1, carries each move to
// loop); and whoever enters RawRead polls before it parks, since entering
// resets the runtime's readiness of the epoll fd and an edge that came while
// nobody was inside would otherwise be lost.
const (
	roleLoop uint64 = iota
	roleInline
	roleOut
	roleVacant

	roleMask   uint64 = 3
	waiterUnit uint64 = 4
)

// inlineHandoff bounds how long waiters go unwatched after a holder left
// with its own event: the time a request-response handler usually takes to
// park again. It is where the bound starts and where a takeover puts it
// back; while holders keep coming back before the timer fires, it doubles
// up to inlineHandoffMax. A timer that fires into an idle process wakes it:
// at 500µs, a 2k req/s open loop on one connection (its acceptor a waiter,
// the reader leaving with its own event each request) paid one such
// wakeup per request, 54 to 61-64µs of server CPU per request (pinned,
// 2-vCPU EPYC guest); at 5ms, 54-58µs, package net's 52-54µs.
const (
	inlineHandoff    = 500 * time.Microsecond
	inlineHandoffMax = 4 * time.Millisecond
)

// inlineCrowd is the count of parked operations from which the role stays
// with the loop goroutine: waitNested's loop, whose one goroutine polls for
// them all. With one P a holder carries on with its own event where the
// loop would hop; but with several, while the holder, having left with its
// event, serves it, nobody watches for the others, and an idle P that
// package net's poller would have fed with their events stays idle. (Echo
// at 50 connections, unpinned on 2 vCPUs: holders handing the role round
// served 0.90x net's req/s at net's CPU per request.)
const inlineCrowd = 4

type inlineWait struct {
	p      *poller
	word   atomic.Uint64 // role | waiters*waiterUnit
	rc     syscall.RawConn
	kickfd int                 // eventfd registered edge-triggered: written to wake the holder
	holder atomic.Pointer[dir] // the direction waiting inline, nil if none
	// polling is set while the holder polls: a token sent meanwhile is seen
	// by the holder's check after the poll, so it needs no kick.
	polling atomic.Bool
	timer   *time.Timer        // roleOut's bound: gives the role to the loop
	armed   atomic.Bool        // the timer is pending
	outSeq  atomic.Uint64      // moves to roleOut so far
	seenSeq atomic.Uint64      // outSeq when the timer was last armed or fired
	handoff atomic.Int64       // the timer's delay now, inlineHandoff to inlineHandoffMax (ns)
	baton   chan struct{}      // capacity 1: wakes the loop goroutine into roleLoop
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
	iw := &inlineWait{p: p, kickfd: -1, baton: make(chan struct{}, 1), quit: make(chan struct{})}
	iw.word.Store(roleVacant) // the loop goroutine starts dormant
	iw.handoff.Store(int64(inlineHandoff))
	iw.step = iw.holderStep
	iw.held = pollStep{p: p, spins: true}
	iw.timer = time.AfterFunc(time.Hour, iw.takeover)
	iw.timer.Stop()
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
	return iw, nil
}

func (iw *inlineWait) close() {
	iw.timer.Stop()
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
			// wakes the loop goroutine to watch.
			if iw.word.CompareAndSwap(w, (w&^roleMask|roleLoop)+waiterUnit) {
				iw.p.st.inc(cTakeovers)
				iw.baton <- struct{}{}
				inlineParkHook(false)
				return iw.parkChan(dr)
			}
			continue
		}
		if iw.word.CompareAndSwap(w, w&^roleMask|roleInline) {
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
	if iw.word.Add(^(waiterUnit - 1)) == roleOut { // minus one waiter
		// The last waiter of a role out: nobody is left to watch for,
		// so the role is vacant (else the timer would hand the loop
		// goroutine a role with nobody to wake, and the next operation
		// to park would wait behind it, two hops). A holder leaves the
		// role out with the waiters it has just woken still counted.
		iw.word.CompareAndSwap(roleOut, roleVacant)
	}
	return t
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
func (iw *inlineWait) leave() {
	for {
		w := iw.word.Load()
		if w >= waiterUnit {
			iw.moveOut(0)
			return
		}
		if iw.word.CompareAndSwap(w, roleVacant) {
			return
		}
	}
}

// moveOut gives the role up with operations parked, adding add (0 or one
// waiterUnit: the caller itself) to their count: out with the timer
// running, or, in a crowd (inlineCrowd waiters or more), to the loop
// goroutine.
func (iw *inlineWait) moveOut(add uint64) {
	for {
		w := iw.word.Load()
		if (w+add)/waiterUnit >= inlineCrowd {
			if iw.word.CompareAndSwap(w, (w&^roleMask|roleLoop)+add) {
				iw.p.st.inc(cCrowdHandoffs)
				iw.baton <- struct{}{}
				return
			}
			continue
		}
		if iw.word.CompareAndSwap(w, (w&^roleMask|roleOut)+add) {
			iw.wentOut()
			return
		}
	}
}

// wentOut follows each move to roleOut: it counts it and arms the timer
// unless it is pending already. A pending timer fires at most the handoff
// after any move out; it takes over only if the role has been out since it
// was armed or last fired, and otherwise re-arms, so waiters go unwatched for
// less than twice the handoff (2·inlineHandoffMax at most) and a busy
// holder makes one timer event per handoff, not one per request. A timer
// that finds the role taken back since it was armed doubles the handoff; a
// takeover puts it back to inlineHandoff.
func (iw *inlineWait) wentOut() {
	seq := iw.outSeq.Add(1)
	if !iw.armed.Swap(true) {
		iw.seenSeq.Store(seq)
		iw.timer.Reset(time.Duration(iw.handoff.Load()))
	}
}

// holdersReturn doubles the handoff, up to inlineHandoffMax: the timer found
// the role taken back since it was armed. Only the timer's function writes
// handoff, apart from its initial store.
func (iw *inlineWait) holdersReturn() {
	iw.handoff.Store(min(2*iw.handoff.Load(), int64(inlineHandoffMax)))
}

// takeover is the timer's function (see wentOut).
func (iw *inlineWait) takeover() {
	for {
		w := iw.word.Load()
		if w == roleOut { // no waiters left: vacant, see parkChan
			if !iw.word.CompareAndSwap(w, roleVacant) {
				continue
			}
		} else if w&roleMask == roleOut {
			if seq := iw.outSeq.Load(); seq != iw.seenSeq.Load() {
				iw.holdersReturn()
				iw.seenSeq.Store(seq)
				iw.timer.Reset(time.Duration(iw.handoff.Load()))
				return
			}
			if iw.word.CompareAndSwap(w, w&^roleMask|roleLoop) {
				// Nobody moves the role out again before the loop
				// goroutine, woken by the baton below, leaves it.
				iw.p.st.inc(cTakeovers)
				iw.handoff.Store(int64(inlineHandoff))
				iw.armed.Store(false)
				iw.baton <- struct{}{}
				return
			}
			continue
		} else {
			iw.holdersReturn()
		}
		iw.armed.Store(false)
		// A move out between the load above and the store would have
		// found the timer armed: look again.
		if iw.word.Load()&roleMask != roleOut || iw.armed.Swap(true) {
			return
		}
		iw.seenSeq.Store(iw.outSeq.Load())
		iw.timer.Reset(time.Duration(iw.handoff.Load()))
		return
	}
}

// kickIfHolder wakes the holder after a token was sent to dr by someone
// other than the holder's own poll.
func (iw *inlineWait) kickIfHolder(dr *dir) {
	if iw.holder.Load() != dr || iw.polling.Load() {
		return
	}
	var one = [8]byte{1}
	for {
		if _, err := unix.Write(iw.kickfd, one[:]); err != unix.EINTR {
			return
		}
	}
}

// runInline is the loop goroutine of waitInline: waitNested's loop while it
// holds the role, leaving it after a poll that woke someone, and never
// spinning (pollStep.spins is false).
func (p *poller) runInline(f *os.File) {
	defer f.Close()
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
			if woke > 0 && iw.word.Load()/waiterUnit < inlineCrowd {
				return true
			}
			if !s.next(n, woke) {
				return false
			}
		}
	}
	for {
		select {
		case <-iw.baton:
		case <-iw.quit:
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
