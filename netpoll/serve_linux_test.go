package netpoll_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// stateLog records a Server's ConnState calls per connection.
type stateLog struct {
	mu     sync.Mutex
	states map[net.Conn][]netpoll.ConnState
	conns  []net.Conn // in order of StateNew
	closed atomic.Int64
}

func newStateLog() *stateLog { return &stateLog{states: make(map[net.Conn][]netpoll.ConnState)} }

func (sl *stateLog) hook(c net.Conn, st netpoll.ConnState) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if st == netpoll.StateNew {
		sl.conns = append(sl.conns, c)
	}
	sl.states[c] = append(sl.states[c], st)
	if st == netpoll.StateClosed {
		sl.closed.Add(1)
	}
}

// check asserts that every connection went New first, then never repeated a
// state back to back, and ended with exactly one Closed.
func (sl *stateLog) check(t *testing.T) {
	t.Helper()
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for c, sts := range sl.states {
		closes := 0
		for i, st := range sts {
			if (i == 0) != (st == netpoll.StateNew) {
				t.Errorf("%v: states %v: StateNew not first and only first", c.RemoteAddr(), sts)
			}
			if i > 0 && sts[i-1] == st {
				t.Errorf("%v: states %v: %v twice in a row", c.RemoteAddr(), sts, st)
			}
			if st == netpoll.StateClosed {
				closes++
			}
		}
		if closes != 1 || sts[len(sts)-1] != netpoll.StateClosed {
			t.Errorf("%v: states %v: want one StateClosed, last", c.RemoteAddr(), sts)
		}
	}
}

// conn returns the i-th connection the server took on, waiting for it.
func (sl *stateLog) conn(t *testing.T, i int, stop <-chan struct{}) net.Conn {
	t.Helper()
	var c net.Conn
	if !await(stop, func() bool {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if len(sl.conns) > i {
			c = sl.conns[i]
		}
		return c != nil
	}) {
		t.Fatalf("the server never took on connection %d", i)
	}
	return c
}

// serveOn runs s on l until the test ends, then closes it and checks Serve
// returned ErrServerClosed.
func serveOn(t *testing.T, s *netpoll.Server, l net.Listener) {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, netpoll.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		// Close does not wait for the goroutines of hot connections,
		// which close their dups as they wake: wait, so that the next
		// test's count of fds does not see them go.
		done, stop := watchdog(t, time.Minute)
		defer done()
		if !await(stop, func() bool { return netpoll.HotConns(s) == 0 }) {
			t.Errorf("%d connections still hot after Close", netpoll.HotConns(s))
		}
	})
}

// echoHandler echoes what one Read gets and returns, with a buffer from a
// pool (BenchmarkServeIdle counts what a connection allocates).
var echoHandler = netpoll.HandlerFunc(func(c net.Conn) error {
	buf := echoBufs.Get().(*[512]byte)
	defer echoBufs.Put(buf)
	n, err := c.Read(buf[:])
	if err != nil {
		return err
	}
	_, err = c.Write(buf[:n])
	return err
})

var echoBufs = sync.Pool{New: func() any { return new([512]byte) }}

// roundTrip writes msg on c and reads its echo.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, want %q", got, msg)
	}
}

// eachServeConfig runs f on a group of every registration mode, with
// short-read skipping on (the hand-off may skip its socket check) and off
// (it always checks), on one whose handlers wait inline (wait=inline), on
// one whose handlers run on the role's goroutine (dispatch=inline), and on
// one whose handlers run on the poller's loop (dispatch=loop).
func eachServeConfig(t *testing.T, f func(t *testing.T, cfg netpoll.Config)) {
	for _, m := range modes {
		for _, sr := range []string{"on", "off"} {
			t.Run(fmt.Sprintf("mode=%v/shortread=%v", m, sr), func(t *testing.T) {
				f(t, cfgOf(t, "mode="+m+",shortread="+sr))
			})
		}
	}
	t.Run("mode=et/wait=inline", func(t *testing.T) {
		f(t, cfgOf(t, "wait=inline"))
	})
	// The default serves hot (mode=et above); the role's inline calls,
	// the default before it, are served here.
	t.Run("mode=et/dispatch=inline", func(t *testing.T) {
		f(t, cfgOf(t, "dispatch=inline"))
	})
	// Handlers run on the blocking wait's thread, one after another.
	t.Run("mode=et/dispatch=loop", func(t *testing.T) {
		f(t, cfgOf(t, "wait=block,dispatch=loop"))
	})
}

