package netpoll

import (
	"io"
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
	// Drained, and no edge since: nothing to ask the socket. An edge
	// since may be for data the drained Read already took: ask.
	ask := !(d.skip && dr.drained && d.sticky.Load() == 0 && dr.state.Load() == stEmpty)
	dr.drained = false
	for {
		if ask {
			dr.consume() // the check sees whatever a ready edge announced
			st.checks.Add(1)
			if ok, err := d.readable(); err != nil || ok {
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
// the read direction out of serve, other than the handing-off goroutine.
// byEdge: notify moved it, for an edge that may be stale, so the goroutine
// asks the socket before it calls the handler (handOff).
func (sc *serverConn) start(byEdge bool) { go sc.run(byEdge) }

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

// armTimer sets the idle timer to the read deadline, or stops it. It reads
// the deadline under the timer's lock, so of concurrent callers the last
// sets it to the latest value. A timer that fires for an old value finds
// the deadline not passed, or the direction out of serve, and does
// nothing. A connection that never idles with a deadline has no timer.
func (sc *serverConn) armTimer() {
	dl := sc.desc().rd.deadline.Load()
	it := sc.timer.Load()
	if it == nil {
		if dl == 0 {
			return
		}
		sc.timer.CompareAndSwap(nil, new(idleTimer)) // or another caller made it
		it = sc.timer.Load()
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	dl = sc.desc().rd.deadline.Load()
	switch {
	case dl == 0:
		if it.t != nil {
			it.t.Stop()
		}
	case it.t == nil:
		it.t = time.AfterFunc(time.Duration(dl-time.Now().UnixNano()), sc.expire)
	default:
		it.t.Reset(time.Duration(dl - time.Now().UnixNano()))
	}
}

// expire is the idle timer's function, on the timer's own goroutine, which
// then serves the connection.
func (sc *serverConn) expire() {
	dr := &sc.desc().rd
	if dr.expired() && dr.state.CompareAndSwap(stServe, stEmpty) {
		sc.run(false)
	}
}

// stopTimer releases the idle timer of a finished connection.
func (sc *serverConn) stopTimer() {
	if it := sc.timer.Load(); it != nil {
		it.mu.Lock()
		defer it.mu.Unlock()
		if it.t != nil {
			it.t.Stop()
		}
	}
}
