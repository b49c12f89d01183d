//go:build !linux

package netpoll

import (
	"errors"
	"net"
	"sync/atomic"
)

// serverConn is one connection of a Server. On this OS every connection,
// this package's Conn included, is served by the fallback (fallback.go):
// a goroutine per connection that waits for readability with no buffer.
// Exactly one goroutine owns it at a time (runs its handler, or finishes
// it): the accept loop, then its fallback goroutine.
type serverConn struct {
	s     *Server
	c     net.Conn
	h     *Handler      // &s.Handler, or the connection's own (NewHandler)
	state atomic.Uint32 // ConnState; moved by the owner

	prev, next *serverConn // Server.head's list; guarded by s.mu
}

// hotSet is dispatch=hot's, which this OS does not have.
type hotSet struct{}

// awaitCold has no hot connection to wait for.
func (hotSet) awaitCold() {}

// attach has nothing to do here: no connection is served on demand.
func (sc *serverConn) attach() {}

// serve takes c on: registers it and starts its fallback goroutine.
func (s *Server) serve(c net.Conn) {
	sc, ok := s.take(c)
	if !ok {
		return
	}
	if h := s.ConnState; h != nil {
		h(c, StateNew)
	}
	go sc.fallback()
}

// finish closes sc's connection, reports StateClosed (once: only the
// owner finishes, and it owns sc for good from here) and forgets it.
func (sc *serverConn) finish() {
	sc.c.Close()
	sc.setState(StateClosed)
	sc.s.remove(sc)
}

// retryAccept reports whether an accept error passes with time
// (acceptRetries lists them for each OS).
func retryAccept(err error) bool {
	for _, e := range acceptRetries {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
