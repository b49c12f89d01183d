package netpoll

import (
	"errors"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A Handler serves a connection on demand (Server): it is called when the
// connection has work, reads and writes it with the Conn's ordinary
// blocking methods, and returns when it has nothing more to do for now.
//
// ServeConn returns nil to wait for more: the Server calls it again when
// the connection is readable (data, EOF or an error) or its read deadline
// passes, holding no goroutine and no buffer meanwhile. It must return
// only when its own buffers hold nothing it still has to act on: bytes kept
// in a bufio.Reader are the handler's, and the Server cannot see them (check
// Buffered, and go on while it is not zero). What is still queued in the
// socket when it returns, or comes later, starts it again, exactly once.
// A non-nil error closes the connection.
//
// A handler may block for as long as it needs mid-request (a slow client, a
// backend call): nothing is cut off because the connection looked idle,
// and other connections are not held up. On Linux, by default, a
// connection that has been served keeps the goroutine that served it
// while it stays busy: between calls that goroutine waits on the runtime's
// netpoller, as package net's reader does, holding no buffer, and a
// connection that waits longer than a sweep (20-40 ms) goes back to the
// Server's poller with no goroutine (the experiment dispatch=hot; with
// dispatch=inline a call runs on the goroutine that polled, and the
// poller's role passes on at the first event that comes while it runs;
// with wait=block,dispatch=loop calls run one after another on the
// poller's thread, and a watchdog hands the loop to a new thread once a
// call has held it for 2-4 ms).
// It keeps whatever it needs between calls in its own value: see
// Server.NewHandler.
//
// What a call may rely on about the goroutine it runs on:
//
//   - Each call starts with the pprof label netpoll=handler and no other;
//     labels a call sets do not outlive it.
//   - Nothing else: the calls of one connection may run on different
//     goroutines (a busy connection's on one, until it idles), and under
//     dispatch=inline one goroutine runs many connections' calls, with
//     polls in between; under dispatch=loop that goroutine is locked to
//     the poller's thread (runtime.LockOSThread), and a call that parks
//     in a Read of its own connection, or blocks past the watchdog,
//     finishes on it unlocked while the loop goes on elsewhere.
//     Goroutine-local state a call changes
//     (runtime.LockOSThread, debug.SetPanicOnFault) must be restored
//     before it returns: a call that returns locked to its thread leaves
//     the thread locked for whatever the goroutine runs next. A program
//     that relies on thread state across calls sets the experiment
//     dispatch=go (a goroutine of its own per call).
//   - runtime.Goexit (as t.FailNow calls) closes the call's connection,
//     as a panic does.
type Handler interface {
	ServeConn(c net.Conn) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(c net.Conn) error

// ServeConn calls f(c).
func (f HandlerFunc) ServeConn(c net.Conn) error { return f(c) }

// ConnState is where a connection served by a Server is, as reported to
// Server.ConnState and by Server.Conns.
type ConnState uint32

const (
	// StateNew: accepted, never served yet.
	StateNew ConnState = iota
	// StateActive: its handler runs.
	StateActive
	// StateIdle: waiting for work. On this package's connections no
	// goroutine waits; on others (the fallback) one waits without a
	// buffer.
	StateIdle
	// StateClosed: closed, reported once per connection. It is the
	// cleanup hook: there is no stack to defer on while a connection is
	// idle.
	StateClosed
)

var connStateNames = [...]string{"new", "active", "idle", "closed"}

func (s ConnState) String() string {
	if int(s) < len(connStateNames) {
		return connStateNames[s]
	}
	return "ConnState(" + strconv.Itoa(int(s)) + ")"
}

// ErrServerClosed is returned by Server.Serve after Shutdown or Close.
var ErrServerClosed = errors.New("netpoll: Server closed")

// ErrServed is what a Read (or WaitRead) from outside the handler gets on
// an idle connection served on demand, wrapped in a *net.OpError: the
// Server is waiting for the connection's next input. Match it with
// errors.Is.
var ErrServed = errors.New("netpoll: read on an idle connection served on demand, outside its handler")

// A Server serves connections on demand: it runs a Handler on a goroutine
// only while a connection has work, so that an idle connection costs no
// goroutine and no buffer. See doc.go, "Serving on demand". The zero value
// is not usable: set Handler or NewHandler. A Server must not be copied
// after first use.
type Server struct {
	// Handler serves every connection, unless NewHandler is set.
	Handler Handler

	// NewHandler, if not nil, makes each accepted connection's own
	// handler: a value that keeps the connection's state between calls.
	// A nil Handler closes the connection at once.
	NewHandler func(c net.Conn) Handler

	// ConnState, if not nil, is called as a connection changes state,
	// from the goroutine that owns it at that moment: one at a time per
	// connection, in order. StateClosed comes exactly once per
	// connection, after it is closed.
	ConnState func(c net.Conn, state ConnState)

	// IdleTimeout, if positive, is how long a connection may wait for
	// work, as http.Server.IdleTimeout is: one that has been idle that
	// long (accepted, or its handler returned nil, and no input since) is
	// closed by the Server, with StateClosed reported as for any close and
	// counted in Stats (IdleTimeouts). Only the wait counts: a handler
	// that runs, however long it blocks mid-request, is never cut off, and
	// each return starts a new wait. A read deadline the handler left set
	// still calls it if it comes first. Zero or negative means no limit.
	// Set it before Serve. On this package's connections the wait costs a
	// timer, not a goroutine; the fallback bounds its wait with one.
	IdleTimeout time.Duration

	// ErrorLog receives the panics of handlers (with their stacks) and
	// accept errors the Server retries; nil means the log package's
	// standard logger.
	ErrorLog *log.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{} // guarded by mu
	head      *serverConn               // the list of open connections; guarded by mu
	closed    atomic.Bool               // Shutdown or Close began
	drained   chan struct{}             // closed when the last connection is gone after Shutdown; guarded by mu
	stats     serverCounters
	hot       hotSet // dispatch=hot's connections and their sweeper
}

// ServerStats is what a user watches of a Server: a few counters.
// ReadStats reads the rest by name.
type ServerStats struct {
	Conns       uint64 // open connections now
	Idle        uint64 // of those, waiting for work now: with no goroutine on this package's connections, with one (and no buffer) in the fallback
	Running     uint64 // handlers running now
	HandlerRuns uint64 // handler calls since the Server started
	Panics      uint64 // handlers that panicked (their connections were closed)
}

type serverCounters struct {
	conns, idle, running                   atomic.Int64
	starts, handOffs, checks, skips, panic atomic.Uint64
	found                                  atomic.Uint64 // hand-off checks that found input queued
	idleTimeouts                           atomic.Uint64
	// Inline dispatch (Linux, wait=nested): calls on the goroutine that
	// polled, calls on workers, connections demoted and promoted, and
	// connections of a batch spread to workers.
	inlineCalls, workerCalls, demotions, promotions, spread atomic.Uint64
	// dispatch=hot (hot_linux.go): connections made hot, made cold, and
	// refused (the bound, or a failed dup or epoll_ctl); calls a hot
	// wait made, the reads ahead among them that found input, and waits
	// begun with no syscall after a drained read (readahead_linux.go).
	hotEntries, hotExits, hotRefused, hotCalls, readAheads, hotSkips atomic.Uint64
}

// Stats returns the counters a user watches.
func (s *Server) Stats() ServerStats {
	st := &s.stats
	return ServerStats{
		Conns:       uint64(max(st.conns.Load(), 0)),
		Idle:        uint64(max(st.idle.Load(), 0)),
		Running:     uint64(max(st.running.Load(), 0)),
		HandlerRuns: st.starts.Load(),
		Panics:      st.panic.Load(),
	}
}

// ReadStats sets the Value of each sample to s's statistic of that Name:
// the names AllStats marks Server. An unknown name, or a Group's, gets 0
// and an error wrapping ErrUnknownStat; the other samples are read all
// the same.
func (s *Server) ReadStats(samples []Sample) error {
	return readStats(samples, &statSource{s: &s.stats}, true)
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}
