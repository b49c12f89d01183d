package netpoll

import (
	"errors"
	"os"
	"runtime/pprof"
	"syscall"
	"time"
)

// fallback serves a connection of another package (on other systems than
// Linux, every connection): a goroutine that waits for readability with no
// buffer, then calls the handler, with the same policy as on-demand
// serving (handOff): a read deadline that passes while waiting calls the
// handler, one already past when it returned closes the connection, and so
// does a hang-up its handler has had a call for and returned from with
// nothing read.
//
// IdleTimeout bounds each wait with a timer whose function moves the read
// deadline to the past, which ends the wait. The Server cannot read the
// deadline a handler set on another package's connection, so it cannot
// wait for the earlier of the two as on-demand serving does; once the
// timer has fired the handler's deadline is lost, and the connection is
// closed whatever ended the wait (input that came as the timer fired
// included, as an http.Server's idle connection would be).
func (sc *serverConn) fallback() {
	pprof.SetGoroutineLabels(handlerLabels)
	defer sc.finish()
	var idle *time.Timer // IdleTimeout's, made at the first wait
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	sysc, ok := sc.c.(syscall.Conn)
	if !ok {
		sc.s.logf("netpoll: cannot serve a %T: it is not a syscall.Conn, so it cannot wait for readability", sc.c)
		return
	}
	rc, err := sysc.SyscallConn()
	if err != nil {
		sc.s.logf("netpoll: cannot serve %v: %v", sc.c.RemoteAddr(), err)
		return
	}
	w := &rawWaiter{rc: rc}
	w.check = w.readable // made once: a wait per request allocates nothing
	hungUp := false
	for {
		sc.setState(StateIdle)
		if sc.s.closed.Load() {
			return
		}
		if to := sc.s.IdleTimeout; to > 0 {
			if idle == nil {
				idle = time.AfterFunc(to, sc.endWait)
			} else {
				idle.Reset(to)
			}
		}
		err := w.wait()
		if idle != nil && !idle.Stop() {
			sc.s.stats.idleTimeouts.Add(1)
			return // the idle timeout passed (Stop false: the timer fired)
		}
		if err != nil && !(w.waited && errors.Is(err, os.ErrDeadlineExceeded)) {
			return
		}
		if err == nil && w.hangUp && hungUp {
			return
		}
		hungUp = err == nil && w.hangUp
		if !sc.call() {
			return
		}
	}
}

// endWait is the fallback's idle timer function: a read deadline in the
// past ends the wait for readability.
func (sc *serverConn) endWait() { sc.c.SetReadDeadline(time.Unix(1, 0)) }

// rawWaiter waits on a RawConn until its socket is readable, with no
// buffer; one per connection, used by its fallback goroutine only.
type rawWaiter struct {
	rc    syscall.RawConn
	check func(fd uintptr) bool // w.readable

	// What the last wait saw.
	waited bool  // the wait began: its deadline had not passed at the start (Windows: it ended readable)
	hangUp bool  // readable for a hang-up or an error alone, with no data queued
	perr   error // poll's error
	asked  bool  // Windows: readable has let RawConn.Read wait once (rawwait_windows.go)
}

// wait waits until the socket is readable: the callback asks the socket
// (poll, which leaves a pending error for the next Read) and returns false
// to wait for the next edge, so data queued before the wait is seen (the
// CL 22031 hazard: the runtime resets its readiness before the first call).
func (w *rawWaiter) wait() error {
	w.waited, w.hangUp, w.perr, w.asked = false, false, nil, false
	if err := w.rc.Read(w.check); err != nil {
		return err
	}
	return w.perr
}
