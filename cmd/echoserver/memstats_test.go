package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// TestAnswer: answer leaves plain bytes, bytes of another protocol, a
// short Memstats read and a Delay request (with no delay) as they are,
// and turns one whole Memstats request into its Stats answer.
func TestAnswer(t *testing.T) {
	s, err := loadproto.NewStream(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(m loadproto.Mark) []byte { b := make([]byte, 64); s.Put(b, 2, m); return b }
	for _, b := range [][]byte{msg(loadproto.Plain), msg(loadproto.Delay), msg(loadproto.Memstats)[:40], []byte("GET / HTTP/1.1\r\n"), {0xec}} {
		in := bytes.Clone(b)
		if out := answer(b, 0); !bytes.Equal(out, in) {
			t.Errorf("answer(% x) = % x, want it echoed", in, out)
		}
	}
	f, err := s.CheckStats(answer(msg(loadproto.Memstats), 0), 2)
	if err != nil || f.Goroutines == 0 || f.HeapLive == 0 {
		t.Errorf("answer to a Memstats request: %+v, %v", f, err)
	}
}

// exchange sends message seq marked m on c and reads the reply.
func exchange(t *testing.T, c net.Conn, s *loadproto.Stream, seq uint64, m loadproto.Mark) []byte {
	t.Helper()
	out, in := make([]byte, s.Size()), make([]byte, s.Size())
	s.Put(out, seq, m)
	c.SetDeadline(time.Now().Add(30 * time.Second)) // the watchdog
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestMemstatsRequest runs the server on package net (a goroutine per
// connection), on netpoll, and serving on demand, and asks it for its
// memstats before and after 20 more connections: each request is
// answered with figures, the second with at least 20 goroutines more on
// package net and netpoll and fewer than that on demand (no goroutine
// for an idle connection), and the connection goes on echoing.
func TestMemstatsRequest(t *testing.T) {
	const conns = 20
	for _, tt := range []struct {
		args     []string
		onDemand bool
	}{
		{[]string{"-impl", "net"}, false},
		{[]string{"-impl", "netpoll"}, false},
		{[]string{"-impl", "netpoll", "-ondemand"}, true},
	} {
		t.Run(tt.args[1]+map[bool]string{true: "-ondemand"}[tt.onDemand], func(t *testing.T) {
			addr := startServer(t, tt.args...)
			s, err := loadproto.NewStream(64, 1)
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			seq := uint64(0)
			ask := func() loadproto.Figures {
				t.Helper()
				seq++
				f, err := s.CheckStats(exchange(t, c, s, seq, loadproto.Memstats), seq)
				if err != nil {
					t.Fatalf("memstats answer: %v", err)
				}
				return f
			}
			before := ask()
			var cs []net.Conn
			defer func() {
				for _, c := range cs {
					c.Close()
				}
			}()
			for range conns {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				cs = append(cs, c)
				if err := s.Check(exchange(t, c, s, 0, loadproto.Plain), 0, loadproto.Plain); err != nil {
					t.Fatal(err)
				}
			}
			after := ask()
			t.Logf("memstats with 1 and %d connections: %+v, %+v", conns+1, before, after)
			if grew := after.Goroutines - before.Goroutines; (grew >= conns) == tt.onDemand {
				t.Errorf("goroutines %d -> %d with %d connections more", before.Goroutines, after.Goroutines, conns)
			}
			if after.HeapLive <= before.HeapLive {
				t.Errorf("heap live %d -> %d with %d connections more: want growth", before.HeapLive, after.HeapLive, conns)
			}
			seq++
			if err := s.Check(exchange(t, c, s, seq, loadproto.Plain), seq, loadproto.Plain); err != nil {
				t.Errorf("echo after the memstats requests: %v", err)
			}
		})
	}
}

// TestDelay: with -delay, a connection's Delay request is held and
// another connection's plain request sent after it is echoed first, on
// package net, netpoll and on demand; the held request is echoed whole
// once its delay has passed. Without -delay a Delay request is echoed at
// once: the plain one sent after it comes back after it.
func TestDelay(t *testing.T) {
	for _, tt := range []struct {
		args []string
		held bool
	}{
		{[]string{"-impl", "net", "-delay", "2s"}, true},
		{[]string{"-impl", "netpoll", "-delay", "2s"}, true},
		{[]string{"-impl", "netpoll", "-ondemand", "-delay", "2s"}, true},
		{[]string{"-impl", "net"}, false},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			addr := startServer(t, tt.args...)
			s, err := loadproto.NewStream(64, 1)
			if err != nil {
				t.Fatal(err)
			}
			var cs [2]net.Conn
			for i := range cs {
				if cs[i], err = net.Dial("tcp", addr); err != nil {
					t.Fatal(err)
				}
				defer cs[i].Close()
			}
			// The order the replies come in: 0 for the Delay request's, 1
			// for the plain one's.
			order := make(chan int, 2)
			errs := make(chan error, 2)
			for i, m := range []loadproto.Mark{loadproto.Delay, loadproto.Plain} {
				out := make([]byte, 64)
				s.Put(out, 1, m)
				cs[i].SetDeadline(time.Now().Add(30 * time.Second)) // the watchdog
				if _, err := cs[i].Write(out); err != nil {
					t.Fatal(err)
				}
				if !tt.held && i == 0 {
					// Without -delay the first is echoed before the second
					// is sent.
					in := make([]byte, 64)
					if _, err := io.ReadFull(cs[0], in); err != nil {
						t.Fatal(err)
					}
					errs <- s.Check(in, 1, m)
					order <- 0
					continue
				}
				go func() {
					in := make([]byte, 64)
					_, err := io.ReadFull(cs[i], in)
					errs <- errors.Join(err, s.Check(in, 1, m))
					order <- i
				}()
			}
			first, second := <-order, <-order
			for range 2 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tt.held]; first != want || second != 1-want {
				t.Errorf("replies in the order %d, %d; want %d first", first, second, want)
			}
		})
	}
}
