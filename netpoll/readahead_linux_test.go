package netpoll_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepoll/edgepoll/netpoll"
)

// aheadStats reads the Server's hot calls and reads ahead, both counted
// when a connection goes cold.
func aheadStats(t *testing.T, s *netpoll.Server) (calls, aheads uint64) {
	t.Helper()
	calls, aheads, _ = aheadSkips(t, s)
	return calls, aheads
}

// aheadSkips is aheadStats with the hot waits that skipped their read.
func aheadSkips(t *testing.T, s *netpoll.Server) (calls, aheads, skips uint64) {
	t.Helper()
	samples := []netpoll.Sample{{Name: "/server/hot-calls:calls"}, {Name: "/server/hot-reads-ahead:calls"}, {Name: "/server/hot-skips:calls"}}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	return samples[0].Value, samples[1].Value, samples[2].Value
}

// echoN echoes msg on c n times, one round trip at a time.
func echoN(t *testing.T, c net.Conn, msg string, n int) {
	t.Helper()
	got := make([]byte, len(msg))
	for range n {
		if err := echo1(c, []byte(msg), got); err != nil {
			t.Fatal(err)
		}
	}
}

// heatAhead echoes on c until s has it hot and waiting, its input read ahead
// from then on.
func heatAhead(t *testing.T, s *netpoll.Server, c net.Conn, stop <-chan struct{}) {
	t.Helper()
	msg, got := []byte("heat"), make([]byte, 4)
	for netpoll.HotConns(s) != 1 {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	if !await(stop, func() bool { return netpoll.HotWaiting(s) == 1 }) {
		t.Fatal("the hot connection never waited")
	}
}

// TestServeReadAheadHops: every call of a hot connection's handler comes
// from a read(2) of its goroutine's (the read ahead, which its Read takes
// with no syscall), none from a poll(2): as many reads ahead as hot calls.
// And each read ahead is short (5 bytes), so the wait after each call
// skips the read that would find nothing: as many skips as calls, the
// syscalls per request a read and a write.
func TestServeReadAheadHops(t *testing.T) {
	_, s, c, stop := hotFixture(t, echoHandler)
	heatAhead(t, s, c, stop)
	const n = 500
	echoN(t, c, "ahead", n)
	goCold(t, s, stop)
	calls, aheads, skips := aheadSkips(t, s)
	t.Logf("hot calls %d, reads ahead %d, skips %d", calls, aheads, skips)
	if calls < n || aheads != calls || skips != calls {
		t.Errorf("hot calls %d, reads ahead %d, skips %d: want at least %d calls, each after a read ahead and before a skip", calls, aheads, skips, n)
	}
}

// TestServeHotBlockQuiet: under wait=block a hot connection's input does
// not wake the poller's thread. That thread blocks in epoll_wait while 500
// echoes are served hot: its voluntary context switches grow by far fewer
// than one a request. With EPOLLPRI watched on the connection's
// registration (TCP puts it in the wakeup key of every segment) it woke
// once a segment, inside the kernel, where the poller's own counters never
// see it (stickyWatch). With TCP_INQ the watch is EPOLLRDHUP alone and the
// wait skips after every short read ahead, as under the nested wait: as
// many skips as calls. Without (a kernel that refuses it) nothing is
// watched and the wait never skips: every wait begins with a read(2) that
// finds nothing.
func TestServeHotBlockQuiet(t *testing.T) {
	for _, inq := range []bool{true, false} {
		t.Run(fmt.Sprintf("inq=%v", inq), func(t *testing.T) {
			if !inq {
				t.Cleanup(netpoll.SetNoInq())
			}
			g, s, c, stop, _ := hotFixtureOf(t, "dispatch=hot,wait=block,spin=off", echoHandler)
			heatAhead(t, s, c, stop)
			tid := netpoll.PollerThread(g, 0)
			if tid == 0 {
				t.Fatal("the blocking poller has no thread")
			}
			before := voluntarySwitches(t, tid)
			const n = 500
			echoN(t, c, "quiet", n)
			woke := voluntarySwitches(t, tid) - before
			goCold(t, s, stop)
			calls, aheads, skips := aheadSkips(t, s)
			t.Logf("poller thread woke %d times in %d echoes; hot calls %d, reads ahead %d, skips %d", woke, n, calls, aheads, skips)
			if woke > n/10 {
				t.Errorf("the poller's thread woke %d times in %d hot echoes, want at most %d", woke, n, n/10)
			}
			wantSkips := uint64(0)
			if inq {
				wantSkips = calls
			}
			if calls < n || aheads != calls || skips != wantSkips {
				t.Errorf("hot calls %d, reads ahead %d, skips %d: want at least %d calls, each after a read ahead, and %d skips", calls, aheads, skips, n, wantSkips)
			}
		})
	}
}

// voluntarySwitches reads thread tid's voluntary context switches: one a
// time it blocked and was woken.
func voluntarySwitches(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("thread %d: %q: %v", tid, line, err)
			}
			return n
		}
	}
	t.Fatalf("thread %d: no voluntary_ctxt_switches in its status", tid)
	return 0
}

