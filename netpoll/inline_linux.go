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
//	bit  3     owed: the role is out (or called to loop) and the port not
//	           yet armed; the first goroutine to reach a settle point arms
//	           it (settle, below). Never set with armed.
//	bit  4     lost: an epoll_ctl on the watch port failed; the poller's
//	           goroutine polls the epoll fd for good and every operation
//	           parks on its channel (lose). Never cleared.
//	bit  5     passed: a goroutine readied by a poll of the role's current
//	           holding has gone on (a waiter back from its channel, a
//	           handler started by an edge: pass); cleared as the role
//	           changes hands (withRole)
//	bits 6-31  gen: +1 at each takeover, so that a CAS made on a word
//	           loaded before a takeover fails (26 bits: ABA needs 2^26
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
//	            watch port is armed (or owed), and the poller's goroutine
//	            (the watcher) takes the role at the epoll fd's first event
//	            (a takeover), unless an operation parking takes it first;
//	            the last waiter to leave it makes it vacant
//	roleVacant  nobody watches and no operation waits
//
// Invariants: an operation parks on its channel only by adding itself to the
// waiters of a word whose role is loop or inline (or that is lost), by
// moving the role to loop itself (with a deadline, see park), or by moving
// it out (or, in a crowd, to loop) as it steps aside; every move into roleOut, and every
// call of the loop, arms the watch port or leaves it owed, so an event that
// arrives while the role is out wakes someone: the first event on the epoll
// fd wakes the watcher through the runtime, as it would a reader of package
// net; the loop goroutine polls the epoll fd only while the role is loop;
// and whoever enters RawRead, on the epoll fd or on the watch port, polls
// before it parks, since entering resets the runtime's readiness of the fd
// and an edge that came while nobody was inside would otherwise be lost
// (for the port, see watch_linux.go, point 5).
//
// Why an arm may be owed (mode=lt). Arming re-polls the epoll fd and fires
// at once if it is ready (watch_linux.go, point 2), and a level-triggered
// fd stays ready until it is read: a holder that leaves with its own event,
// or the loop leaving after a poll that woke someone, leaves fds that are
// ready until the goroutines just woken read them. Armed then, the port
// fires at once: a takeover that wakes nobody, after which the loop holds
// the role and the next park waits on its channel, two hops, and the loop
// leaves again with that reader's fd ready: one such takeover per request.
// So under mode=lt a holder leaving after a poll that woke someone leaves
// the arm owed instead, and a goroutine that poll readied arms it at its
// next settle point: right after the syscall it retries (desc.transfer),
// before a RawConn callback (rawIO), as the operation ends (desc.end), or,
// a handler started by an edge, before it runs (serverConn.run). An
// operation about to park takes the role from out, owed or not, and polls
// first.
//
// The invariant holds through the owed window, because the window opens
// only when a goroutine is sure to settle after it opened, running only
// this package's code, at most one syscall, before its settle point, never
// user code: so it is bounded by a runnable goroutine's syscall, and an
// event that arrives in it stays in the epoll fd, where the arm finds it
// and fires, or the parker's first poll does. Who is sure to settle:
//
//   - a holder whose own token came (oweSelf) settles itself, after the
//     CAS that made the arm owed;
//   - the goroutines a poll readied (oweWoken: the loop, or a holder that
//     steps aside) may run before the holder's leaving CAS and settle while
//     nothing is owed yet. Each of them first marks the word passed, in the
//     CAS by which a waiter leaves its channel (parkChan) or in pass (a
//     handler started), and the holder leaves the arm owed only if passed
//     is still clear in its leaving CAS. The CASes on the one word are
//     ordered: if passed was clear, each goroutine the poll readied makes
//     its mark, and then settles, after the arm was made owed; if it was
//     set, the holder arms at once, as in the other modes.
const (
	roleLoop uint64 = iota
	roleInline
	roleOut
	roleVacant

	roleMask   uint64 = 3
	armedBit   uint64 = 1 << 2
	owedBit    uint64 = 1 << 3
	lostBit    uint64 = 1 << 4
	passBit    uint64 = 1 << 5
	genUnit    uint64 = 1 << 6
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
	quit    chan struct{}         // closed by stop
	lostErr atomic.Pointer[error] // the first failed epoll_ctl on the port (lose)
	step    func(uintptr) bool    // holderStep, made once: a method value made per park would allocate
	watchFn func(uintptr) bool    // watchStep, made once
	took    bool                  // watchStep took the role; owned by the loop goroutine, the one watcher
	aside   bool                  // the holder steps aside; owned by the holder
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
	iw.step, iw.watchFn = iw.holderStep, iw.watchStep
	iw.held = pollStep{p: p, spins: true}
	fd, err := newKick(p.epfd)
	if err != nil {
		return nil, err
	}
	iw.kickfd = fd
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

// withRole returns w with its role replaced, gen, lost and waiters kept,
// passed cleared, and the armed and owed bits replaced by bits (0, armedBit
// or owedBit).
func withRole(w, role, bits uint64) uint64 {
	return w&^(roleMask|armedBit|owedBit|passBit) | role | bits
}

// owing says who settles the arm a holder leaving under mode=lt may leave
// owed (see "Why an arm may be owed" above).
type owing uint8

const (
	oweNone  owing = iota // nobody: arm now
	oweSelf               // the holder, whose own token came
	oweWoken              // the goroutines the holder's last poll readied, unless passed
)

// armed follows a CAS that set the armed bit: it arms the port if the bit
// was clear in the word replaced (was).
func (iw *inlineWait) armed(was uint64) {
	if was&armedBit == 0 {
		if err := iw.port.arm(); err != nil {
			iw.lose(err)
		}
	}
}

// disarmed follows a CAS that cleared the armed bit: it disarms the port if
// the bit was set in the word replaced (was).
func (iw *inlineWait) disarmed(was uint64) {
	if was&armedBit != 0 {
		if err := iw.port.disarm(); err != nil {
			iw.lose(err)
		}
	}
}

// pass marks the word passed, then settles: a handler started by an edge
// (serverConn.run), which, unlike a waiter, made no CAS on the word as it
// was readied.
func (iw *inlineWait) pass() {
	for {
		w := iw.word.Load()
		if w&passBit != 0 || iw.word.CompareAndSwap(w, passNext(w)) {
			break
		}
	}
	iw.settle()
}

// settle arms the port if the arm is owed (see the word's owed bit). It is
// called at the settle points: after an operation's syscall (desc.transfer),
// before a RawConn callback (rawIO), as an operation ends (desc.end), and
// before a handler started by an edge runs (serverConn.run).
func (iw *inlineWait) settle() {
	for {
		w := iw.word.Load()
		next, ok := settleNext(w)
		if !ok {
			return
		}
		if iw.word.CompareAndSwap(w, next) {
			iw.armed(w)
			return
		}
	}
}

// The word's transitions, as pure functions of the word loaded: the CAS
// loops above and below call them, and FuzzInlineRole drives them through
// interleavings of the goroutines that call them. Each returns the word
// to CAS in, and what the caller does once its CAS succeeded.

// settleNext: an owed arm becomes armed (ok), which the caller makes.
func settleNext(w uint64) (next uint64, ok bool) {
	if w&owedBit == 0 {
		return w, false
	}
	return w&^owedBit | armedBit, true
}

// passNext marks the word passed (pass).
func passNext(w uint64) uint64 { return w | passBit }

// retireNext marks the word lost, never armed or owed again, the role the
// loop's unless an operation holds it (retire).
func retireNext(w uint64) uint64 {
	next := w&^(armedBit|owedBit) | lostBit
	if w&roleMask != roleInline {
		next = withRole(next, roleLoop, 0)
	}
	return next
}

// parkHow is what an operation about to park does (park).
type parkHow uint8

const (
	parkWaiter parkHow = iota // wait on its channel, counted
	parkCall                  // call the loop (armed), then wait on its channel
	parkHold                  // take the role and poll the epoll fd
)

// parkNext is park's transition for an operation with a deadline or not.
// After parkCall the caller arms if the armed bit was clear in w; after
// parkHold it disarms if it was set.
func parkNext(w uint64, deadline bool) (uint64, parkHow) {
	role := w & roleMask
	switch {
	case role == roleLoop || role == roleInline || w&lostBit != 0:
		return w + waiterUnit, parkWaiter
	case deadline:
		return withRole(w, roleLoop, armedBit) + waiterUnit, parkCall
	}
	return withRole(w, roleInline, 0), parkHold
}

// chanLeaveNext is parkChan's transition as a waiter leaves its channel:
// kick says the caller kicks the loop, left with nobody to watch for.
func chanLeaveNext(w uint64) (next uint64, kick bool) {
	next = w - waiterUnit
	if next < waiterUnit && next&roleMask == roleOut {
		next = withRole(next, roleVacant, next&armedBit)
	}
	kick = next < waiterUnit && next&roleMask == roleLoop && next&lostBit == 0
	return next | passBit, kick
}

// moveOutNext is moveOut's transition (lt: the poller is level-triggered).
// arm: the caller arms if the armed bit was clear in w; crowd: the role
// went to the loop for a crowd.
func moveOutNext(w, add uint64, lt bool, owe owing) (next uint64, arm, crowd bool) {
	role, bits := roleOut, armedBit
	if (w+add)/waiterUnit >= inlineCrowd {
		role = roleLoop
	}
	switch {
	case w&lostBit != 0:
		role, bits = roleLoop, 0
	case w&armedBit == 0 && lt &&
		(owe == oweSelf || owe == oweWoken && w&passBit == 0):
		bits = owedBit
	}
	return withRole(w, role, bits) + add, bits == armedBit, role == roleLoop && w&lostBit == 0
}

// leaveNext is leave's transition: vacant when nobody waits, else as
// moveOutNext with nobody added.
func leaveNext(w uint64, lt bool, owe owing) (next uint64, arm, crowd bool) {
	if w >= waiterUnit || w&lostBit != 0 {
		return moveOutNext(w, 0, lt, owe)
	}
	return withRole(w, roleVacant, w&armedBit), false, false
}

// fireNext is the watcher's transition after the port reported a fire:
// took, the watcher holds the role (takeover: it took it from out, one
// generation on); else an idle fire, whose armed bit is cleared (the
// fire used the arm up) and whose CAS the caller skips if next == w.
func fireNext(w uint64) (next uint64, took, takeover bool) {
	switch w & roleMask {
	case roleOut:
		// The fire was reported to us: the port is quiet, so the bit
		// clears without a disarm.
		return withRole(w, roleLoop, 0) + genUnit, true, true
	case roleLoop: // called (see the roles above)
		return withRole(w, roleLoop, 0), true, false
	}
	return w &^ armedBit, false, false
}

// lose is the fallback after an epoll_ctl on the watch port failed, as a
// failed epoll_ctl fails a descriptor (poller.fail): EPOLL_CTL_MOD of the
// poller's own epoll fd in its own port fails only if the registration is
// gone (ENOENT, a broken invariant) or the kernel is out of memory, and a
// port that is not armed would leave waiters unwatched. So the role goes to
// the poller's goroutine for good, as waitNested's loop: the word is marked
// lost, the role is the loop's unless an operation holds it (which hands it
// to the loop as it leaves), every operation parks on its channel from now
// on, and the loop polls the epoll fd and never leaves. The watcher, parked
// on the port, is woken by a read deadline in the past on the port's file,
// which needs no epoll_ctl; it then enters the epoll fd's RawRead, which
// lets it in once a holder still there has left. The first error is kept
// (InlineWatchLost in the tests).
func (iw *inlineWait) lose(err error) {
	iw.lostErr.CompareAndSwap(nil, &err)
	iw.retire()
}

// retire marks the word lost and wakes the watcher: lose's part, and stop's,
// after which nobody arms or disarms the port, closed with the poller.
func (iw *inlineWait) retire() {
	for {
		w := iw.word.Load()
		next := retireNext(w)
		if w == next || iw.word.CompareAndSwap(w, next) {
			break
		}
	}
	iw.port.wake()
}

// park waits for dr's wake token, as dir.park does, watching the epoll fd
// itself when nobody else does.
func (iw *inlineWait) park(dr *dir) (timedOut bool) {
	for {
		// The holder parks in RawRead without a timer of its own: an
		// operation with a deadline waits on its channel and calls the
		// loop goroutine, which enters at the epoll fd's first event (the
		// port armed). Out (armed or owed) or vacant, one without takes
		// the role; the first poll, in hold, finds what came while nobody
		// polled.
		w := iw.word.Load()
		next, how := parkNext(w, dr.deadline.Load() != 0)
		if iw.word.CompareAndSwap(w, next) {
			return iw.parked(dr, w, how)
		}
	}
}

// parked follows park's CAS from w: it waits as how says.
func (iw *inlineWait) parked(dr *dir, w uint64, how parkHow) (timedOut bool) {
	switch how {
	case parkCall:
		iw.armed(w)
		iw.p.st.inc(cTakeovers)
	case parkHold:
		iw.disarmed(w)
		iw.p.st.inc(cInlineWaits)
		inlineParkHook(true)
		if !iw.hold(dr) {
			return false
		}
		// Stepped aside: wait on the channel, the role out (or to the
		// loop goroutine, in a crowd).
		iw.p.st.inc(cStepAsides)
		iw.moveOut(waiterUnit, oweWoken)
	}
	inlineParkHook(false)
	return iw.parkChan(dr)
}

func (iw *inlineWait) parkChan(dr *dir) bool {
	t := dr.park()
	// The last waiter of a role out leaves it vacant: nobody is left to
	// watch for (else the watcher would take, at the next event, a role
	// with nobody to wake, and the next operation to park would wait
	// behind it, two hops). The port stays armed (the bit kept): a disarm
	// here could land after a later arm by another goroutine; the next
	// holder disarms it, or the watcher's idle fire uses it up. An owed
	// arm is dropped: it was owed to the waiters. A holder leaves the role
	// out with the waiters it has just woken still counted. The last
	// waiter of the loop, which may be parked in RawRead with nobody to
	// watch for, kicks it: it polls and leaves (runInline), and the next
	// operation to park waits inline.
	for {
		w := iw.word.Load()
		next, kick := chanLeaveNext(w)
		if iw.word.CompareAndSwap(w, next) {
			if kick {
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
	iw.leave(oweSelf) // its own token came: the holder itself settles an owed arm
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
// owe says who would settle an arm left owed (see owing).
func (iw *inlineWait) leave(owe owing) {
	iw.give(func(w uint64) (uint64, bool, bool) { return leaveNext(w, iw.p.mode == levelTriggered, owe) })
}

// moveOut gives the role up with operations parked, adding add (0 or one
// waiterUnit: the caller itself) to their count: out with the watch port
// armed, or, in a crowd (inlineCrowd waiters or more), to the loop
// goroutine, which enters the epoll fd at its first event. Under mode=lt
// the arm is left owed instead when owe says someone is sure to settle it.
// Once the port is lost, the role goes to the loop, which polls for good.
func (iw *inlineWait) moveOut(add uint64, owe owing) {
	iw.give(func(w uint64) (uint64, bool, bool) { return moveOutNext(w, add, iw.p.mode == levelTriggered, owe) })
}

// give runs leave's and moveOut's CAS loop with their transition.
func (iw *inlineWait) give(next func(uint64) (next uint64, arm, crowd bool)) {
	for {
		w := iw.word.Load()
		n, arm, crowd := next(w)
		if iw.word.CompareAndSwap(w, n) {
			if arm {
				iw.armed(w)
			}
			if crowd {
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
func (iw *inlineWait) kick() { signal(iw.kickfd) }

// watch is the watcher's wait: RawRead on the watch port until the port
// fires with the role out (a takeover: the role is the loop's, one
// generation on) or called to the loop, then true; false once stop has
// closed quit. The port is polled first in every callback (watch_linux.go,
// point 5). A fire that finds the role otherwise (taken back by an
// operation parking, or vacant) is an idle fire: the watcher waits again.
func (iw *inlineWait) watch() bool {
	iw.took = false
	err := iw.port.rc.Read(iw.watchFn)
	if err != nil {
		// The port's read deadline, set by retire: stopped, or the
		// port lost and the role the loop's for good.
		select {
		case <-iw.quit:
			return false
		default:
		}
		if iw.word.Load()&lostBit != 0 {
			return true
		}
		panic("netpoll: RawConn.Read on our own watch port failed: " + err.Error())
	}
	return iw.took
}

// watchStep is watch's RawRead callback (made once, in watchFn: a closure
// made per watch would allocate at every takeover and every call of the
// loop, a Read with a deadline's each park).
func (iw *inlineWait) watchStep(fd uintptr) bool {
	if iw.port.fired(fd) {
		for {
			w := iw.word.Load()
			next, ok, takeover := fireNext(w)
			if next != w && !iw.word.CompareAndSwap(w, next) {
				continue
			}
			if takeover {
				iw.p.st.inc(cTakeovers)
			}
			if ok {
				iw.took = true
				return true
			}
			iw.p.st.inc(cWatchIdleFires)
			break
		}
	}
	select {
	case <-iw.quit:
		return true
	default:
		return false
	}
}

// runInline is the loop goroutine of waitInline: the watcher while the role
// is out or vacant, and waitNested's loop while it holds the role, leaving
// it after a poll that woke someone, and never spinning (pollStep.spins is
// false).
func (p *poller) runInline() {
	iw := p.inline
	s := pollStep{p: p}
	stopped, owe := false, oweNone
	step := func(uintptr) bool {
		for {
			n, woke, stop := s.poll(0)
			if stop {
				stopped = true
				return true
			}
			// Leave after a poll that woke someone, unless a crowd
			// waits, or when nobody waits (after a takeover whose
			// waiters left meanwhile): the loop watches for waiters
			// only. Never once the port is lost.
			w := iw.word.Load()
			if waiters := w / waiterUnit; w&lostBit == 0 && (woke > 0 && waiters < inlineCrowd || waiters == 0) {
				owe = oweNone
				if woke > 0 {
					owe = oweWoken
				}
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
		iw.leave(owe)
	}
}

// stopWatcher makes the watcher return: quit closed, the word retired so
// that nobody arms or disarms the port from now on, and the watcher woken by
// the port's read deadline. A loop goroutine in the epoll fd's RawRead sees
// the stop eventfd instead.
func (iw *inlineWait) stopWatcher() {
	close(iw.quit)
	iw.retire()
}