// hotCalls reads s's count of calls made by hot connections' waits
// (dispatch=hot, the default with mode=et): calls that no edge and no
// hand-off started.
func hotCalls(t *testing.T, s *netpoll.Server) uint64 {
	t.Helper()
	sm := []netpoll.Sample{{Name: "/server/hot-calls:calls"}}
	if err := s.ReadStats(sm); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	return sm[0].Value
}

// TestServeIdleHoldsNoGoroutine serves 100 connections that echo a few
// messages each and then idle: every one is idle with no goroutine, no
// handler runs, and each is served again when it speaks. Closing the
// clients closes every connection once, and nothing is left.
func TestServeIdleHoldsNoGoroutine(t *testing.T) {
	const conns, rounds = 100, 3
	eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
		done, stop := watchdog(t, 30*time.Second)
		defer done()
		goroutines, fds := runtime.NumGoroutine(), countFDs(t)
		g := newGroup(t, cfg)
		sl := newStateLog()
		s := &netpoll.Server{Handler: echoHandler, ConnState: sl.hook}
		l := listen(t, g, "tcp")
		serveOn(t, s, l)
		clients := make([]net.Conn, conns)
		for i := range clients {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			clients[i] = c
		}
		// Every connection served and idle before any speaks: one whose
		// data is queued when Serve takes it on starts its handler at
		// once, without a wakeup, and the count below would come up
		// short (once 26 such of 300 starts under load).
		if !await(stop, func() bool { st := s.Stats(); return st.Conns == conns && st.Idle == conns && allServe(s) }) {
			t.Fatalf("stats %+v: want %d connections idle in serve before the first message", s.Stats(), conns)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for r := range rounds {
			for i, c := range clients {
				roundTrip(t, c, fmt.Appendf(nil, "round %d conn %d %s", r, i, strings.Repeat("x", rng.IntN(300))))
			}
		}
		// A handing-off goroutine reports StateIdle just before it moves
		// the read direction to serve: wait for both.
		if !await(stop, func() bool { st := s.Stats(); return st.Idle == conns && st.Running == 0 && allServe(s) }) {
			t.Fatalf("stats %+v: want %d idle, none running, every read direction in serve", s.Stats(), conns)
		}
		// Each connection idle holds no goroutine: the process has about
		// as many as before (the accept loop, the pollers' goroutines).
		if n := runtime.NumGoroutine(); n > goroutines+10 {
			t.Errorf("%d goroutines with %d idle connections, %d before: idle connections hold goroutines", n, conns, goroutines)
		}
		st := s.Stats()
		if st.HandlerRuns != conns*rounds || st.Conns != conns || st.Panics != 0 {
			t.Errorf("stats %+v: want %d handler starts, %d conns", st, conns*rounds, conns)
		}
		// Each return is followed by a hand-off, or (hot) by the call its
		// connection's wait makes, or by a hand-off once it goes cold.
		hot := hotCalls(t, s)
		if ho := readHandOffs(t, s); ho.HandOffs+hot < conns*rounds || ho.Checks+ho.Skips < ho.HandOffs {
			t.Errorf("hand-offs %+v and %d hot calls: want at least %d together, each hand-off checked or skipped", ho, hot, conns*rounds)
		}
		// Every call was started by an edge, which the poller counts as a
		// wakeup (adaptive spinning learns from them), or by a hand-off
		// whose check found the next message already queued: it came
		// while the handler still ran, an edge that woke nobody (none, if
		// the mode had the fd disarmed). The poller counts a poll's
		// wakeups once it has dispatched them all, so the last may be
		// counted after its handler ran: wait for it.
		found := readHandOffs(t, s).Found
		if !await(stop, func() bool { return netpoll.Counters(g).Total.Woken+found+hot >= st.HandlerRuns }) {
			t.Errorf("the pollers counted %d wakeups, hand-offs found %d messages queued and hot waits %d for %d handler starts", netpoll.Counters(g).Total.Woken, found, hot, st.HandlerRuns)
		}
		for c, state := range s.Conns() {
			if state != netpoll.StateIdle || netpoll.ReadState(c) != "serve" {
				t.Errorf("%v: %v, read state %s; want idle, serve", c.RemoteAddr(), state, netpoll.ReadState(c))
			}
		}
		for _, c := range clients {
			c.Close()
		}
		if !await(stop, func() bool { return sl.closed.Load() == conns }) {
			t.Fatalf("%d of %d connections reported closed", sl.closed.Load(), conns)
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		sl.check(t)
		for _, c := range clients {
			c.Close()
		}
		g.Close()
		if n := countFDs(t); n != fds {
			t.Errorf("%d fds open after Shutdown and Group.Close, want %d", n, fds)
		}
		awaitGoroutines(t, goroutines)
	})
}

