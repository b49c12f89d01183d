package netpoll_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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
	})
}

// echoHandler echoes what one Read gets and returns.
var echoHandler = netpoll.HandlerFunc(func(c net.Conn) error {
	var buf [512]byte
	n, err := c.Read(buf[:])
	if err != nil {
		return err
	}
	_, err = c.Write(buf[:n])
	return err
})

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
// (it always checks).
func eachServeConfig(t *testing.T, f func(t *testing.T, cfg netpoll.Config)) {
	for _, m := range modes {
		for _, sr := range []netpoll.ShortRead{netpoll.ShortReadOn, netpoll.ShortReadOff} {
			t.Run(fmt.Sprintf("mode=%v/shortread=%v", m, sr), func(t *testing.T) {
				f(t, netpoll.Config{Mode: m, ShortRead: sr})
			})
		}
	}
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
		rng := rand.New(rand.NewPCG(1, 2))
		for r := range rounds {
			for i, c := range clients {
				roundTrip(t, c, fmt.Appendf(nil, "round %d conn %d %s", r, i, strings.Repeat("x", rng.IntN(300))))
			}
		}
		if !await(stop, func() bool { st := s.Stats(); return st.Idle == conns && st.Running == 0 }) {
			t.Fatalf("stats %+v: want %d idle, none running", s.Stats(), conns)
		}
		// Each connection idle holds no goroutine: the process has about
		// as many as before (the accept loop, the pollers' goroutines).
		if n := runtime.NumGoroutine(); n > goroutines+10 {
			t.Errorf("%d goroutines with %d idle connections, %d before: idle connections hold goroutines", n, conns, goroutines)
		}
		st := s.Stats()
		if st.HandlerStarts != conns*rounds || st.Conns != conns || st.Panics != 0 {
			t.Errorf("stats %+v: want %d handler starts, %d conns", st, conns*rounds, conns)
		}
		if st.HandOffs < conns*rounds || st.HandOffChecks+st.HandOffSkips < st.HandOffs {
			t.Errorf("stats %+v: want at least %d hand-offs, each checked or skipped", st, conns*rounds)
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
		if st.HandlerStarts == 0 || st.Panics != 0 {
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
		if c != server || where != at || fired.Swap(true) {
			return
		}
		switch ev {
		case "data":
			client.Write([]byte("second"))
			// The data reaches the socket, and its edge the descriptor
			// (ready) before the hand-off goes on; in serve, the edge
			// starts the handler, whose check waits for the hand-off's
			// lock. OneShot is not armed in either window (the hand-off
			// arms it after entering serve, and the kernel then reports
			// what is queued): no edge comes.
			await(stop, func() bool { return inq(t, c) > 0 })
			if cfg.Mode != netpoll.OneShot {
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
