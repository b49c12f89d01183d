package netpoll

import (
	"context"
	"errors"
	"iter"
	"net"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
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

// handlerLabels labels handler goroutines for pprof (netpoll=handler).
var handlerLabels = pprof.WithLabels(context.Background(), pprof.Labels("netpoll", "handler"))

// Serve accepts connections on l and serves them on demand until l fails
// or Shutdown or Close is called; then it returns ErrServerClosed. It
// retries accept errors that pass (out of fds or memory, an aborted
// connection) after a pause, as http.Server does.
//
// Connections of this package (l from a Group or Listen) wait with no
// goroutine. Any other net.Conn that implements syscall.Conn, such as
// package net's, is served by the fallback: one goroutine per connection
// that waits for readability with no buffer (RawConn.Read with a poll(2)
// check), then calls the same handler, so a program switches with a flag.
func (s *Server) Serve(l net.Listener) error {
	if s.Handler == nil && s.NewHandler == nil {
		return errors.New("netpoll: Server has no Handler or NewHandler")
	}
	if !s.track(l) {
		return ErrServerClosed
	}
	defer s.untrack(l)
	var pause time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.closed.Load() {
				return ErrServerClosed
			}
			if retryAccept(err) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				s.logf("netpoll: Accept error: %v; retrying in %v", err, pause)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		s.serve(c)
	}
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

// serve takes c on: registers it and either hands it off at once (this
// package's Conn: its first handler call comes when it is readable) or
// starts the fallback's goroutine.
func (s *Server) serve(c net.Conn) {
	sc := &serverConn{s: s, c: c, h: &s.Handler}
	if s.NewHandler != nil {
		h := s.NewHandler(c)
		sc.h = &h
	}
	if *sc.h == nil || !s.add(sc) {
		c.Close()
		return
	}
	nc, ok := c.(*Conn)
	if ok {
		nc.d.srv = sc // before the first hand-off: notify and nudge read it once they see stServe
	}
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
		go sc.run(false)
	}
}

// run owns sc: it calls the handler while there is work and hands the
// connection off when there is none, or finishes it. check: ask the socket
// before the first call (an edge started it, and edges may be stale).
func (sc *serverConn) run(check bool) {
	pprof.SetGoroutineLabels(handlerLabels)
	returned := false
	for !sc.desc().closing() && !sc.s.closed.Load() {
		if check || returned {
			idle, err := sc.handOff(returned)
			if err != nil {
				break
			}
			if idle {
				return
			}
		}
		if !sc.call() {
			break
		}
		returned = true
	}
	sc.finish()
}

// call runs the handler once and reports whether the connection stays
// open. A panic is the handler's bug, not the server's: it is logged with
// its stack and closes that connection only, as http.Server does.
func (sc *serverConn) call() (keep bool) {
	st := &sc.s.stats
	sc.setState(StateActive)
	st.starts.Add(1)
	st.running.Add(1)
	defer func() {
		st.running.Add(-1)
		if r := recover(); r != nil {
			st.panic.Add(1)
			sc.s.logf("netpoll: panic serving %v: %v\n%s", sc.c.RemoteAddr(), r, debug.Stack())
			keep = false
		}
	}()
	return (*sc.h).ServeConn(sc.c) == nil
}

// setState moves sc to state st, counts idle connections and calls the
// ConnState hook. Only sc's owner calls it.
func (sc *serverConn) setState(st ConnState) {
	old := ConnState(sc.state.Swap(uint32(st)))
	if old == st {
		return
	}
	if old == StateIdle {
		sc.s.stats.idle.Add(-1)
	}
	if st == StateIdle {
		sc.s.stats.idle.Add(1)
	}
	if h := sc.s.ConnState; h != nil {
		h(sc.c, st)
	}
}

// finish closes sc's connection, reports StateClosed (once: only the
// owner finishes, and it owns sc for good from here) and forgets it.
func (sc *serverConn) finish() {
	sc.c.Close()
	if sc.desc() != nil {
		sc.stopTimer()
	}
	sc.setState(StateClosed)
	sc.s.remove(sc)
}

