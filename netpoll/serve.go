package netpoll

import (
	"context"
	"errors"
	"iter"
	"net"
	"runtime/debug"
	"runtime/pprof"
	"time"
)

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
//
// On other systems than Linux every connection is served by the fallback.
// On other Unix systems it checks the socket with poll(2) and FIONREAD. On
// Windows it waits with the zero-byte receive package net's RawConn.Read
// waits with, and reads the queue with FIONREAD; a read deadline that
// ends its wait closes the connection there, since the wait cannot tell
// one that passed while it waited from one already past. Where package
// net cannot wait without a read (plan9, js, wasip1) the handler is
// called again as soon as it returns, and its Read waits.
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

// call runs the handler once and reports whether the connection stays
// open. A panic is the handler's bug, not the server's: it is logged with
// its stack and closes that connection only, as http.Server does.
func (sc *serverConn) call() (keep bool) {
	st := &sc.s.stats
	// Every call starts with exactly the handler's labels: a goroutine
	// runs many connections' calls, and labels a call set must not
	// outlive it.
	pprof.SetGoroutineLabels(handlerLabels)
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
// not wait for running handlers or ConnState hooks. A busy connection's
// goroutine that runs neither when Close begins goes idle without running
// any, and Close waits for it to close the second fd it held
// (dispatch=hot), so that Close returns with those fds closed.
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
	s.hot.awaitCold() // the dups of busy connections that ran no user code are closed
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

// take registers c as a connection of s with its handler, and reports
// false, having closed c, when there is none or s is shutting down.
func (s *Server) take(c net.Conn) (*serverConn, bool) {
	sc := &serverConn{s: s, c: c, h: &s.Handler}
	sc.attach() // before NewHandler, which may hand c to goroutines of its own
	if s.NewHandler != nil {
		h := s.NewHandler(c)
		sc.h = &h
	}
	if *sc.h == nil || !s.add(sc) {
		c.Close()
		return nil, false
	}
	return sc, true
}
