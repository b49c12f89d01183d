package netpoll

import (
	"context"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// The loop (dispatch=loop, wait=block only): a Server's handlers run on the
// poller's own thread, one after another, as a callback library's event
// loop runs its callbacks.
//
// Why. Every other dispatch readies a goroutine per request: the runtime
// then wakes a second thread whenever a P is idle, and the goroutine runs
// on whichever thread finds it. A serial loop on one locked thread wakes
// nobody while requests keep coming: the thread polls, runs each ready
// connection's handler, and polls again. Measured on echo at 50 connections
// unpinned (testdata/issue35/loop, four runs): the loop spent 0.84-0.98x
// package net's CPU per request, gnet 0.79-0.89x, dispatch=hot 0.93-1.09x.
//
// The role. Whoever runs the loop holds the role; the role's word says
// what the holder does:
//
//	even   the holder polls, or moves between connections
//	odd    the holder runs a connection (serverConn.runOn: its hand-offs
//	       and handler calls)
//
// The word grows by one at every move, so a value names one run. Only the
// holder makes it odd (loopRole.run). Three things make it even again, each
// with a CAS from the run's value, so that exactly one of them wins:
//
//   - the holder, when the run returns (it keeps the role);
//   - the watchdog, when the same run has lasted through a whole tick
//     (loopTick): a takeover; the holder's goroutine finishes its run as a
//     goroutine of its own and exits, and a new goroutine holds the role;
//   - the holder itself, as its handler parks in a Read of the connection
//     it runs (passOnPark): the park would wait for a poll that only the
//     loop makes. The goroutine stays with its connection, as a goroutine
//     of its own.
//
// A handler that ends its goroutine (runtime.Goexit) in a run passes the
// role on the same way, from the loop's deferred call.
//
// The queue, the poll step and the poller's events belong to the role:
// only the holder touches them, and the CAS that passes the role orders
// the old holder's last touch before the new holder's first (the new one is
// started after the CAS, by its winner).
//
// Invariants: one goroutine holds the role; a connection on the queue is
// owned by the role and leaves it for exactly one run (by the holder, or on
// a goroutine of its own when it is demoted or the poller stops); a run
// the watchdog took, or a call that held the loop demoteAfter or more,
// demotes its connection (demoteRuns calls on goroutines of their own
// before it runs on the loop again).
type loopRole struct {
	p    *poller
	word atomic.Uint64
	// cur is the holder's run record (loopRun): a new holder stores its
	// own before its first run, so no record of a goroutine that lost the
	// role stays reachable from here.
	cur atomic.Pointer[loopRun]

	// Owned by the role's holder.
	step  pollStep
	queue []*serverConn
	head  int

	// aheads are the runs' inputs read ahead (loopAhead), guarded by
	// aheadMu: the holder's run's, and those of runs passed on while
	// their handlers still run.
	aheadMu sync.Mutex
	aheads  []*loopAhead

	tick      <-chan time.Time // a test's clock for the watchdog (testHookLoopTick), nil for the timer
	dogAsleep atomic.Bool      // the watchdog sleeps until the loop runs a connection
	dogWake   chan struct{}    // capacity 1: the send that wakes it
	quit      chan struct{}    // closed once the loop has stopped
}

// loopRun is what a holder goroutine keeps of the run it makes: one per
// goroutine, reused run after run. sc and mine are stored before the word
// moves to odd, and sc is cleared once the run returns: passOnPark loads
// the word, then cur and its fields, so an odd word seen with r.mine equal
// to it and r.sc == sc is sc's run. The run's owner tells a pass from a
// takeover by passed, which passOnPark stores after it won the word: a run
// that lost the word and was not passed was taken by the watchdog.
type loopRun struct {
	sc     atomic.Pointer[serverConn]
	mine   atomic.Uint64
	call   atomic.Int64  // serveClock when the run's current call began
	passed atomic.Uint32 // runPassed or runPassedSlow once a park passed the run on
}

const (
	runPassed     = 1 // a park passed the run on
	runPassedSlow = 2 // ... after its call had held the loop demoteAfter or more
)

// loopTick is the watchdog's period: a run that lasts through a whole tick
// is taken over, so a handler that blocks holds the other connections up
// for at most two ticks (the run may begin just after a tick), plus the
// time the runtime takes to run the watchdog. The watchdog wakes once per
// tick while the loop runs connections, and sleeps through a tick in
// which none ran: 500 wakeups a second at most, where a timer per run would
// cost one per request (a timer that comes due earlier than the
// runtime's netpoller sleeps breaks its sleep).
const loopTick = 2 * time.Millisecond

func newLoopRole(p *poller) *loopRole {
	lp := &loopRole{p: p, step: pollStep{p: p, spins: true}, queue: make([]*serverConn, 0, pollBatch),
		dogWake: make(chan struct{}, 1), quit: make(chan struct{})}
	if h := testHookLoopTick.Load(); h != nil {
		lp.tick = *h
	}
	return lp
}

// queued is notify's part for a served connection whose read direction the
// holder's poll moved out of serve: the role owns it now, and runs it after
// the poll.
func (lp *loopRole) queued(sc *serverConn) { lp.queue = append(lp.queue, sc) }

// start runs the first holder and the watchdog.
func (lp *loopRole) start() {
	go lp.watchdog()
	go lp.run()
}

// run is the loop, for the goroutine that holds the role: the queue, then
// a poll, until the poller stops (it closes p.stopped) or the role passes
// on while this goroutine runs a connection (it exits, its run finished).
func (lp *loopRole) run() {
	runtime.LockOSThread()
	r := new(loopRun)
	lp.cur.Store(r)
	var mine uint64   // the word of this goroutine's run, while it runs one
	var la *loopAhead // its input read ahead, while it runs one
	done := false
	defer func() {
		if !done && la != nil {
			lp.release(la) // the handler ended its goroutine
		}
		if !done && mine != 0 && lp.word.CompareAndSwap(mine, mine+1) {
			// A handler ended the goroutine (runtime.Goexit) in a run:
			// the role goes to a new one. The thread goes with this one.
			lp.p.st.inc(cLoopPasses)
			go lp.run()
		}
	}()
	s := &lp.step
	s.block()
	msec := -1
	for {
		for lp.head < len(lp.queue) {
			sc := lp.queue[lp.head]
			lp.queue[lp.head] = nil
			lp.head++
			if sc.demoted > 0 {
				sc.start(true) // ours: the role owned it
				continue
			}
			r.sc.Store(sc)
			r.passed.Store(0)
			r.mine.Store(lp.word.Load() + 1) // the holder alone moves an even word
			mine = lp.word.Add(1)
			lp.wakeDog()
			var check bool
			la, check = lp.readAhead(sc)
			sc.runOn(check, nil, 0, lp, r)
			pprof.SetGoroutineLabels(context.Background())
			if la != nil {
				lp.release(la)
				la = nil
			}
			if !lp.word.CompareAndSwap(mine, mine+1) {
				// Passed on while the run ran: the run is finished,
				// and the role is another goroutine's.
				done = true
				runtime.UnlockOSThread()
				return
			}
			mine = 0
			r.sc.Store(nil) // holds no connection past its run
		}
		clear(lp.queue[:lp.head])
		lp.queue, lp.head = lp.queue[:0], 0
		n, woke, stop := s.poll(msec)
		if stop {
			lp.stop()
			done = true
			runtime.UnlockOSThread()
			return
		}
		msec = -1
		if s.next(n, woke) {
			msec = 0
		}
	}
}

// stop is the holder's last act, after its poll saw the stop eventfd: the
// connections the poll readied run on goroutines of their own, and the
// watchdog and poller.stop are told. The word stays even: nothing runs on
// the loop again, so the watchdog never takes it.
func (lp *loopRole) stop() {
	for _, sc := range lp.queue[lp.head:] {
		sc.start(true)
	}
	clear(lp.queue)
	lp.queue, lp.head = lp.queue[:0], 0
	close(lp.quit)
	close(lp.p.stopped)
}

// blocked reports, for the owner of run r once it has seen the word move,
// whether its connection must be demoted: the watchdog took the run (not
// a park's pass), or the call held the loop demoteAfter or more before its
// park passed it on.
func (r *loopRun) blocked() bool { return r.passed.Load() != runPassed }

// passOnPark is called by an operation about to park in dr of sc's
// descriptor: if sc is the connection the holder runs, the caller is the
// holder (only a connection's owner reads it, and a connection run on the
// loop is the holder's), and the park would wait for a poll only the loop
// makes, so the role goes to a new goroutine first and this one stays
// with its connection.
//
// It unlocks the caller's thread: the holder's, locked by run. A goroutine
// other than the handler that reads the connection while the handler runs
// on the loop (which nothing else stops) would pass the loop on too, and
// lose one of its own LockOSThread calls, if it had made any.
func (lp *loopRole) passOnPark(sc *serverConn) {
	w := lp.word.Load()
	r := lp.cur.Load()
	if w&1 == 0 || r == nil || r.mine.Load() != w || r.sc.Load() != sc || !lp.word.CompareAndSwap(w, w+1) {
		return
	}
	passed := uint32(runPassed)
	if serveClock()-time.Duration(r.call.Load()) >= demoteAfter {
		passed = runPassedSlow
	}
	r.passed.Store(passed)
	lp.p.st.inc(cLoopPasses)
	runtime.UnlockOSThread()
	go lp.run()
}

// wakeDog wakes the watchdog if it sleeps, after the word moved to odd: the
// watchdog stores dogAsleep and then loads the word, so one of the two
// sees the other.
func (lp *loopRole) wakeDog() {
	if lp.dogAsleep.Load() && lp.dogAsleep.CompareAndSwap(true, false) {
		lp.dogWake <- struct{}{}
	}
}

// testHookLoopTick, when set by a test, replaces the watchdog's timer in
// the pollers made while it is set: each receive is a tick, so that which
// runs are taken does not depend on the machine's speed.
var testHookLoopTick atomic.Pointer[chan time.Time]

// watchdog takes the role from a run that lasted through a whole tick, and
// sleeps while no run happens.
func (lp *loopRole) watchdog() {
	tick := lp.tickSource()
	defer tick.stop()
	last := lp.word.Load()
	for {
		select {
		case <-lp.quit:
			return
		case <-tick.c:
		}
		lp.p.st.inc(cLoopTicks)
		w := lp.word.Load()
		switch {
		case w != last:
			last = w // runs moved on
		case w&1 == 1:
			// The same run through a whole tick: blocked.
			if lp.word.CompareAndSwap(w, w+1) {
				lp.p.st.inc(cLoopTakeovers)
				go lp.run()
			}
			last = lp.word.Load()
		default:
			// Nothing ran through a whole tick: sleep until a run starts.
			lp.dogAsleep.Store(true)
			if lp.word.Load() == w || !lp.dogAsleep.CompareAndSwap(true, false) {
				select {
				case <-lp.dogWake:
				case <-lp.quit:
					return
				}
			}
			last = lp.word.Load()
		}
		tick.reset()
	}
}

// loopTicker is the watchdog's clock: a timer, or a test's channel.
type loopTicker struct {
	c <-chan time.Time
	t *time.Timer
}

func (lp *loopRole) tickSource() *loopTicker {
	if lp.tick != nil {
		return &loopTicker{c: lp.tick}
	}
	t := time.NewTimer(loopTick)
	return &loopTicker{c: t.C, t: t}
}

// reset starts the next tick (the timer has fired and been received).
func (lt *loopTicker) reset() {
	if lt.t != nil {
		lt.t.Reset(loopTick)
	}
}

func (lt *loopTicker) stop() {
	if lt.t != nil {
		lt.t.Stop()
	}
}

// Read-ahead on the loop. Before a run, the holder reads the connection's
// input into a pooled buffer (aheadSlot.readAhead, as a hot connection's
// wait does), and the handler's Read takes it from there: the read answers
// whether the edge the poll found is stale and reads the request in one
// syscall, where asking the socket first (the hand-off's check) costs a
// poll(2) per run. EAGAIN (a stale edge) runs the hand-off's check, which
// finds nothing and idles the connection with no call; input, an error or
// the end of input calls the handler with no check.
//
// A run's input lives in a loopAhead, on the loop's list from the read to
// the run's end, not in the connection's records: every idle connection
// would pay a pointer for it. A run passed on keeps its loopAhead while
// its handler goes on as a goroutine of its own. Everything that reads the
// connection finds it through desc.aheadOf, as a hot connection's, and
// takes it first; the hand-off calls the handler again while any is left
// (serverConn.handOff), so a run never ends with input read ahead but to
// close, and release then drops it.

// loopAhead is one run's input read ahead.
type loopAhead struct {
	sc   *serverConn
	slot aheadSlot
}

var loopAheads = sync.Pool{New: func() any { return new(loopAhead) }}

// readAhead reads sc's input ahead for the run about to start, if its
// connection may (desc.mayReadAhead), and reports the run's record (nil
// when it read nothing ahead: released already) and whether the run must
// ask the socket first (check): it may not read ahead, or found nothing.
// The record is announced on the list before mayReadAhead is looked at,
// as a hot wait announces its buffer: File marks, then looks.
func (lp *loopRole) readAhead(sc *serverConn) (la *loopAhead, check bool) {
	d := sc.desc()
	if !d.p.readAhead || !d.mayReadAhead() {
		return nil, true
	}
	if d.begin(&d.rd) != nil {
		return nil, true // closed: the run's hand-off says so
	}
	la = loopAheads.Get().(*loopAhead)
	la.sc = sc
	lp.aheadMu.Lock()
	lp.aheads = append(lp.aheads, la)
	lp.aheadMu.Unlock()
	read, found := la.slot.readAhead(d, d.fd, false) // its registration wants input: nothing to watch
	d.end(&d.rd)
	if !read || !found {
		lp.release(la)
		return nil, true
	}
	lp.p.st.inc(cLoopReadsAhead)
	return la, false
}

// aheadOf returns the slot of the input read ahead for d's connection by
// a run, nil if none holds any; with d's read direction's mu held.
func (lp *loopRole) aheadOf(d *desc) *aheadSlot {
	sc := d.srv.Load()
	if sc == nil {
		return nil
	}
	lp.aheadMu.Lock()
	defer lp.aheadMu.Unlock()
	for _, la := range lp.aheads {
		if la.sc == sc && la.slot.Load() != nil {
			return &la.slot
		}
	}
	return nil
}

// release takes la off the list at its run's end, dropping any input left
// (the connection closes then), and gives it back to the pool.
func (lp *loopRole) release(la *loopAhead) {
	if la.slot.Load() != nil {
		d := la.sc.desc()
		d.rd.mu.Lock()
		la.slot.drop()
		d.rd.mu.Unlock()
	}
	lp.aheadMu.Lock()
	for i, x := range lp.aheads {
		if x == la {
			last := len(lp.aheads) - 1
			lp.aheads[i] = lp.aheads[last]
			lp.aheads[last] = nil
			lp.aheads = lp.aheads[:last]
			break
		}
	}
	lp.aheadMu.Unlock()
	la.sc = nil
	loopAheads.Put(la)
}
