package netpoll_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Server.IdleTimeout. The timeouts here are triggers, never asserted
// figures: each test waits for the outcome (a client's EOF, a state, a
// count), bounded by a watchdog.

// eachIdleServe runs f on a listener of every on-demand configuration
// (eachServeConfig) and on one of package net (the fallback).
func eachIdleServe(t *testing.T, f func(t *testing.T, l net.Listener, onDemand bool)) {
	eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
		f(t, listen(t, newGroup(t, cfg), "tcp"), true)
	})
	t.Run("impl=net", func(t *testing.T) { f(t, serveListener(t, "net"), false) })
}

// dialServer dials l with package net and closes the client when the test
// ends.
func dialServer(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readEcho reads the echo of msg on c. The tests write a first request
// before Serve starts, so that its handler call never races the idle
// timeout of the accept.
func readEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q, %v; want %q", got, err, msg)
	}
}

// countingEcho is echoHandler, counting its calls.
func countingEcho(calls *atomic.Int64) netpoll.Handler {
	return netpoll.HandlerFunc(func(c net.Conn) error {
		calls.Add(1)
		return echoHandler(c)
	})
}

// checkTimersStopped fails if the idle timer of one of sl's connections
// (this package's) is still running after it was closed.
func checkTimersStopped(t *testing.T, sl *stateLog) {
	t.Helper()
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for _, c := range sl.conns {
		if netpoll.StopIdleTimer(c) {
			t.Errorf("%v: the idle timer was still running after the connection closed", c.RemoteAddr())
		}
	}
}

// TestServeIdleTimeout: a connection that waits for work for IdleTimeout
// is closed by the Server, one that was served as well as one that never
// sent a byte: each client reads EOF, each connection is closed once with
// no handler call for the timeout, both are counted in IdleTimeouts, and
// no idle timer is left running.
func TestServeIdleTimeout(t *testing.T) {
	eachIdleServe(t, func(t *testing.T, l net.Listener, onDemand bool) {
		done, stop := watchdog(t, 20*time.Second)
		defer done()
		sl := newStateLog()
		var calls atomic.Int64
		s := &netpoll.Server{IdleTimeout: 50 * time.Millisecond, ConnState: sl.hook, Handler: countingEcho(&calls)}
		served := dialServer(t, l)
		served.Write([]byte("hello"))
		silent := dialServer(t, l)
		serveOn(t, s, l)
		readEcho(t, served, "hello")
		for i, c := range []net.Conn{served, silent} {
			if _, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("client %d read %v, want EOF from the idle timeout", i, err)
			}
		}
		if !await(stop, func() bool { return s.Stats().Conns == 0 }) {
			t.Fatalf("stats %+v: the connections were not all closed", s.Stats())
		}
		if st, it := s.Stats(), idleTimeouts(t, s); it != 2 || st.Idle != 0 {
			t.Errorf("stats %+v, %d idle timeouts: want 2 idle timeouts, none idle", st, it)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("%d handler calls, want 1 (the idle timeout calls none)", n)
		}
		if n := sl.closed.Load(); n != 2 {
			t.Errorf("%d closed, want 2", n)
		}
		sl.check(t)
		if onDemand {
			checkTimersStopped(t, sl)
		}
	})
}

// TestServeIdleTimeoutRestarts: each return of the handler starts a new
// wait, so a connection that is served again and again is not closed, and
// its idle deadline moves on with every request.
func TestServeIdleTimeoutRestarts(t *testing.T) {
	eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
		done, stop := watchdog(t, 20*time.Second)
		defer done()
		sl := newStateLog()
		l := listen(t, newGroup(t, cfg), "tcp")
		s := &netpoll.Server{IdleTimeout: time.Hour, ConnState: sl.hook, Handler: echoHandler}
		serveOn(t, s, l)
		client := dialServer(t, l)
		server := sl.conn(t, 0, stop)
		if !netpoll.AwaitReadState(server, "serve", stop) {
			t.Fatal("the new connection never went idle")
		}
		last := netpoll.IdleDeadline(server)
		if last.IsZero() {
			t.Fatal("a new idle connection has no idle deadline")
		}
		for i := range 5 {
			roundTrip(t, client, fmt.Appendf(nil, "request %d", i))
			if !await(stop, func() bool {
				return netpoll.ReadState(server) == "serve" && netpoll.IdleDeadline(server).After(last)
			}) {
				t.Fatalf("request %d: the idle deadline stayed %v", i, last)
			}
			last = netpoll.IdleDeadline(server)
		}
		if st, it := s.Stats(), idleTimeouts(t, s); it != 0 || st.Conns != 1 || sl.closed.Load() != 0 {
			t.Errorf("stats %+v, %d idle timeouts, %d closed: want the connection open", st, it, sl.closed.Load())
		}
	})
}

