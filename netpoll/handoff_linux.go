package netpoll

import (
	"io"
	"math"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// The idle hand-off of a connection served on demand: how its read
// direction enters stServe with no goroutine and how it leaves it (see the
// state table in desc_linux.go). The Server's policy (when to close, what
// to count, the hooks) is in serve_linux.go.

// testHookHandOff, when set by a test, runs at the two windows of a
// hand-off in which an edge, Close or a deadline must not be lost: after
// the socket was found empty and before entering serve, and after entering
// serve and before Close and the deadline are checked.
var testHookHandOff atomic.Pointer[func(sc *serverConn, at handOffPoint)]

type handOffPoint uint8

const (
	hookBeforeServe handOffPoint = iota
	hookInServe
)

// handOff is called by the goroutine that owns sc to give the connection
// back to waiting: after its handler returned nil (returned), at accept,
// and when an edge started it (the edge may be stale: an event for data a
// Read already took, or a levelTriggered repeat).
//
// idle true: the read direction is in stServe, and the caller must not
// touch sc again: whoever moves it out starts the handler. idle false with
// a nil error: the caller keeps sc and calls the handler, because
// something is readable or the read deadline passed while the connection
// was idle or handing off (the handler's Read reports it). A non-nil error
// says the connection is done: it was closed or the Server shut down, or
// the handler returned with its read deadline past (it would otherwise be
// called again at once, for ever) or after its Read met EOF or an error.
//
// What it must not lose is the CL 22031 hazard: data queued before the
// hand-off with no edge to come. The descriptor knows whether an edge came
// since the last attempt, not whether the socket is empty, so it asks the
// socket (poll(2), which leaves a pending error for the next Read) unless
// the last Read proved it drained and no edge came since: then anything
// that comes brings an edge, which notify sees once the direction is in
// serve.
func (sc *serverConn) handOff(returned bool) (idle bool, err error) {
	d, st := sc.desc(), &sc.s.stats
	dr := &d.rd
	if err := d.incref(); err != nil {
		return false, err
	}
	defer d.decref()
	dr.mu.Lock()
	defer dr.mu.Unlock()
	switch {
	case d.closing():
		return false, net.ErrClosed
	case d.failed():
		return false, d.checkDir(dr) // its registration is lost: no edge would come
	case dr.expired():
		if returned {
			return false, os.ErrDeadlineExceeded
		}
		return false, nil // passed while idle or handing off: work
	case returned && dr.ended:
		return false, io.EOF
	}
	// Before entering serve, while sc is ours: the idle timer's function
	// reads the idle deadline once it has taken the connection out of
	// serve, and must find this wait's.
	sc.startIdle(returned)
	if d.p.loop != nil && d.aheadOf() != nil {
		// Input the loop read ahead is left: the handler is called again
		// with no syscall (serveloop_linux.go).
		return false, nil
	}
	// Drained, and no edge since: nothing to ask the socket. An edge
	// since may be for data the drained Read already took: ask.
	ask := !(d.skip && dr.drained && d.sticky.Load() == 0 && dr.state.Load() == stEmpty)
	dr.drained = false
	for {
		if ask {
			dr.consume() // the check sees whatever a ready edge announced
			st.checks.Add(1)
			if ok, err := d.readable(); err != nil || ok {
				if ok {
					st.found.Add(1)
				}
				return false, err
			}
		} else {
			st.skips.Add(1)
		}
		sc.setState(StateIdle)
		if h := testHookHandOff.Load(); h != nil {
			(*h)(sc, hookBeforeServe)
		}
		if dr.state.CompareAndSwap(stEmpty, stServe) {
			break
		}
		ask = true // an edge since the check, perhaps for nothing new: ask again
	}
	// From here on, whoever moves the direction out of serve starts the
	// handler. Close, the deadline and Shutdown are checked after
	// entering serve (not before), as awaitReady checks after entering
	// waiting: one that came before is seen here, one after sees serve.
	if h := testHookHandOff.Load(); h != nil {
		(*h)(sc, hookInServe)
	}
	if d.checkDir(dr) == nil && !sc.s.closed.Load() {
		if err = d.p.armForPark(d, dr); err == nil {
			sc.armTimer()
			// Nobody is parked in either direction's channel now (a
			// writer that is keeps its own).
			dr.dropToken()
			if d.wr.mu.TryLock() {
				d.wr.dropToken()
				d.wr.mu.Unlock()
			}
			st.handOffs.Add(1)
			return true, nil
		}
	}
	if !dr.state.CompareAndSwap(stServe, stEmpty) {
		return true, nil // another took it out and starts the handler
	}
	// Ours again.
	switch {
	case d.closing():
		return false, net.ErrClosed
	case sc.s.closed.Load():
		return false, ErrServerClosed
	}
	return false, err // nil for a deadline that passed: the handler's Read reports it
}

// start serves the connection on a new goroutine: called by whoever moved
// the read direction out of serve, other than the handing-off goroutine and
// a poll of a role that runs it inline (serveRole.queued): Close, a
// deadline, the idle timer, a balancing hand-over. These are rare, and
// bursty (Shutdown starts every idle connection), so they do not go
// through the inline role's pool, which keeps its idle workers while the
// group is open. byEdge: notify moved it, for an edge that may be stale,
// so the goroutine asks the socket before it calls the handler (handOff).
func (sc *serverConn) start(byEdge bool) { go sc.run(byEdge, nil, 0) }

// recheck is nudge's part for an idle served connection: Close, a read
// deadline change or a failed epoll_ctl (fail). It starts the handler if
// the connection is closing, failed or its deadline has passed (its Read
// then returns the error), and otherwise sets the idle timer.
func (sc *serverConn) recheck() {
	d := sc.desc()
	dr := &d.rd
	if d.closing() || d.failed() || dr.expired() {
		if dr.state.CompareAndSwap(stServe, stEmpty) {
			sc.start(false)
		}
		return
	}
	sc.armTimer()
}

// The idle timer (serverConn.timer) of a connection served on demand fires
// at the earlier of two times while the connection is idle: its read
// deadline, which calls the handler (its Read reports the timeout), and its
// idle deadline, IdleTimeout after its wait began, which closes it. It is
// one time.AfterFunc per connection, made the first time the connection
// idles with either, and re-armed at each hand-off, not stopped when the
// connection leaves serve: a fire that finds it out of serve does nothing,
// so a handler that runs longer than IdleTimeout is never cut off. Its
// function takes the connection out of serve like any other mover (the
// state table in desc_linux.go), so an edge and the timer racing each
// other have one winner: the edge's start serves the input, or the timer
// closes the connection and the edge finds it ready and starts nothing.

// startIdle sets the idle deadline as a hand-off begins, if the Server has
// an IdleTimeout: a new wait when the handler returned nil or the
// connection is new, and the wait already going on when an edge or the
// timer started the hand-off with no call (a stale edge is no input).
func (sc *serverConn) startIdle(returned bool) {
	to := sc.s.IdleTimeout
	if to <= 0 {
		return
	}
	it := sc.idleTimer()
	if returned || it.idle.Load() == 0 {
		now := time.Now().UnixNano()
		it.idle.Store(now + min(int64(to), math.MaxInt64-now))
	}
}

// idleTimer returns sc's idle timer record, making it if need be.
func (sc *serverConn) idleTimer() *idleTimer {
	if it := sc.timer.Load(); it != nil {
		return it
	}
	sc.timer.CompareAndSwap(nil, new(idleTimer)) // or another caller made it
	return sc.timer.Load()
}

// armTimer sets the idle timer to the earlier of the read deadline and the
// idle deadline, or stops it if there is neither or the connection is
// closing. It reads both under the timer's lock, so of concurrent callers
// (the hand-off, and nudge for a deadline set from anywhere) the last sets
// it to the latest values; a timer that fires for an old value finds
// nothing due, or the direction out of serve, and does nothing. finish
// stops the timer after its Close set closing, so a call that comes later
// (a deadline set as the connection closes) leaves no timer running. A
// connection that never idles with either deadline has no timer.
func (sc *serverConn) armTimer() {
	d := sc.desc()
	it := sc.timer.Load()
	if it == nil {
		if d.rd.deadline.Load() == 0 {
			return
		}
		it = sc.idleTimer()
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	at := d.rd.deadline.Load()
	if idle := it.idle.Load(); idle != 0 && (at == 0 || idle < at) {
		at = idle
	}
	switch {
	case at == 0 || d.closing():
		if it.t != nil {
			it.t.Stop()
		}
	case it.t == nil:
		it.t = time.AfterFunc(time.Duration(at-time.Now().UnixNano()), sc.expire)
	default:
		it.t.Reset(time.Duration(at - time.Now().UnixNano()))
	}
}

// What the idle timer finds when it fires (serverConn.due).
type timerDue uint8

const (
	dueNothing  timerDue = iota // neither deadline has passed: a fire for an old value
	dueDeadline                 // the read deadline passed first: call the handler
	dueIdle                     // the idle deadline passed first: close
)

// due reports which of the idle connection's deadlines has passed first.
func (sc *serverConn) due() timerDue {
	now := time.Now().UnixNano()
	dl := sc.desc().rd.deadline.Load()
	var idle int64
	if it := sc.timer.Load(); it != nil {
		idle = it.idle.Load()
	}
	switch {
	case dl != 0 && dl <= now && (idle == 0 || dl <= idle):
		return dueDeadline
	case idle != 0 && idle <= now:
		return dueIdle
	}
	return dueNothing
}

// testHookExpire, when set by a test, runs on the idle timer's goroutine
// after it found a deadline due and before it tries to take the
// connection: the window in which a fire becomes stale (an edge serves the
// connection, which idles again with a new idle deadline).
var testHookExpire atomic.Pointer[func(sc *serverConn)]

// expire is the idle timer's function, on the timer's own goroutine. If a
// deadline is due it takes the connection (fire).
func (sc *serverConn) expire() {
	if sc.due() == dueNothing {
		return
	}
	if h := testHookExpire.Load(); h != nil {
		(*h)(sc)
	}
	sc.fire()
}

// fire takes the connection out of serve, if it is still there, and then
// owns it: it asks again what is due, since the fire may be for an old
// idle deadline that passed before the connection last served input and
// went idle again (only the owner sets the idle deadline, so the answer
// holds now). The idle deadline closes the connection; the read deadline
// serves it on this goroutine, whose handler's Read reports the timeout;
// nothing due gives it back to waiting, with the wait that was going on.
func (sc *serverConn) fire() {
	d := sc.desc()
	if !d.rd.state.CompareAndSwap(stServe, stEmpty) {
		return // served, closed, or taken by another mover
	}
	switch sc.due() {
	case dueIdle:
		if !d.closing() {
			sc.s.stats.idleTimeouts.Add(1)
		}
		sc.finish()
	case dueDeadline:
		sc.run(false, nil, 0)
	default:
		sc.run(true, nil, 0)
	}
}

// stopTimer stops the idle timer of a finished connection: called after
// its Close, so that armTimer, which looks at closing under the same lock,
// never sets it again.
func (sc *serverConn) stopTimer() {
	if it := sc.timer.Load(); it != nil {
		it.mu.Lock()
		defer it.mu.Unlock()
		if it.t != nil {
			it.t.Stop()
		}
	}
}