// TestServeReadAheadSmallReads: a handler that reads 7 bytes a call gets a
// 1,000-byte message whole and in order, the rest of each read ahead
// taken by the calls after, with no read(2) of their own.
func TestServeReadAheadSmallReads(t *testing.T) {
	_, s, c, stop := hotFixture(t, sevenByteEcho)
	heatAhead(t, s, c, stop)
	calls0, aheads0 := aheadStats(t, s)
	msg := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 28)[:1000]
	got := make([]byte, len(msg))
	if err := echo1(c, msg, got); err != nil {
		t.Fatal(err)
	}
	goCold(t, s, stop)
	calls, aheads := aheadStats(t, s)
	calls, aheads = calls-calls0, aheads-aheads0
	t.Logf("hot calls %d, reads ahead %d", calls, aheads)
	// 143 calls of 7 bytes at least; the heat's echoes count too.
	if calls < 143 || aheads*7 > calls {
		t.Errorf("hot calls %d, reads ahead %d: want at least 143 calls, most taking what a read ahead left", calls, aheads)
	}
}

// TestServeReadAheadRaw: while input read ahead is pending, a RawConn's
// Read and File fail with ErrReadAhead (they would read behind it) and
// call nothing, WaitRead returns at once, and Read takes the rest in
// order. Once File has the fd, the connection reads nothing ahead again:
// its calls come from a poll(2).
func TestServeReadAheadRaw(t *testing.T) {
	type result struct {
		pending            int
		wait, raw, file    error
		called, fileNil    bool
		rest               string
		fileAfter, restErr error
	}
	results := make(chan result, 1)
	h := firstByteHandler(map[byte]func(net.Conn) error{'R': func(c net.Conn) error {
		var b [64]byte
		var r result
		r.pending, _ = netpoll.ReadAhead(c)
		r.wait = c.(*netpoll.Conn).WaitRead()
		rc, _ := c.(syscall.Conn).SyscallConn()
		r.raw = rc.Read(func(uintptr) bool { r.called = true; return true })
		f, err := c.(*netpoll.Conn).File()
		r.file, r.fileNil = err, f == nil
		n, restErr := c.Read(b[:])
		r.rest, r.restErr = string(b[:n]), restErr
		if f, err := c.(*netpoll.Conn).File(); err == nil {
			f.Close()
		} else {
			r.fileAfter = err
		}
		results <- r
		_, err = c.Write([]byte("ok"))
		return err
	}})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	if _, err := c.Write([]byte("Rread ahead")); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.pending != len("read ahead") {
		t.Errorf("read ahead %d bytes when the handler had read one, want %d", r.pending, len("read ahead"))
	}
	if r.wait != nil {
		t.Errorf("WaitRead: %v, want nil at once", r.wait)
	}
	if !errors.Is(r.raw, netpoll.ErrReadAhead) || r.called {
		t.Errorf("RawConn.Read: %v (callback called: %v), want ErrReadAhead and no call", r.raw, r.called)
	}
	var oe *net.OpError
	if !errors.Is(r.file, netpoll.ErrReadAhead) || !errors.As(r.file, &oe) || !r.fileNil {
		t.Errorf("File: %v (nil file: %v), want a *net.OpError wrapping ErrReadAhead and no file", r.file, r.fileNil)
	}
	if r.rest != "read ahead" || r.restErr != nil {
		t.Errorf("Read after: %q, %v; want %q", r.rest, r.restErr, "read ahead")
	}
	if r.fileAfter != nil {
		t.Errorf("File once the input was taken: %v", r.fileAfter)
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ok" {
		t.Fatalf("reply %q, %v", got, err)
	}
	calls0, aheads0 := aheadStats(t, s)
	msg, echoed := []byte("xpoll"), make([]byte, 5)
	for range 20 {
		if err := echo1(c, msg, echoed); err != nil {
			t.Fatal(err)
		}
	}
	goCold(t, s, stop)
	calls, aheads := aheadStats(t, s)
	calls, aheads = calls-calls0, aheads-aheads0
	// The hot period's calls before File's had their reads ahead; the 20
	// after it none.
	if calls < 20 || calls-aheads < 20 {
		t.Errorf("hot calls %d, reads ahead %d since the raw calls: want at least 20 calls with no read ahead", calls, aheads)
	}
}