// framedSession is one connection's state between handler calls: a
// bufio.Reader, so that several messages in one segment are read at once
// and the handler must not return while it holds some.
type framedSession struct {
	br *bufio.Reader
	bw *bufio.Writer
}

// ServeConn echoes length-prefixed frames (4-byte big-endian length, then
// the body) until its reader holds nothing more.
func (fs *framedSession) ServeConn(c net.Conn) error {
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(fs.br, hdr[:]); err != nil {
			return err
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(fs.br, body); err != nil {
			return err
		}
		fs.bw.Write(hdr[:])
		fs.bw.Write(body)
		if fs.br.Buffered() == 0 {
			return fs.bw.Flush()
		}
	}
}

// TestServeFramed sends length-prefixed frames split across segments (a
// handler blocks mid-frame until the rest comes) and pipelined several per
// segment (its reader holds some when one is done), over many connections
// at once: every frame comes back, in order, and nothing is stranded.
func TestServeFramed(t *testing.T) {
	const conns, frames = 20, 60
	eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
		g := newGroup(t, cfg)
		done, _ := watchdog(t, 60*time.Second)
		defer done()
		sl := newStateLog()
		s := &netpoll.Server{
			NewHandler: func(c net.Conn) netpoll.Handler {
				return &framedSession{br: bufio.NewReaderSize(c, 64), bw: bufio.NewWriter(c)}
			},
			ConnState: sl.hook,
		}
		l := listen(t, g, "tcp")
		serveOn(t, s, l)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := framedClient(l.Addr().String(), uint64(i), frames); err != nil {
					t.Errorf("client %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		st := s.Stats()
		if st.HandlerRuns == 0 || st.Panics != 0 {
			t.Errorf("stats %+v", st)
		}
		s.Shutdown(context.Background())
		sl.check(t)
	})
}

// framedClient writes frames of random sizes cut at random points into
// segments (TCP_NODELAY, so each write is one), reading the echo as it
// goes, and checks every byte.
func framedClient(addr string, seed uint64, frames int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 7))
	var stream []byte
	for range frames {
		body := make([]byte, rng.IntN(200))
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		stream = binary.BigEndian.AppendUint32(stream, uint32(len(body)))
		stream = append(stream, body...)
	}
	echoed := make(chan error, 1)
	go func() {
		got := make([]byte, len(stream))
		if _, err := io.ReadFull(c, got); err != nil {
			echoed <- fmt.Errorf("reading the echo: %w", err)
			return
		}
		if !bytes.Equal(got, stream) {
			echoed <- errors.New("the echo differs from the frames sent")
			return
		}
		echoed <- nil
	}()
	for rest := stream; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(300))
		if _, err := c.Write(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
		if rng.IntN(4) == 0 {
			runtime.Gosched() // let the server take part of a frame, or several
		}
	}
	return <-echoed
}

// TestServeHandOffWindows puts each event the hand-off must not lose into
// its two windows (before entering serve, after it): data, Close, a past
// read deadline. The connection is served again exactly as often as the
// event asks, or closed exactly once.
func TestServeHandOffWindows(t *testing.T) {
	for _, at := range []string{"before-serve", "in-serve"} {
		for _, ev := range []string{"data", "close", "deadline"} {
			t.Run(at+"/"+ev, func(t *testing.T) {
				eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
					handOffWindow(t, cfg, at, ev)
				})
			})
		}
	}
}