// TestServeIdleTimeoutSparesRunningHandler: IdleTimeout counts only the
// wait for work. A handler blocked mid-request past it finishes its
// request, and the connection is closed only once it has waited again. On
// this package's connections the idle timer of the wait before the request
// fires while the handler runs: the test holds the timer's function (the
// expire hook) until the request has started the handler, then lets it go
// on while the handler blocks. In the fallback the timer is stopped while
// a handler runs.
func TestServeIdleTimeoutSparesRunningHandler(t *testing.T) {
	const timeout = 50 * time.Millisecond
	eachIdleServe(t, func(t *testing.T, l net.Listener, onDemand bool) {
		done, stop := watchdog(t, 20*time.Second)
		defer done()
		sl := newStateLog()
		var calls atomic.Int64
		blocked, release := make(chan struct{}, 1), make(chan struct{})
		s := &netpoll.Server{IdleTimeout: timeout, ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
			calls.Add(1)
			var req [2]byte
			if _, err := io.ReadFull(c, req[:1]); err != nil {
				return err
			}
			blocked <- struct{}{}
			select {
			case <-release:
			case <-stop:
				return errors.New("never released")
			}
			if _, err := io.ReadFull(c, req[1:]); err != nil {
				return err
			}
			_, err := c.Write(req[:])
			return err
		})}
		client := dialServer(t, l)
		fired, resume := make(chan struct{}), make(chan struct{})
		if onDemand {
			var once sync.Once
			restore := netpoll.SetExpireHook(func(net.Conn) {
				once.Do(func() {
					close(fired)
					select {
					case <-resume:
					case <-stop:
					}
				})
			})
			defer restore()
		} else {
			client.Write([]byte("a")) // the handler's call races nothing
		}
		serveOn(t, s, l)
		if onDemand {
			select {
			case <-fired: // the wait that began at accept is over; its timer holds
			case <-stop:
				t.Fatal("the idle timer never fired")
			}
			client.Write([]byte("a"))
		}
		select {
		case <-blocked:
		case <-stop:
			t.Fatal("the handler never ran")
		}
		if onDemand {
			close(resume) // the timer takes nothing: the connection is not waiting
		} else {
			<-time.After(2 * timeout) // a trigger: the handler blocks past the timeout
		}
		close(release)
		client.Write([]byte("b"))
		readEcho(t, client, "ab")
		if _, err := client.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("client read %v after its request, want EOF from the idle timeout", err)
		}
		if !await(stop, func() bool { return sl.closed.Load() == 1 }) {
			t.Fatal("the connection was not closed")
		}
		if it := idleTimeouts(t, s); it != 1 || calls.Load() != 1 {
			t.Errorf("%d idle timeouts, %d calls: want 1 idle timeout and 1 call", it, calls.Load())
		}
		sl.check(t)
	})
}

