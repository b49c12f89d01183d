package netpoll_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/edgepoll/edgepoll/netpoll"
)

// keyedBlockingEcho echoes what one Read gets; a message naming one of
// gates ("blockA") first reports on its entered channel and waits for its
// release channel, so that two handlers block and are released apart.
type gate struct{ entered, release chan struct{} }

func keyedBlockingEcho(gates map[string]gate) netpoll.Handler {
	return netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if g, ok := gates[string(buf[:n])]; ok {
			g.entered <- struct{}{}
			<-g.release
		}
		_, err = c.Write(buf[:n])
		return err
	})
}

// TestServeLoopReviewTwoTakeovers: the watchdog takes a's blocked run, then
// b's on the next holder, while a's handler still blocks. Both runs were
// displaced, so both connections are demoted (DESIGN: "a run the watchdog
// took ... makes its connection's next calls run on goroutines of their
// own"). loopRole.blocked holds one word: b's takeover overwrites a's, and
// a's owner, which reads it only once its call returns, finds b's word
// and does not demote a.
func TestServeLoopReviewTwoTakeovers(t *testing.T) {
	ga := gate{make(chan struct{}), make(chan struct{})}
	gb := gate{make(chan struct{}), make(chan struct{})}
	f := newLoopFixture(t, keyedBlockingEcho(map[string]gate{"blockA": ga, "blockB": gb}), 2)
	a, b := f.clients[0], f.clients[1]
	before := readLoop(t, f.g, f.s)
	if _, err := a.Write([]byte("blockA")); err != nil {
		t.Fatal(err)
	}
	<-ga.entered
	f.tickUntil(t, "the watchdog took a's run", func() bool { return readLoop(t, f.g, f.s).sub(before).takeovers == 1 })
	if _, err := b.Write([]byte("blockB")); err != nil {
		t.Fatal(err)
	}
	<-gb.entered
	f.tickUntil(t, "the watchdog took b's run", func() bool { return readLoop(t, f.g, f.s).sub(before).takeovers == 2 })
	got := make([]byte, 6)
	close(ga.release)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "blockA" {
		t.Fatalf("a's echo: %q, %v", got, err)
	}
	close(gb.release)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "blockB" {
		t.Fatalf("b's echo: %q, %v", got, err)
	}
	f.rest(t)
	if d := readLoop(t, f.g, f.s).sub(before); d.takeovers != 2 || d.demotions != 2 {
		t.Errorf("takeovers %d, demotions %d: want 2, 2 (a's and b's runs were both taken)", d.takeovers, d.demotions)
	}
	// a's next call, demoted, runs on a goroutine of its own.
	w := readLoop(t, f.g, f.s)
	if err := echo1(a, []byte("a"), got[:1]); err != nil {
		t.Fatal(err)
	}
	f.rest(t)
	if d := readLoop(t, f.g, f.s).sub(w); d.worker != 1 || d.inline != 0 {
		t.Errorf("a's call after its run was taken: on workers %d, on the loop %d; want 1, 0", d.worker, d.inline)
	}
}

// TestServeLoopReviewRunningAfterClose: the loop holds no connection past
// its run (loopRole.running is cleared after the holder's CAS). A run that
// ends otherwise, by a handler's Goexit or on the goroutine its park passed
// the loop from, leaves running naming the connection until the next
// holder's next run: a closed connection (its serverConn, Conn and desc)
// stays reachable while the loop is at rest. The first case, a run that
// returns on the loop, shows that the check can pass.
func TestServeLoopReviewRunningAfterClose(t *testing.T) {
	conns := make(chan weak.Pointer[netpoll.Conn], 1)
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 8)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		switch string(buf[:n]) {
		case "close":
			conns <- weak.Make(c.(*netpoll.Conn))
			return errors.New("closed by the handler")
		case "exit":
			conns <- weak.Make(c.(*netpoll.Conn))
			runtime.Goexit()
		case "park":
			conns <- weak.Make(c.(*netpoll.Conn))
			_, err := c.Read(buf) // parks, passing the loop on; EOF
			return err
		}
		_, err = c.Write(buf[:n])
		return err
	})
	f := newLoopFixture(t, h, 3)
	for i, msg := range []string{"close", "exit", "park"} {
		c := f.clients[i]
		before := readLoop(t, f.g, f.s)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		wp := <-conns
		if msg == "park" {
			if !await(f.stop, func() bool { return readLoop(t, f.g, f.s).passes != before.passes }) {
				t.Fatal("the park never passed the loop on")
			}
			c.(*net.TCPConn).CloseWrite()
		}
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%s: the client read %d, %v; want EOF", msg, n, err)
		}
		want := 2 - i
		if !await(f.stop, func() bool {
			n := 0
			for range f.s.Conns() {
				n++
			}
			return n == want && netpoll.LoopState(f.g, 0) == "poll"
		}) {
			t.Fatalf("%s: the connection was never forgotten", msg)
		}
		runtime.GC()
		runtime.GC()
		if wp.Value() != nil {
			t.Errorf("%s: the closed connection is still reachable with the loop at rest", msg)
		}
	}
}

// TestServeLoopReviewSlowThenPark: a call that holds the loop for 200 µs
// (the test's clock), more than demoteAfter, and then parks in a Read of
// its connection, held the loop as long as TestServeLoopSlowCall's slow
// call did before its park passed the loop on; DESIGN: "a call that held
// the loop for 100 µs or more" demotes. runOn only times calls the word
// did not move under (!moved && ...), so the time before the park is
// forgotten: a handler that computes for milliseconds and then reads more
// of its request is never demoted unless the watchdog's tick falls in it.
func TestServeLoopReviewSlowThenPark(t *testing.T) {
	var now atomic.Int64
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 8)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:n]) == "slow" {
			now.Add(int64(200 * time.Microsecond))
			if _, err := io.ReadFull(c, buf[4:8]); err != nil { // parks: the loop passes on
				return err
			}
			n = 8
		}
		_, err = c.Write(buf[:n])
		return err
	})
	f := newLoopFixture(t, h, 1)
	t.Cleanup(netpoll.SetServeClock(func() time.Duration { return time.Duration(now.Load()) }))
	c := f.clients[0]
	before := readLoop(t, f.g, f.s)
	if _, err := c.Write([]byte("slow")); err != nil {
		t.Fatal(err)
	}
	if !await(f.stop, func() bool { return readLoop(t, f.g, f.s).passes != before.passes }) {
		t.Fatal("the loop never passed on")
	}
	if _, err := c.Write([]byte("park")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "slowpark" {
		t.Fatalf("echo %q, %v", got, err)
	}
	f.rest(t)
	if d := readLoop(t, f.g, f.s).sub(before); d.passes != 1 || d.takeovers != 0 || d.demotions != 1 {
		t.Errorf("passes %d, takeovers %d, demotions %d: want 1, 0, 1 (200 µs on the loop before the park)", d.passes, d.takeovers, d.demotions)
	}
}