func handOffWindow(t *testing.T, cfg netpoll.Config, at, ev string) {
	g := newGroup(t, cfg)
	done, stop := watchdog(t, 20*time.Second)
	defer done()
	sl := newStateLog()
	var calls atomic.Int64
	s := &netpoll.Server{ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		calls.Add(1)
		return echoHandler(c)
	})}
	l := listen(t, g, "tcp")
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// The first hand-off (at accept) runs without the hook: the hook
	// fires at the hand-off after the first request.
	serveOn(t, s, l)
	server := sl.conn(t, 0, stop)
	if !netpoll.AwaitReadState(server, "serve", stop) {
		t.Fatal("the new connection never went idle")
	}
	var fired atomic.Bool
	restore := netpoll.SetHandOffHook(func(c net.Conn, where string) {
		// Only after the first call: a run a stale edge started checks
		// the socket and may hand off before "first" arrives.
		if c != server || where != at || calls.Load() == 0 || fired.Swap(true) {
			return
		}
		switch ev {
		case "data":
			client.Write([]byte("second"))
			// The data reaches the socket, and its edge the descriptor
			// (ready) before the hand-off goes on; in serve, the edge
			// starts the handler, whose check waits for the hand-off's
			// lock. mode=oneshot is not armed in either window (the
			// hand-off arms it after entering serve, and the kernel then
			// reports what is queued): no edge comes.
			await(stop, func() bool { return inq(t, c) > 0 })
			if !inExperiment(cfg, "mode=oneshot") {
				await(stop, func() bool { return netpoll.ReadState(c) == "ready" })
			}
		case "close":
			go c.Close() // Close waits for the hand-off's reference
			await(stop, func() bool { return netpoll.Closing(c) })
		case "deadline":
			c.SetReadDeadline(time.Now().Add(-time.Second))
		}
	})
	defer restore()
	roundTrip(t, client, []byte("first"))
	switch ev {
	case "data":
		got := make([]byte, len("second"))
		if _, err := io.ReadFull(client, got); err != nil || string(got) != "second" {
			t.Fatalf("echo of the data sent in the window: %q, %v", got, err)
		}
		if !netpoll.AwaitReadState(server, "serve", stop) {
			t.Fatal("the connection never went idle again")
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("%d handler calls, want 2", n)
		}
	case "close", "deadline":
		// A close is seen by the run loop: no call. A deadline that
		// passed in the window is work: one call, whose Read times
		// out, then the handler returns with the deadline past: closed.
		if !await(stop, func() bool { return sl.closed.Load() == 1 }) {
			t.Fatalf("the connection was not closed; %d calls", calls.Load())
		}
		want := int64(1)
		if ev == "deadline" {
			want = 2
		}
		if n := calls.Load(); n != want {
			sl.mu.Lock()
			t.Errorf("%d handler calls, want %d; states %v", n, want, sl.states[server])
			sl.mu.Unlock()
		}
		if _, err := client.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("client read %v, want EOF", err)
		}
	}
	if !fired.Load() {
		t.Fatal("the hook never fired")
	}
	s.Shutdown(context.Background())
	sl.check(t)
}

// idleCase is an event that comes while a connection is idle, and what the
// handler does about it.
type idleCase struct {
	name string
	// arm runs in the first call, after the echo: it may set a deadline.
	arm func(c net.Conn)
	// event happens on the client once the connection is idle.
	event func(t *testing.T, client net.Conn)
	// onErr is the handler's answer to a Read error: it may write and
	// clear the deadline. It returns what the handler returns.
	onErr func(c net.Conn, err error) error
	// then checks the client side after the event and returns the calls
	// the connection must have had when it is done.
	then    func(t *testing.T, client net.Conn) (calls int64)
	wantErr error // what the second call's Read met
	closed  bool  // the server closes the connection
}