// TestServeIdleTimeoutReadDeadline: a read deadline the handler left set
// and the idle timeout, whichever comes first. A deadline before it calls
// the handler, as without IdleTimeout (here the handler answers with a
// ping and clears it, and the connection goes on); an idle timeout before
// the deadline closes the connection with no call.
func TestServeIdleTimeoutReadDeadline(t *testing.T) {
	cases := []struct {
		name              string
		idle, deadline    time.Duration
		calls, idleCloses int64
	}{
		{name: "deadline-first", idle: time.Hour, deadline: 50 * time.Millisecond, calls: 4}, // the last call meets the client's EOF
		{name: "idle-first", idle: 50 * time.Millisecond, deadline: time.Hour, calls: 1, idleCloses: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachIdleServe(t, func(t *testing.T, l net.Listener, onDemand bool) {
				done, stop := watchdog(t, 20*time.Second)
				defer done()
				sl := newStateLog()
				var calls atomic.Int64
				s := &netpoll.Server{IdleTimeout: tc.idle, ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
					n := calls.Add(1)
					var buf [64]byte
					k, err := c.Read(buf[:])
					if errors.Is(err, os.ErrDeadlineExceeded) {
						c.SetReadDeadline(time.Time{})
						_, err = c.Write([]byte("ping"))
						return err
					}
					if err != nil {
						return err
					}
					if _, err := c.Write(buf[:k]); err != nil {
						return err
					}
					if n == 1 {
						c.SetReadDeadline(time.Now().Add(tc.deadline))
					}
					return nil
				})}
				client := dialServer(t, l)
				client.Write([]byte("hello"))
				serveOn(t, s, l)
				readEcho(t, client, "hello")
				if tc.idleCloses == 0 {
					got := make([]byte, 4)
					if _, err := io.ReadFull(client, got); err != nil || string(got) != "ping" {
						t.Fatalf("client read %q, %v; want the handler's ping at its deadline", got, err)
					}
					roundTrip(t, client, []byte("after the ping"))
					client.Close()
				} else if _, err := client.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("client read %v, want EOF from the idle timeout", err)
				}
				if !await(stop, func() bool { return sl.closed.Load() == 1 }) {
					t.Fatal("the connection was not closed")
				}
				if it := idleTimeouts(t, s); it != uint64(tc.idleCloses) || calls.Load() != tc.calls {
					t.Errorf("%d idle timeouts, %d calls: want %d idle timeouts and %d calls", it, calls.Load(), tc.idleCloses, tc.calls)
				}
				sl.check(t)
				if onDemand {
					checkTimersStopped(t, sl)
				}
			})
		})
	}
}

