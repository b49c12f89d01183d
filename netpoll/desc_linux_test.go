package netpoll_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// TestModeCounters shows what each mode costs in epoll_ctl: N reads that
// each park make 0 EPOLL_CTL_MOD calls with mode=et and mode=lt,
// and exactly N with mode=oneshot.
func TestModeCounters(t *testing.T) {
	const n = 200
	for _, tt := range []struct {
		mode    string
		wantMod uint64
	}{
		{"et", 0},
		{"oneshot", n},
		{"lt", 0},
	} {
		t.Run("mode="+tt.mode, func(t *testing.T) {
			// Cold reads: a busy connection's reads wait on the runtime
			// with hotread, whose two MODs per busy period
			// TestHotReadHops counts.
			g := newGroup(t, cfgOf(t, "mode="+tt.mode+",hotread=off"))
			// The client is a package net conn, so the group's counters
			// hold only the listener and the server side.
			client, server := stdPipe(t, listen(t, g, "tcp"))
			done, expired := watchdog(t, time.Minute)
			defer done()

			before := netpoll.Counters(g).Total
			errc := make(chan error, 1)
			go func() {
				buf := make([]byte, 1)
				for range n {
					if _, err := io.ReadFull(server, buf); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for i := range n {
				// Write only once the reader has parked for this byte, so
				// every read parks.
				if !awaitParks(g, before.ReadParks+uint64(i)+1, expired) {
					t.Fatalf("read %d never parked", i)
				}
				if _, err := client.Write([]byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			after := netpoll.Counters(g).Total
			if parks := after.ReadParks - before.ReadParks; parks != n {
				t.Errorf("read parks = %d, want %d", parks, n)
			}
			if mods := after.CtlMod - before.CtlMod; mods != tt.wantMod {
				t.Errorf("EPOLL_CTL_MOD calls = %d for %d parked reads, want %d (level disarms %d)", mods, n, tt.wantMod, after.LevelDisarms-before.LevelDisarms)
			}
			if adds := after.CtlAdd - before.CtlAdd; adds != 0 {
				t.Errorf("EPOLL_CTL_ADD calls after registration = %d, want 0", adds)
			}
		})
	}
}

// TestEarlyEdge delivers the readiness event between the reader's EAGAIN and
// its park. The edge must be kept as a ready token: the reader retries at
// once and returns the data without parking. The poller's goroutine
// delivers it (wait=nested): under wait=inline nobody polls while nobody
// waits, and the edge stays in epoll's ready list for the park's own poll.
func TestEarlyEdge(t *testing.T) {
	g := newGroup(t, cfgOf(t, "mode=et,wait=nested"))
	client, server := pipe(t, g, listen(t, g, "tcp"))
	done, expired := watchdog(t, time.Minute)
	defer done()

	fd := netpoll.FD(server)
	fired := 0
	restore := netpoll.SetBeforeParkHook(func(hfd int) {
		if hfd != fd || fired > 0 {
			return
		}
		fired++
		if _, err := client.Write([]byte("edge")); err != nil {
			t.Error(err)
			return
		}
		// Wait until the poller has seen the edge: the kernel has the data,
		// and no goroutine is parked yet to receive a wakeup.
		if !netpoll.AwaitReadState(server, "ready", expired) {
			t.Error("poller never delivered the edge")
		}
	})
	before := netpoll.Counters(g).Total
	buf := make([]byte, 16)
	n, err := server.Read(buf)
	restore()
	if err != nil || string(buf[:n]) != "edge" {
		t.Fatalf("Read = %q, %v; want \"edge\"", buf[:n], err)
	}
	after := netpoll.Counters(g).Total
	if fired != 1 {
		t.Fatalf("hook fired %d times, want 1", fired)
	}
	if parks := after.ReadParks - before.ReadParks; parks != 0 {
		t.Errorf("reader parked %d times; the early edge should have been consumed without parking", parks)
	}
	if tok := after.ReadyTokens - before.ReadyTokens; tok != 1 {
		t.Errorf("ready tokens consumed = %d, want 1", tok)
	}
}

// TestStaleGeneration closes a conn, puts a new socket on the same fd
// number, and shows that an event carrying the old generation does not
// wake the new conn's parked reader, while one with the new generation does.
func TestStaleGeneration(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	old, _ := pipe(t, g, listen(t, g, "tcp"))
	oldFD, oldGen := netpoll.FD(old), netpoll.Gen(old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	// A fresh connected socket, moved onto the old fd number.
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[1])
	if sp[0] != oldFD {
		if err := unix.Dup3(sp[0], oldFD, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(sp[0])
	}
	c, err := netpoll.AdoptFD(g, oldFD)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if netpoll.FD(c) != oldFD || netpoll.Gen(c) == oldGen {
		t.Fatalf("new conn fd %d gen %d; want fd %d with a generation other than %d", netpoll.FD(c), netpoll.Gen(c), oldFD, oldGen)
	}
	done, expired := watchdog(t, time.Minute)
	defer done()

	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	}()
	if !netpoll.AwaitReadState(c, "waiting", expired) {
		t.Fatal("reader never parked")
	}
	staleBefore := netpoll.Counters(g).Total.StaleEvents
	if woke := netpoll.InjectReadEvent(c, oldFD, oldGen); woke != 0 {
		t.Fatalf("stale event woke %d waiters", woke)
	}
	if got := netpoll.Counters(g).Total.StaleEvents - staleBefore; got != 1 {
		t.Errorf("stale events counted = %d, want 1", got)
	}
	if s := netpoll.ReadState(c); s != "waiting" {
		t.Fatalf("after a stale event the reader is %s, want still waiting", s)
	}
	// The same injection with the live generation does wake it: the reader
	// retries, finds nothing (EAGAIN) and parks again.
	if woke := netpoll.InjectReadEvent(c, oldFD, netpoll.Gen(c)); woke != 1 {
		t.Fatalf("live event woke %d waiters, want 1", woke)
	}
	if !netpoll.AwaitReadState(c, "waiting", expired) {
		t.Fatal("reader did not park again")
	}
	unix.Write(sp[1], []byte{1})
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
}

// TestDeadlineReleasesBlockedRead sets a read deadline from another
// goroutine while a Read is blocked with none; the Read fails with a
// timeout.
func TestDeadlineReleasesBlockedRead(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode))
			_, server := pipe(t, g, listen(t, g, "tcp"))
			done, expired := watchdog(t, time.Minute)
			defer done()
			errc := make(chan error, 1)
			go func() {
				_, err := server.Read(make([]byte, 1))
				errc <- err
			}()
			if !netpoll.AwaitReadState(server, "waiting", expired) {
				t.Fatal("Read never parked")
			}
			server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			select {
			case err := <-errc:
				checkTimeout(t, err)
			case <-expired:
				t.Fatal("Read still blocked after its deadline")
			}
			// A past deadline fails at once; zero clears it.
			server.SetReadDeadline(time.Now().Add(-time.Second))
			_, err := server.Read(make([]byte, 1))
			checkTimeout(t, err)
		})
	}
}

