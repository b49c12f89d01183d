package bench

import (
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// BenchmarkBlockedNeighbour measures what a connection waits for while
// another connection's handler blocks outside the server's poller (a
// backend call, here a sleep of -block). One op is a round trip of the
// fast connection; the slow one sends a request as soon as its previous
// reply came, and its handler sleeps before replying. WaitInline leaves
// the operations parked on their channels unwatched while the holder that
// left with its event runs its handler, until the next operation parks or
// its takeover timer fires (500 µs to 4 ms): the fast connection's tail
// shows it. Package net and WaitNested watch all the time.
func BenchmarkBlockedNeighbour(b *testing.B) {
	for _, f := range []func() impl{
		netImpl,
		func() impl { return netpollImpl(b, "mode=et,pollers=1,sharing=single,spin=0s,wait=default") },
		func() impl {
			return netpollImpl(b, "mode=et,pollers=1,sharing=single,spin=0s,wait=inline")
		},
		func() impl { return netpollImpl(b, "mode=et,pollers=1,sharing=single,spin=auto,wait=default") },
		func() impl { return netpollImpl(b, "mode=et,pollers=1,sharing=single,spin=auto,wait=inline") },
	} {
		im := f()
		b.Run(im.name+"/block=2ms", func(b *testing.B) {
			blockedNeighbour(b, im, 2*time.Millisecond, serveBlocking)
		})
		im.close()
	}
	// netpoll.Server, whose handlers run inline on the goroutine that
	// polled (the default) or on a goroutine each (dispatch=go): the
	// watchdog that passes the poller's role on is what this measures.
	for _, s := range []string{
		"mode=et,pollers=1,sharing=single,spin=0s,wait=default",
		"mode=et,pollers=1,sharing=single,spin=auto,wait=default",
		"mode=et,pollers=1,sharing=single,spin=auto,wait=default,dispatch=go",
	} {
		im := netpollImpl(b, s)
		b.Run(im.name+"/server=on/block=2ms", func(b *testing.B) {
			blockedNeighbour(b, im, 2*time.Millisecond, serveOnDemand)
		})
		im.close()
	}
}

func blockedNeighbour(b *testing.B, im impl, block time.Duration, serve func(net.Listener, time.Duration)) {
	l, err := im.listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go serve(l, block)
	var d net.Dialer // the clients are package net's, off the server's pollers
	slow, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer slow.Close()
	fast, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer fast.Close()

	// One warm-up round trip each, so accepts and first reads are not timed.
	for _, c := range []net.Conn{slow, fast} {
		if err := roundTrip(c, []byte{'F'}, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
	}
	slowDone := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		out, in := []byte{'S'}, make([]byte, 1)
		for {
			select {
			case <-stop:
				slowDone <- nil
				return
			default:
			}
			if err := roundTrip(slow, out, in); err != nil {
				slowDone <- err
				return
			}
		}
	}()
	m := startMeter(b, im)
	lat, err := parallel(b, 1, func(int) func() error {
		out, in := []byte{'F'}, make([]byte, 1)
		return func() error { return roundTrip(fast, out, in) }
	})
	close(stop)
	if err != nil {
		b.Fatal(err)
	}
	if err := <-slowDone; err != nil {
		b.Fatal(err)
	}
	m.report(b)
	reportLatency(b, lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(slices.Max(lat).Nanoseconds()), "max-ns")
	}
}

// serveBlocking serves each accepted conn on its own goroutine: it reads a
// byte and writes it back, after sleeping block when the byte is 'S'.
func serveBlocking(l net.Listener, block time.Duration) {
	serveEach(l, func(c net.Conn) {
		buf := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if buf[0] == 'S' {
				// The behaviour under test: a handler blocked outside
				// the server's poller (a backend call), not a wait for
				// another goroutine.
				time.Sleep(block)
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
}

// serveOnDemand is serveBlocking on a netpoll.Server: each call reads a
// byte and writes it back, after sleeping block when the byte is 'S'.
func serveOnDemand(l net.Listener, block time.Duration) {
	s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var buf [1]byte
		if _, err := c.Read(buf[:]); err != nil {
			return err
		}
		if buf[0] == 'S' {
			time.Sleep(block) // the behaviour under test: a backend call, as in serveBlocking
		}
		_, err := c.Write(buf[:])
		return err
	})}
	s.Serve(l) // returns when the benchmark closes l
	s.Close()
}