// TestServeIdleEvents ends an idle connection's wait with each event it
// must see, exactly once and with the error the Conn gives: the peer's EOF
// and reset (the hand-off's socket check must leave the reset for Read),
// the idle timeout (a read deadline), and an idle timeout the handler
// answers with a ping and no new deadline. A handler that returns nil
// after EOF, a reset or a past deadline has its connection closed (it
// would otherwise be called again at once, for ever).
func TestServeIdleEvents(t *testing.T) {
	forget := func(net.Conn, error) error { return nil }
	eof := func(t *testing.T, client net.Conn) int64 {
		if _, err := client.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("client read %v, want EOF", err)
		}
		return 2
	}
	cases := []idleCase{
		{name: "eof", event: func(t *testing.T, c net.Conn) { c.(*net.TCPConn).CloseWrite() },
			onErr: forget, then: eof, wantErr: io.EOF, closed: true},
		{name: "reset", event: func(t *testing.T, c net.Conn) {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}, onErr: forget, then: func(*testing.T, net.Conn) int64 { return 2 }, wantErr: syscall.ECONNRESET, closed: true},
		{name: "timeout", arm: func(c net.Conn) { c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) },
			onErr: forget, then: eof, wantErr: os.ErrDeadlineExceeded, closed: true},
		{name: "timeout-ping", arm: func(c net.Conn) { c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) },
			onErr: func(c net.Conn, err error) error {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					return err
				}
				c.SetReadDeadline(time.Time{})
				_, err = c.Write([]byte("ping"))
				return err
			},
			then: func(t *testing.T, client net.Conn) int64 {
				got := make([]byte, 4)
				if _, err := io.ReadFull(client, got); err != nil || string(got) != "ping" {
					t.Fatalf("client read %q, %v; want ping", got, err)
				}
				roundTrip(t, client, []byte("after the ping"))
				return 3
			}, wantErr: os.ErrDeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) { idleEvent(t, cfg, tc) })
		})
	}
}

func idleEvent(t *testing.T, cfg netpoll.Config, tc idleCase) {
	g := newGroup(t, cfg)
	done, stop := watchdog(t, 20*time.Second)
	defer done()
	sl := newStateLog()
	var calls atomic.Int64
	errs := make(chan error, 4)
	s := &netpoll.Server{ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		n := calls.Add(1)
		var buf [64]byte
		k, err := c.Read(buf[:])
		if err != nil {
			errs <- err
			return tc.onErr(c, err)
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return err
		}
		if n == 1 && tc.arm != nil {
			tc.arm(c)
		}
		return nil
	})}
	l := listen(t, g, "tcp")
	serveOn(t, s, l)
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	roundTrip(t, client, []byte("hello"))
	server := sl.conn(t, 0, stop)
	if tc.event != nil {
		if !netpoll.AwaitReadState(server, "serve", stop) {
			t.Fatal("the connection never went idle")
		}
		tc.event(t, client)
	}
	want := tc.then(t, client)
	select {
	case err := <-errs:
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("the handler's Read met %v, want %v", err, tc.wantErr)
		}
	case <-stop:
		t.Fatal("the handler never met the event")
	}
	if tc.closed {
		if !await(stop, func() bool { return sl.closed.Load() == 1 }) {
			t.Fatal("the connection was not closed")
		}
	} else if !netpoll.AwaitReadState(server, "serve", stop) {
		t.Fatal("the connection never went idle again")
	}
	if n := calls.Load(); n != want {
		t.Errorf("%d handler calls, want %d", n, want)
	}
	client.Close()
	if !await(stop, func() bool { return sl.closed.Load() == 1 }) {
		t.Fatal("the connection was not closed after the client's")
	}
	sl.check(t)
}