// TestServeIdleTimeoutRace: 200 connections send up to three one-byte
// requests each at times spread around their idle timeout, so that input
// and the timer race (under -race, with every kind of hand-off). Each
// request is either served (the client gets its echo) or refused (the
// connection closed: EOF or a reset), never lost (a client read that
// times out) and never both: the handler ran once per request served.
// Every connection ends by its idle timeout, closed once, its timer
// stopped.
func TestServeIdleTimeoutRace(t *testing.T) {
	const conns, timeout = 200, 20 * time.Millisecond
	eachIdleServe(t, func(t *testing.T, l net.Listener, onDemand bool) {
		done, stop := watchdog(t, 60*time.Second)
		defer done()
		sl := newStateLog()
		var calls atomic.Int64
		s := &netpoll.Server{IdleTimeout: timeout, ConnState: sl.hook, Handler: countingEcho(&calls)}
		serveOn(t, s, l)
		var served, refused atomic.Int64
		errs := make(chan error, conns)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Go(func() {
				errs <- idleRacer(l.Addr().String(), timeout, uint64(i), &served, &refused)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if !await(stop, func() bool { return s.Stats().Conns == 0 }) {
			t.Fatalf("stats %+v: connections left open", s.Stats())
		}
		if n := calls.Load(); n != served.Load() {
			t.Errorf("%d handler calls for %d requests served (%d refused)", n, served.Load(), refused.Load())
		}
		if it := idleTimeouts(t, s); it != conns || sl.closed.Load() != conns {
			t.Errorf("%d idle timeouts, %d closed: want %d idle timeouts and closes", it, sl.closed.Load(), conns)
		}
		t.Logf("%d requests served, %d refused", served.Load(), refused.Load())
		sl.check(t)
		if onDemand {
			checkTimersStopped(t, sl)
		}
	})
}

// idleRacer is one client of TestServeIdleTimeoutRace. The pauses spread
// its requests around the idle timeout; nothing waits on them.
func idleRacer(addr string, timeout time.Duration, seed uint64, served, refused *atomic.Int64) error {
	rng := rand.New(rand.NewPCG(seed, 33))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a lost request fails here instead of hanging
	closed := func(err error) bool {
		return err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	}
	var b [1]byte
	for r := range 3 {
		// The behaviour under test: a request sent at a random moment
		// around the idle timeout (half to one and a half of it), racing
		// the timer; nothing is synchronized by it.
		time.Sleep(timeout/2 + time.Duration(rng.Int64N(int64(timeout))))
		if _, err := c.Write([]byte{byte(r)}); err != nil {
			if closed(err) {
				refused.Add(1)
				return nil
			}
			return fmt.Errorf("request %d: write: %v", r, err)
		}
		if _, err := c.Read(b[:]); err != nil {
			if closed(err) {
				refused.Add(1)
				return nil
			}
			return fmt.Errorf("request %d: neither served nor refused: %v", r, err)
		}
		served.Add(1)
	}
	if _, err := c.Read(b[:]); !closed(err) {
		return fmt.Errorf("read %v after the last request, want EOF from the idle timeout", err)
	}
	return nil
}

// TestServeIdleTimeoutShutdown: Shutdown and Close with idle timers
// pending (a long IdleTimeout), or firing as they run (a short one), close
// every connection once and leave no timer running, no goroutine and no
// fd behind; a long IdleTimeout counts no idle timeout.
func TestServeIdleTimeoutShutdown(t *testing.T) {
	for _, impl := range []string{"netpoll", "net"} {
		for _, stopWith := range []string{"shutdown", "close"} {
			for _, timeout := range []time.Duration{time.Hour, 10 * time.Millisecond} {
				t.Run(fmt.Sprintf("impl=%s/%s/idle=%v", impl, stopWith, timeout), func(t *testing.T) {
					idleShutdown(t, impl, stopWith, timeout)
				})
			}
		}
	}
}

func idleShutdown(t *testing.T, impl, stopWith string, timeout time.Duration) {
	const conns = 50
	done, stop := watchdog(t, 30*time.Second)
	defer done()
	// The baseline is taken before the group (once the runtime's own
	// poller has its fds), which is closed before the count: a poller that has run handlers inline keeps a watcher and
	// idle workers (serverole_linux.go) while it is open, and every one of
	// them must be gone once it is closed.
	initRuntimePoller(t)
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)
	var g *netpoll.Group
	if impl == "netpoll" {
		g = newGroup(t, netpoll.Config{})
	}
	var l net.Listener
	if g != nil {
		l = listen(t, g, "tcp")
	} else {
		l = serveListener(t, "net")
	}
	sl := newStateLog()
	s := &netpoll.Server{IdleTimeout: timeout, ConnState: sl.hook, Handler: echoHandler}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	clients := make([]net.Conn, conns)
	for i := range clients {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	if timeout == time.Hour {
		for _, c := range clients {
			roundTrip(t, c, []byte("hi"))
		}
		if !await(stop, func() bool { return s.Stats().Idle == conns }) {
			t.Fatalf("stats %+v: want %d idle", s.Stats(), conns)
		}
	}
	if stopWith == "shutdown" {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	} else if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; !errors.Is(err, netpoll.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	for i, c := range clients {
		if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client %d read %v, want EOF", i, err)
		}
		c.Close()
	}
	// A client the Server had not accepted yet is refused by the listener's
	// close; every one accepted is closed once.
	if !await(stop, func() bool { return s.Stats().Conns == 0 }) {
		t.Fatalf("stats %+v after %s", s.Stats(), stopWith)
	}
	it := idleTimeouts(t, s)
	if timeout == time.Hour && (it != 0 || sl.closed.Load() != conns) {
		t.Errorf("%d idle timeouts, %d closed: want %d closed, no idle timeout", it, sl.closed.Load(), conns)
	}
	if it > uint64(sl.closed.Load()) {
		t.Errorf("%d idle timeouts: more than the %d connections closed", it, sl.closed.Load())
	}
	sl.check(t)
	if impl == "netpoll" {
		checkTimersStopped(t, sl)
	}
	l.Close()
	if g != nil {
		g.Close()
	}
	awaitGoroutines(t, goroutines)
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds open, want %d as before the group and the listener", n, fds)
	}
}