// TestServeReadAheadWriteTo: WriteTo sends what was read ahead before
// what it splices from the socket.
func TestServeReadAheadWriteTo(t *testing.T) {
	sinkAddr, sunk := sinkListener(t)
	copied := make(chan error, 1)
	h := firstByteHandler(map[byte]func(net.Conn) error{'W': func(c net.Conn) error {
		sink, err := net.Dial("tcp", sinkAddr)
		if err != nil {
			copied <- err
			return err
		}
		_, err = c.(io.WriterTo).WriteTo(sink)
		sink.Close()
		copied <- err
		return io.EOF
	}})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	if _, err := c.Write([]byte("Wfirst;")); err != nil {
		t.Fatal(err)
	}
	want := "first;" + strings.Repeat("then spliced;", 1000)
	if _, err := c.Write([]byte(want[len("first;"):])); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if err := <-copied; err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if got := <-sunk; got != want {
		t.Errorf("the sink got %d bytes (%.40q...), want %d in order", len(got), got, len(want))
	}
}

// TestServeReadAheadReset: a reset that a read ahead consumed (a second
// read would find EOF) reaches the handler's Read as package net reports
// it: a *net.OpError "read" wrapping *os.SyscallError "read" ECONNRESET.
func TestServeReadAheadReset(t *testing.T) {
	errs := make(chan error, 1)
	_, s, c, stop := hotFixture(t, echoReporting(errs))
	heatAhead(t, s, c, stop)
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close() // a reset, with nothing unread
	var err error
	select {
	case err = <-errs:
	case <-stop:
		t.Fatal("the handler never read the reset")
	}
	var oe *net.OpError
	var se *os.SyscallError
	if !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &oe) || oe.Op != "read" || !errors.As(err, &se) || se.Syscall != "read" {
		t.Errorf("Read after a reset: %v (%T), want a *net.OpError read wrapping *os.SyscallError read ECONNRESET", err, err)
	}
	if !await(stop, func() bool { return netpoll.HotConns(s) == 0 }) {
		t.Fatal("the reset connection stayed hot")
	}
	if calls, aheads := aheadStats(t, s); aheads != calls {
		t.Errorf("hot calls %d, reads ahead %d: want the reset's call read ahead too", calls, aheads)
	}
}

// TestServeReadAheadOff: with readahead=off every hot call comes from a
// poll(2), none read ahead, and the handler's Read makes the read.
func TestServeReadAheadOff(t *testing.T) {
	_, s, c, stop, _ := hotFixtureOf(t, "dispatch=hot,spin=off,readahead=off", echoHandler)
	heatAhead(t, s, c, stop)
	msg, got := []byte("poll"), make([]byte, 4)
	for range 100 {
		if err := echo1(c, msg, got); err != nil {
			t.Fatal(err)
		}
	}
	goCold(t, s, stop)
	if calls, aheads := aheadStats(t, s); calls < 100 || aheads != 0 {
		t.Errorf("hot calls %d, reads ahead %d: want at least 100 calls and no read ahead", calls, aheads)
	}
}