// TestServeHandlerChoices covers what a handler may do: block mid-request
// (the connection is active, never cut off), close its connection, panic
// (logged; that connection closed, the others served), and leave the
// connection to another goroutine that writes to it while it is idle, up
// to backpressure that parks only that writer.
func TestServeHandlerChoices(t *testing.T) {
	eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
		g := newGroup(t, cfg)
		done, stop := watchdog(t, 30*time.Second)
		defer done()
		sl := newStateLog()
		var logged bytes.Buffer
		var logMu sync.Mutex
		s := &netpoll.Server{ConnState: sl.hook, ErrorLog: log.New(lockedWriter{&logMu, &logged}, "", 0),
			Handler: netpoll.HandlerFunc(func(c net.Conn) error {
				var hdr [1]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return err
				}
				switch hdr[0] {
				case 'b': // a body of 4 bytes follows, perhaps later
					body := make([]byte, 4)
					if _, err := io.ReadFull(c, body); err != nil {
						return err
					}
					_, err := c.Write(body)
					return err
				case 'c':
					c.Write([]byte("bye"))
					return c.Close()
				case 'p':
					panic("boom")
				}
				_, err := c.Write(hdr[:])
				return err
			})}
		l := listen(t, g, "tcp")
		serveOn(t, s, l)
		dial := func() net.Conn {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}

		// Blocks mid-request.
		c0 := dial()
		c0.Write([]byte("b"))
		s0 := sl.conn(t, 0, stop)
		if !netpoll.AwaitReadState(s0, "waiting", stop) {
			t.Fatal("the handler never parked mid-request")
		}
		if st := s.Stats(); st.Running != 1 {
			t.Errorf("stats %+v with a handler parked mid-request: want 1 running", st)
		}
		c0.Write([]byte("body"))
		got := make([]byte, 4)
		if _, err := io.ReadFull(c0, got); err != nil || string(got) != "body" {
			t.Fatalf("echo of the body %q, %v", got, err)
		}

		// Closes its connection.
		c1 := dial()
		c1.Write([]byte("c"))
		if b, err := io.ReadAll(c1); err != nil || string(b) != "bye" {
			t.Errorf("client of a handler that closes read %q, %v; want bye, EOF", b, err)
		}

		// Panics.
		c2 := dial()
		c2.Write([]byte("p"))
		if b, err := io.ReadAll(c2); err != nil || len(b) != 0 {
			t.Errorf("client of a panicking handler read %q, %v; want EOF", b, err)
		}
		if st := s.Stats(); st.Panics != 1 {
			t.Errorf("stats %+v: want 1 panic", st)
		}
		logMu.Lock()
		if !strings.Contains(logged.String(), "panic serving") || !strings.Contains(logged.String(), "boom") {
			t.Errorf("log %q: want the panic and its value", logged.String())
		}
		logMu.Unlock()
		roundTrip(t, c0, []byte("x")) // the others are still served

		// Another goroutine writes to an idle connection, up to
		// backpressure: only it parks; no handler runs.
		if !netpoll.AwaitReadState(s0, "serve", stop) {
			t.Fatal("connection 0 never went idle")
		}
		starts := s.Stats().HandlerRuns
		// Buffers of fixed size on both ends, which turns the kernel's
		// autotuning off: the push cannot fit (4 MiB once did, with the
		// machine loaded, and the writer never parked).
		if err := s0.(*netpoll.Conn).SetWriteBuffer(64 << 10); err != nil {
			t.Fatal(err)
		}
		if err := c0.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
			t.Fatal(err)
		}
		push := bytes.Repeat([]byte("push"), 4<<20/4)
		pushed := make(chan error, 1)
		go func() {
			_, err := s0.Write(push)
			pushed <- err
		}()
		if !netpoll.AwaitWriteState(s0, "waiting", stop) {
			select {
			case err := <-pushed:
				t.Fatalf("the writer never parked on backpressure: the push returned %v", err)
			default:
			}
			t.Fatalf("the writer never parked on backpressure: write state %s", netpoll.WriteState(s0))
		}
		if st := s.Stats(); st.HandlerRuns != starts || st.Running != 0 || netpoll.ReadState(s0) != "serve" {
			t.Errorf("stats %+v, read state %s while a writer is parked: want no handler start, none running, serve", st, netpoll.ReadState(s0))
		}
		got = make([]byte, len(push))
		if _, err := io.ReadFull(c0, got); err != nil || !bytes.Equal(got, push) {
			t.Fatalf("client read of the push: %v", err)
		}
		if err := <-pushed; err != nil {
			t.Fatalf("push: %v", err)
		}
		if st := s.Stats(); st.HandlerRuns != starts {
			t.Errorf("%d handler starts after the push, %d before: write readiness started a handler", st.HandlerRuns, starts)
		}

		// A Read from outside the handler on an idle connection fails
		// and leaves it served.
		if _, err := s0.Read(make([]byte, 1)); !errors.Is(err, netpoll.ErrServed) {
			t.Errorf("Read outside the handler: %v, want the served error", err)
		}
		roundTrip(t, c0, []byte("y"))
		if !await(stop, func() bool { return sl.closed.Load() == 2 }) {
			t.Fatalf("%d connections closed, want 2 (the closer and the panicker)", sl.closed.Load())
		}
		s.Close()
		if !await(stop, func() bool { return sl.closed.Load() == 3 }) {
			t.Fatalf("%d connections closed after Close, want 3", sl.closed.Load())
		}
		sl.check(t)
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (lw lockedWriter) Write(b []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(b)
}