func checkTimeout(t *testing.T, err error) {
	t.Helper()
	ne, ok := err.(net.Error)
	if !ok || !ne.Timeout() {
		t.Fatalf("err = %v, want a net.Error with Timeout() true", err)
	}
	if _, ok := err.(*net.OpError); !ok {
		t.Errorf("err is %T, want *net.OpError", err)
	}
}

// TestCloseReleasesBlocked closes from another goroutine while a Read, a
// Write (parked on a full socket buffer) and an Accept are blocked; each
// returns an error wrapping net.ErrClosed.
func TestCloseReleasesBlocked(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode))
			l := listen(t, g, "tcp")
			reader, _ := pipe(t, g, l)
			writer, _ := pipe(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()

			readErr, writeErr, acceptErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
			go func() { _, err := reader.Read(make([]byte, 1)); readErr <- err }()
			go func() {
				// The peer never reads: this write parks once the buffers fill.
				_, err := writer.Write(bytes.Repeat([]byte{'x'}, 64<<20))
				writeErr <- err
			}()
			go func() { _, err := l.Accept(); acceptErr <- err }()
			for name, c := range map[string]any{"read": reader, "accept": l} {
				if !netpoll.AwaitReadState(c, "waiting", expired) {
					t.Fatalf("%s never parked", name)
				}
			}
			if !netpoll.AwaitWriteState(writer, "waiting", expired) {
				t.Fatal("write never parked")
			}
			reader.Close()
			writer.Close()
			l.Close()
			for name, ch := range map[string]chan error{"Read": readErr, "Write": writeErr, "Accept": acceptErr} {
				select {
				case err := <-ch:
					checkClosed(t, name, err)
				case <-expired:
					t.Fatalf("%s still blocked after Close", name)
				}
			}
			checkClosed(t, "second Close", reader.Close())
		})
	}
}