// TestReadAheadConfig: readahead's values, its default, and the settings
// it needs.
func TestReadAheadConfig(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "readahead=on": true, "readahead=default": true, "readahead=off": false,
		"dispatch=inline": false, "mode=oneshot": false, "shortread=off": false, "wait=block": false,
		"wait=block,dispatch=loop": true, "wait=block,dispatch=loop,readahead=off": false,
		"wait=block,dispatch=loop,shortread=off": false, "wait=block,dispatch=loop,mode=lt": true,
	} {
		if got := netpoll.ReadAheadSetting(cfgOf(t, s)); got != want {
			t.Errorf("%q: readahead %v, want %v", s, got, want)
		}
	}
	wantConfigErrors(t, "readahead", "readahead=on,dispatch=inline", "readahead=on,dispatch=go", "readahead=on,mode=lt", "readahead=on,shortread=off", "readahead=yes",
		"readahead=on,wait=block", "readahead=on,wait=block,dispatch=loop,shortread=off")
	c := cfgOf(t, "readahead=off")
	if c.Experiment != "readahead=off" {
		t.Errorf("ParseConfig(readahead=off).Experiment = %q", c.Experiment)
	}
}

// TestServeReadAheadStickyWindows: after a short read ahead a hot
// connection's wait skips the read that would find nothing and parks on
// the runtime's flag, which says nothing of what ended the input behind
// what was read: "abc" and the end came together while the handler ran,
// one wakeup's flag took both, and the read ahead stopped before the end.
// Only the poller's watch sees it, and here the poller is held until the
// owner is in a window of that wait: before the wait is announced (the
// poller, let go, sees no wait to kick: the owner must look at sticky
// after it announces), after it is announced, and after every check (the
// owner has looked: the poller must kick the wait). The handler must be
// called for the end in each. With TCP_INQ the read ahead sees a FIN
// itself (its count is 1), so the end is a reset there, which sets no
// count; as on a kernel that refuses TCP_INQ, a FIN.
func TestServeReadAheadStickyWindows(t *testing.T) {
	for _, e := range inputEnds {
		for at, name := range map[netpoll.HotPoint]string{netpoll.HookHotBefore: "before", netpoll.HookHotAnnounced: "announced", netpoll.HookHotChecked: "checked"} {
			t.Run(e.name+"/"+name, func(t *testing.T) {
				if e.noInq {
					t.Cleanup(netpoll.SetNoInq())
				}
				testStickyWindow(t, at, e)
			})
		}
	}
}

// inputEnd is what ends a client's input behind "abc", for the tests of
// the hot wait's watch: the bit it makes sticky, the handler's Read's
// error for it, and whether the test runs as on a kernel without TCP_INQ
// (SetNoInq), where the read ahead cannot see a FIN behind it.
type inputEnd struct {
	name   string
	noInq  bool
	end    func(t *testing.T, c net.Conn)
	sticky uint32
	err    error
}

var inputEnds = []inputEnd{
	{"reset", false, func(t *testing.T, c net.Conn) {
		if err := c.(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}, unix.EPOLLERR, syscall.ECONNRESET},
	{"fin-noinq", true, func(t *testing.T, c net.Conn) {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}, unix.EPOLLRDHUP, io.EOF},
}

func testStickyWindow(t *testing.T, at netpoll.HotPoint, e inputEnd) {
	reads := make(chan reviewRead, 8)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var armed, fired atomic.Bool
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var b [64]byte
		n, err := c.Read(b[:])
		switch {
		case err != nil:
			reads <- reviewRead{"", err}
			return err
		case string(b[:n]) == "block":
			entered <- struct{}{}
			<-release
			return nil
		case string(b[:n]) == "abc":
			reads <- reviewRead{"abc", nil}
			armed.Store(true) // the wait after this call skips its read
			return nil
		}
		_, err = c.Write(b[:n])
		return err
	})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	var hold atomic.Bool
	polled, resume := make(chan struct{}), make(chan struct{})
	var letGo sync.Once
	release1 := func() { letGo.Do(func() { close(resume) }) }
	defer release1() // a failure must not leave the poller held: the group could not close
	defer netpoll.SetStickyHook(func(net.Conn) {
		if hold.CompareAndSwap(true, false) {
			close(polled)
			<-resume // until the owner is in the window
		}
	})()
	defer netpoll.SetHotHook(func(hc net.Conn, p netpoll.HotPoint) {
		if p != at || !armed.CompareAndSwap(true, false) {
			return
		}
		release1()
		if await(stop, func() bool { return netpoll.Sticky(hc)&e.sticky != 0 }) {
			fired.Store(true)
		}
	})()
	hold.Store(true)
	write(t, c, "block")
	<-entered
	write(t, c, "abc")
	e.end(t, c)
	select {
	case <-polled: // the poller has the end of input, and holds it
	case <-stop:
		t.Fatal("the poller never saw the end of input: the watch is not armed")
	}
	close(release)
	awaitAbcThen(t, reads, e.err, func() string {
		return fmt.Sprintf("hot %d, waiting hot %d, window seen %v", netpoll.HotConns(s), netpoll.HotWaiting(s), fired.Load())
	})
	if !fired.Load() {
		t.Fatal("the poller never stored the end of input in the window")
	}
}