// TestServeShutdown: Shutdown closes the idle connections at once, waits
// for a handler parked mid-request until it returns, then returns nil; a
// Shutdown whose context ends first returns the context's error. Serve
// returns ErrServerClosed, and a Serve after it at once.
func TestServeShutdown(t *testing.T) {
	for _, impl := range []string{"netpoll", "net"} {
		t.Run("impl="+impl, func(t *testing.T) {
			done, stop := watchdog(t, 30*time.Second)
			defer done()
			sl := newStateLog()
			s := &netpoll.Server{ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
				var b [2]byte // a request is two bytes, perhaps in two segments
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return err
				}
				_, err := c.Write(b[:])
				return err
			})}
			l := serveListener(t, impl)
			served := make(chan error, 1)
			go func() { served <- s.Serve(l) }()
			var clients []net.Conn
			for range 4 {
				c, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				roundTrip(t, c, []byte("hi"))
				clients = append(clients, c)
			}
			if !await(stop, func() bool { return s.Stats().Idle == 4 }) {
				t.Fatalf("stats %+v: want 4 idle", s.Stats())
			}
			busy := clients[3]
			busy.Write([]byte("a")) // half a request: its handler parks
			if !await(stop, func() bool { return s.Stats().Running == 1 }) {
				t.Fatal("the busy connection's handler never ran")
			}
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(context.Background()) }()
			for _, c := range clients[:3] {
				if _, err := c.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("idle client read %v after Shutdown, want EOF", err)
				}
			}
			if !await(stop, func() bool { return sl.closed.Load() == 3 }) {
				t.Fatalf("%d closed, want the 3 idle", sl.closed.Load())
			}
			select {
			case err := <-shut:
				t.Fatalf("Shutdown returned %v with a handler parked mid-request", err)
			default:
			}
			busy.Write([]byte("b"))
			got := make([]byte, 2)
			if _, err := io.ReadFull(busy, got); err != nil || string(got) != "ab" {
				t.Fatalf("busy client read %q, %v: the request must complete", got, err)
			}
			if err := <-shut; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if _, err := busy.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("busy client read %v after its request, want EOF", err)
			}
			if err := <-served; !errors.Is(err, netpoll.ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
			if err := s.Serve(l); !errors.Is(err, netpoll.ErrServerClosed) {
				t.Errorf("Serve after Shutdown returned %v, want ErrServerClosed", err)
			}
			if st := s.Stats(); st.Conns != 0 || st.Idle != 0 || st.Running != 0 {
				t.Errorf("stats %+v after Shutdown: want nothing open", st)
			}
			sl.check(t)

			// A context that ends first.
			s2 := &netpoll.Server{Handler: s.Handler}
			l2 := serveListener(t, impl)
			go s2.Serve(l2)
			c, err := net.Dial("tcp", l2.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("a"))
			if !await(stop, func() bool { return s2.Stats().Running == 1 }) {
				t.Fatal("the handler never ran")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := s2.Shutdown(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("Shutdown with a canceled context: %v, want context.Canceled", err)
			}
			s2.Close()
			if _, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("client read %v after Close, want EOF", err)
			}
			if !await(stop, func() bool { return s2.Stats().Conns == 0 }) {
				t.Errorf("stats %+v after Close", s2.Stats())
			}
		})
	}
}