func checkClosed(t *testing.T, what string, err error) {
	t.Helper()
	if _, ok := err.(*net.OpError); !ok || !errorsIs(err, net.ErrClosed) {
		t.Errorf("%s: err = %v (%T), want a *net.OpError wrapping net.ErrClosed", what, err, err)
	}
}

// awaitParks yields until the group has counted want read parks in total.
func awaitParks(g *netpoll.Group, want uint64, stop <-chan struct{}) bool {
	return await(stop, func() bool { return netpoll.Counters(g).Total.ReadParks >= want })
}

// TestLevelTriggeredIdleReader: with mode=lt a conn with unread
// data and no reader reports readable on every epoll_wait. The poller must
// not spin on it: a thread poller (wait=block) disarms the reader and
// sleeps; a nested poller sleeps at once, because the runtime's
// edge-triggered registration of our epoll fd does not fire again for a
// level event still pending. Either way the data is still read, and a
// later park re-arms (one EPOLL_CTL_MOD per disarm) and is woken.
func TestLevelTriggeredIdleReader(t *testing.T) {
	for _, wait := range []string{"block", "nested"} {
		t.Run("wait="+wait, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode=lt,wait="+wait))
			client, server := stdPipe(t, listen(t, g, "tcp"))
			done, expired := watchdog(t, time.Minute)
			defer done()
			if _, err := client.Write([]byte("unread")); err != nil {
				t.Fatal(err)
			}
			// Nobody reads: the poller ends up asleep.
			wantDisarms := uint64(0)
			if wait == "block" {
				wantDisarms = 1
			}
			asleep := func() bool {
				s := netpoll.Counters(g).Total
				return s.LevelDisarms >= wantDisarms && s.BlockingWaits == s.Wakeups+1 && s.Events > 0
			}
			if !await(expired, asleep) {
				t.Fatalf("poller never went to sleep on the idle reader: %+v", netpoll.Counters(g).Total)
			}
			buf := make([]byte, 16)
			if n, err := server.Read(buf); err != nil || string(buf[:n]) != "unread" {
				t.Fatalf("Read = %q, %v", buf[:n], err)
			}
			before := netpoll.Counters(g).Total
			errc := make(chan error, 1)
			go func() {
				n, err := server.Read(buf)
				if err == nil && string(buf[:n]) != "later" {
					err = fmt.Errorf("read %q", buf[:n])
				}
				errc <- err
			}()
			if !awaitParks(g, before.ReadParks+1, expired) {
				t.Fatal("reader never parked")
			}
			if _, err := client.Write([]byte("later")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-expired:
				t.Fatal("reader never woke")
			}
			if mods := netpoll.Counters(g).Total.CtlMod - before.CtlMod; mods != before.LevelDisarms {
				t.Errorf("EPOLL_CTL_MOD calls to re-arm = %d after %d disarms, want one each", mods, before.LevelDisarms)
			}
		})
	}
}