// TestServeReadAheadWatchAfterPark: the event that wakes a handler's
// parked Read disarms the hot connection's registration (EPOLLONESHOT),
// watch and all, so the poller re-arms the watch after it: an end of
// input that comes later, queued behind the next input while the handler
// runs, is seen by the poller (sticky), and the handler is called for it
// after the short read ahead of that input. Without the re-arm the poller
// never sees it, and the wait after "abc" skips into a hang. The end is a
// reset, or a FIN as on a kernel without TCP_INQ (inputEnds).
func TestServeReadAheadWatchAfterPark(t *testing.T) {
	for _, e := range inputEnds {
		t.Run(e.name, func(t *testing.T) {
			if e.noInq {
				t.Cleanup(netpoll.SetNoInq())
			}
			testWatchAfterPark(t, e)
		})
	}
}

func testWatchAfterPark(t *testing.T, e inputEnd) {
	reads := make(chan reviewRead, 8)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		var b [64]byte
		n, err := c.Read(b[:])
		switch {
		case err != nil:
			reads <- reviewRead{"", err}
			return err
		case string(b[:n]) == "part1":
			if _, err := c.Write([]byte("go")); err != nil {
				return err
			}
			if n, err = c.Read(b[:]); err != nil { // parks: the rest comes after "go"
				return err
			}
		case string(b[:n]) == "block":
			entered <- struct{}{}
			<-release
			return nil
		case string(b[:n]) == "abc":
			reads <- reviewRead{"abc", nil}
			return nil
		}
		_, err = c.Write(b[:n])
		return err
	})
	g, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	parks := netpoll.Counters(g).Total.ReadParks
	write(t, c, "part1")
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got[:2]); err != nil || string(got[:2]) != "go" {
		t.Fatalf("reply %q, %v; want go", got[:2], err)
	}
	if err := echo1(c, []byte("part2"), got); err != nil {
		t.Fatal(err)
	}
	if n := netpoll.Counters(g).Total.ReadParks - parks; n != 1 {
		t.Fatalf("the handler's Read parked %d times, want 1", n)
	}
	write(t, c, "block")
	<-entered
	sc := serverSide(t, s, c)
	write(t, c, "abc")
	e.end(t, c)
	seen := make(chan struct{})
	go func() {
		if await(stop, func() bool { return netpoll.Sticky(sc)&e.sticky != 0 }) {
			close(seen)
		}
	}()
	select {
	case <-seen:
	case <-time.After(10 * time.Second): // a bound only a hang reaches
		close(release)
		t.Fatal("the poller never saw the end of input: the watch was not re-armed after the handler's park")
	}
	close(release)
	awaitAbcThen(t, reads, e.err, func() string { return "" })
}

// awaitAbcThen waits for the handler's reads of "abc" and then of the end
// of input queued behind it, which fails with end (io.EOF, or what
// errors.Is finds in the error), within a bound only a hang reaches; state
// describes the server for the failure.
func awaitAbcThen(t *testing.T, reads <-chan reviewRead, end error, state func() string) {
	t.Helper()
	for _, want := range []error{nil, end} {
		select {
		case r := <-reads:
			if (want == nil) != (r.err == nil) || (want != nil && !errors.Is(r.err, want)) || (want == nil && r.s != "abc") {
				t.Fatalf("the handler read %q, %v; want %q, then %v", r.s, r.err, "abc", end)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the handler was never called for the end of input behind \"abc\" (want %v) %s", want, state())
		}
	}
}

// sevenByteEcho echoes what a Read of at most 7 bytes gets, so that a
// message takes many calls.
var sevenByteEcho = netpoll.HandlerFunc(func(c net.Conn) error {
	var b [7]byte
	n, err := c.Read(b[:])
	if err != nil {
		return err
	}
	_, err = c.Write(b[:n])
	return err
})