// serveListener listens on a fresh local TCP address with this package
// (a group of its own) or package net (the fallback).
func serveListener(t *testing.T, impl string) net.Listener {
	if impl == "netpoll" {
		return listen(t, newGroup(t, netpoll.Config{}), "tcp")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestServeFallback runs the same handlers on package net's connections:
// one goroutine per connection, waiting without a buffer, with the same
// policy: echo on many connections, EOF and a past deadline close, an idle
// timeout calls the handler.
func TestServeFallback(t *testing.T) {
	done, stop := watchdog(t, 30*time.Second)
	defer done()
	goroutines := runtime.NumGoroutine()
	sl := newStateLog()
	var calls atomic.Int64
	s := &netpoll.Server{ConnState: sl.hook, Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		calls.Add(1)
		var buf [64]byte
		n, err := c.Read(buf[:])
		if err != nil {
			return nil // forgetful: the policy closes it
		}
		if string(buf[:n]) == "deadline" {
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		}
		_, err = c.Write(buf[:n])
		return err
	})}
	l := serveListener(t, "net")
	serveOn(t, s, l)
	const conns = 20
	var clients []net.Conn
	for i := range conns {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for r := range 3 {
			roundTrip(t, c, fmt.Appendf(nil, "conn %d round %d", i, r))
		}
		clients = append(clients, c)
	}
	if !await(stop, func() bool { return s.Stats().Idle == conns }) {
		t.Fatalf("stats %+v: want %d idle", s.Stats(), conns)
	}
	if st, ho := s.Stats(), readHandOffs(t, s); st.HandlerRuns != 3*conns || ho.HandOffs != 0 {
		t.Errorf("stats %+v, hand-offs %+v: want %d starts and no hand-offs (the fallback keeps its goroutines)", st, ho, 3*conns)
	}
	// EOF: one call that meets it, then closed.
	before := calls.Load()
	clients[0].(*net.TCPConn).CloseWrite()
	if _, err := clients[0].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client read %v after its CloseWrite, want EOF", err)
	}
	// Idle timeout: one call whose Read times out, then closed (the
	// handler returned with the deadline past).
	roundTrip(t, clients[1], []byte("deadline"))
	if _, err := clients[1].Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("client read %v after the idle timeout, want EOF", err)
	}
	if !await(stop, func() bool { return sl.closed.Load() == 2 }) {
		t.Fatalf("%d closed, want 2", sl.closed.Load())
	}
	if n := calls.Load() - before; n != 3 {
		t.Errorf("%d calls for EOF, the deadline request and its timeout; want 3", n)
	}
	for _, c := range clients {
		c.Close()
	}
	if !await(stop, func() bool { return sl.closed.Load() == conns }) {
		t.Fatalf("%d closed, want %d", sl.closed.Load(), conns)
	}
	sl.check(t)
	s.Close()
	awaitGoroutines(t, goroutines+1) // the Serve goroutine ends at cleanup
}

// TestServeTLSRefused: a TLS listener's connections (crypto/tls keeps
// records the socket check cannot see, and *tls.Conn has no SyscallConn)
// are not served on demand: each is closed at once, with a log line that
// says why, and the Server goes on.
func TestServeTLSRefused(t *testing.T) {
	done, stop := watchdog(t, 20*time.Second)
	defer done()
	cert, pool := selfSigned(t)
	g := newGroup(t, netpoll.Config{})
	l := tls.NewListener(listen(t, g, "tcp"), &tls.Config{Certificates: []tls.Certificate{cert}})
	var logged bytes.Buffer
	var logMu sync.Mutex
	sl := newStateLog()
	s := &netpoll.Server{Handler: echoHandler, ConnState: sl.hook, ErrorLog: log.New(lockedWriter{&logMu, &logged}, "", 0)}
	serveOn(t, s, l)
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil {
		t.Fatal("a TLS connection was served")
	}
	if !await(stop, func() bool { return sl.closed.Load() == 1 }) {
		t.Fatal("the TLS connection was not closed")
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logged.String(), "not a syscall.Conn") {
		t.Errorf("log %q: want why the connection cannot be served", logged.String())
	}
	sl.check(t)
}

// TestServeLabels: a handler runs with the pprof label netpoll=handler, so
// a goroutine profile tells handlers from the rest.
func TestServeLabels(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l := listen(t, g, "tcp")
	profile := make(chan string, 1)
	s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		select {
		case profile <- b.String():
		default:
		}
		return echoHandler(c)
	})}
	serveOn(t, s, l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("label"))
	p := <-profile
	i := strings.Index(p, "TestServeLabels.func1")
	if i < 0 {
		t.Fatalf("the handler is not in the goroutine profile:\n%s", p)
	}
	// debug=1 prints a goroutine group's labels on its first line.
	head := p[:i]
	head = head[strings.LastIndex(head, "\n\n")+1:]
	if !strings.Contains(head, `"netpoll":"handler"`) {
		t.Errorf("the handler's goroutine has no netpoll=handler label:\n%s", head)
	}
}

// allServe reports whether every connection of s is idle, its read
// direction in serve.
func allServe(s *netpoll.Server) bool {
	for c, state := range s.Conns() {
		if state != netpoll.StateIdle || netpoll.ReadState(c) != "serve" {
			return false
		}
	}
	return true
}