// fallback serves a connection of another package: a goroutine that waits
// for readability with no buffer, then calls the handler, with the same
// policy as on-demand serving (handOff): a read deadline that passes while
// waiting calls the handler, one already past when it returned closes the
// connection, and so does a hang-up its handler has had a call for and
// returned from with nothing read.
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
	waited bool  // the wait began: its deadline had not passed at the start
	hangUp bool  // readable for a hang-up or an error alone, with no data queued
	perr   error // poll's error
}

// wait waits until the socket is readable: the callback asks the socket
// (poll, which leaves a pending error for the next Read) and returns false
// to wait for the next edge, so data queued before the wait is seen (the
// CL 22031 hazard: the runtime resets its readiness before the first call).
func (w *rawWaiter) wait() error {
	w.waited, w.hangUp, w.perr = false, false, nil
	if err := w.rc.Read(w.check); err != nil {
		return err
	}
	return w.perr
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

// Shutdown stops s as http.Server.Shutdown does: it closes the listeners,
// closes every idle connection, and waits until the connections whose
// handlers run have returned and been closed, or until ctx is done (then
// it returns ctx's error, and Close ends the rest). Serve returns
// ErrServerClosed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closed.Store(true)
	s.mu.Lock()
	err := s.closeListeners()
	if s.drained == nil {
		s.drained = make(chan struct{})
		if s.head == nil {
			close(s.drained)
		}
	}
	drained := s.drained
	var idle []net.Conn
	for sc := s.head; sc != nil; sc = sc.next {
		if st := ConnState(sc.state.Load()); st == StateIdle || st == StateNew {
			idle = append(idle, sc.c)
		}
	}
	s.mu.Unlock()
	// A connection that goes idle after this looks at s.closed after it
	// enters the idle state, and closes itself.
	for _, c := range idle {
		c.Close()
	}
	select {
	case <-drained:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes s's listeners and every connection at once, running
// handlers' too (their Reads and Writes fail with net.ErrClosed). It does
// not wait for them.
func (s *Server) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	err := s.closeListeners()
	var all []net.Conn
	for sc := s.head; sc != nil; sc = sc.next {
		all = append(all, sc.c)
	}
	s.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return err
}

// Conns yields s's open connections with their states, as they were when
// it was called: an idle connection appears in no goroutine dump, so this
// is how to see it.
func (s *Server) Conns() iter.Seq2[net.Conn, ConnState] {
	type entry struct {
		c  net.Conn
		st ConnState
	}
	s.mu.Lock()
	var list []entry
	for sc := s.head; sc != nil; sc = sc.next {
		list = append(list, entry{sc.c, ConnState(sc.state.Load())})
	}
	s.mu.Unlock()
	return func(yield func(net.Conn, ConnState) bool) {
		for _, e := range list {
			if !yield(e.c, e.st) {
				return
			}
		}
	}
}

func (s *Server) track(l net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[l] = struct{}{}
	return true
}

func (s *Server) untrack(l net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, l)
}

// closeListeners closes every listener; s.mu is held.
func (s *Server) closeListeners() error {
	var errs []error
	for l := range s.listeners {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
		delete(s.listeners, l)
	}
	return errors.Join(errs...)
}

// add links sc into s's list, unless s is closed.
func (s *Server) add(sc *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return false
	}
	sc.next = s.head
	if s.head != nil {
		s.head.prev = sc
	}
	s.head = sc
	s.stats.conns.Add(1)
	return true
}

// remove unlinks sc, and tells Shutdown when the last one is gone.
func (s *Server) remove(sc *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc.prev != nil {
		sc.prev.next = sc.next
	} else {
		s.head = sc.next
	}
	if sc.next != nil {
		sc.next.prev = sc.prev
	}
	sc.prev, sc.next = nil, nil
	s.stats.conns.Add(-1)
	if s.head == nil && s.drained != nil {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}
