package netpoll

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// serverConn is one connection of a Server. On this package's Conn (d set)
// it is all an idle connection holds besides its descriptor: no goroutine,
// no buffer, and with a read deadline or Server.IdleTimeout a timer.
// Exactly one goroutine owns it at a time (runs its handler, hands it off,
// or finishes it): the accept loop, then whoever moves its read direction
// out of stServe (handoff_linux.go), the idle timer's function among them.
type serverConn struct {
	s     *Server
	c     net.Conn      // a *Conn, or another package's connection (the fallback)
	h     *Handler      // &s.Handler, or the connection's own (NewHandler)
	state atomic.Uint32 // ConnState; moved by the owner
	// demoted counts down the calls its handler must yet return from
	// quickly, on a worker, before it runs inline again (serverole_linux.go,
	// demoteRuns); 0: it runs inline. Touched only by the owner.
	demoted uint8

	prev, next *serverConn // Server.head's list; guarded by s.mu

	// timer is made the first time the connection idles with a read
	// deadline or an IdleTimeout: a connection with neither pays only
	// this pointer.
	timer atomic.Pointer[idleTimer]
}

// idleTimer is the timer of an idle connection (armTimer): its read
// deadline calls the handler, its idle deadline closes it.
type idleTimer struct {
	mu sync.Mutex // guards t
	t  *time.Timer
	// idle is when the connection's wait for work ends (IdleTimeout
	// after it began), in unix nanoseconds; 0 before the first. Stored
	// by the owner only, before the read direction enters serve
	// (startIdle); read by the timer's function and armTimer.
	idle atomic.Int64
}

// desc is the descriptor of sc's *Conn, or nil for the fallback's.
func (sc *serverConn) desc() *desc {
	if nc, ok := sc.c.(*Conn); ok {
		return nc.d
	}
	return nil
}

// retryAccept reports whether an accept error passes with time.
func retryAccept(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// attach makes sc the server of its *Conn's descriptor (desc.srv), before
// the connection's first hand-off (notify and nudge read it once they see
// stServe) and before any goroutine but the accept loop has it (a park
// reads it under dispatch=hot, hot_linux.go).
func (sc *serverConn) attach() {
	if nc, ok := sc.c.(*Conn); ok {
		nc.d.srv.Store(sc)
	}
}

// serve takes c on: registers it and either hands it off at once (this
// package's Conn: its first handler call comes when it is readable) or
// starts the fallback's goroutine.
func (s *Server) serve(c net.Conn) {
	sc, ok := s.take(c)
	if !ok {
		return
	}
	_, ok = c.(*Conn)
	if h := s.ConnState; h != nil {
		h(c, StateNew)
	}
	if !ok {
		go sc.fallback()
		return
	}
	idle, err := sc.handOff(false)
	switch {
	case err != nil:
		sc.finish()
	case !idle:
		go sc.run(false, nil, 0)
	}
}

// run owns sc: it calls the handler while there is work and hands the
// connection off when there is none, or finishes it. check: ask the socket
// before the first call (an edge started it, and edges may be stale). sr
// is the role this goroutine holds out, with the role's word out, when it
// runs sc inline (serveRole.runNext); nil on a goroutine of its own.
func (sc *serverConn) run(check bool, sr *serveRole, out uint64) { sc.runOn(check, sr, out, nil, nil) }

// runOn is run, and for a run on a poller's loop (serveloop_linux.go) the
// loop's role and the holder's record of the run, r.
func (sc *serverConn) runOn(check bool, sr *serveRole, out uint64, lp *loopRole, r *loopRun) {
	d := sc.desc()
	if d.p.inline != nil {
		// Started by an edge, it may be what a waitInline holder's poll
		// readied as it left the role: an arm owed is paid before the
		// handler, the user's code, runs (inline_linux.go).
		d.p.inline.pass()
	}
	// timed: a call on a goroutine of its own, of a poller that runs
	// handlers inline, is timed for demotion.
	timed := sr == nil && lp == nil && (d.p.serve != nil || d.p.loop != nil)
	returned := false
	for !d.closing() && !sc.s.closed.Load() {
		if check || returned {
			idle, err := sc.handOff(returned)
			if err != nil {
				break
			}
			if idle {
				return
			}
		}
		var t0 time.Duration
		if timed || lp != nil {
			t0 = serveClock()
			if lp != nil {
				r.call.Store(int64(t0))
			}
		}
		keep := sc.callIn(sr, out)
		switch {
		case sr != nil:
			sc.s.stats.inlineCalls.Add(1)
			if sr.word.Load() != out {
				// The role went on while the handler ran: the rest of
				// this run is on a goroutine of its own.
				if sr.displaced(out) {
					sc.demote()
				}
				sr, timed = nil, true
			}
		case lp != nil:
			sc.s.stats.inlineCalls.Add(1)
			moved := lp.word.Load() != r.mine.Load()
			// A call that held the loop for demoteAfter or more blocked
			// it, as did one the watchdog took: the connection's next
			// calls run on goroutines of their own. A call whose park
			// passed the loop on held it until the park.
			if moved && r.blocked() || !moved && serveClock()-t0 >= demoteAfter {
				sc.demote()
			}
			if moved {
				// The role went on while the handler ran: the rest of
				// this run is on a goroutine of its own.
				lp, timed = nil, true
			}
		case timed:
			sc.s.stats.workerCalls.Add(1)
			if serveClock()-t0 >= demoteAfter {
				sc.demote()
			} else if sc.demoted > 0 {
				if sc.demoted--; sc.demoted == 0 {
					sc.s.stats.promotions.Add(1)
				}
			}
		}
		if !keep {
			break
		}
		returned = true
		if d.p.hot && sr == nil && sc.busy() {
			// Served hot until it goes cold; then handed off.
			if keep, returned = sc.serveHot(); !keep {
				break
			}
			check = true
		}
	}
	sc.finish()
}

// demote makes sc's next demoteRuns calls run on a worker.
func (sc *serverConn) demote() {
	if sc.demoted == 0 {
		sc.s.stats.demotions.Add(1)
	}
	sc.demoted = demoteRuns
}

// callIn is call for run: a handler that ends its goroutine
// (runtime.Goexit, as t.FailNow does) closes its connection; and if it
// held the role out, the kick makes the watcher take the role, which
// nobody would give back.
func (sc *serverConn) callIn(sr *serveRole, out uint64) (keep bool) {
	exited := true
	defer func() {
		if exited {
			sc.finish()
			if sr != nil && sr.word.Load() == out {
				sr.kick()
			}
		}
	}()
	keep = sc.call()
	exited = false
	return keep
}

// finish closes sc's connection, reports StateClosed (once: only the
// owner finishes, and it owns sc for good from here) and forgets it.
func (sc *serverConn) finish() {
	sc.c.Close() // severs the dup of a hot connection: its socket closes now, and input read ahead goes with it
	if sc.desc() != nil {
		sc.goCold(sc.desc().hotw.Load())
		sc.stopTimer()
	}
	sc.setState(StateClosed)
	sc.s.remove(sc)
}

// readable is wait's callback.
func (w *rawWaiter) readable(fd uintptr) bool {
	w.waited = true
	ev, e := pollEvents(int(fd))
	if e != nil {
		w.perr = os.NewSyscallError("poll", e)
		return true
	}
	if ev == 0 {
		return false
	}
	if ev&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
		inq, e := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		w.hangUp = e == nil && inq == 0
	}
	return true
}
