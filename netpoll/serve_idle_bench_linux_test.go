package netpoll_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// BenchmarkServeIdle measures what an idle connection served on demand
// holds in this process's heap: live bytes and objects per connection,
// and the bytes allocated in all per connection (live and garbage),
// after runtime.GC, with every connection accepted, echoed once and idle.
// The clients are bare sockets (no Go objects), so the figures are the
// server's alone. Run it once per size:
//
//	cd netpoll && go test -run '^$' -bench ServeIdle -benchtime 1x .
func BenchmarkServeIdle(b *testing.B) { benchServeIdle(b, 0) }

// BenchmarkServeIdleTimeout is BenchmarkServeIdle with an IdleTimeout
// (an hour, so none fires): what the idle timer adds to a connection.
func BenchmarkServeIdleTimeout(b *testing.B) { benchServeIdle(b, time.Hour) }

func benchServeIdle(b *testing.B, idleTimeout time.Duration) {
	const conns = 2000
	for range b.N {
		g, err := netpoll.New(netpoll.Config{})
		if err != nil {
			b.Fatal(err)
		}
		s := &netpoll.Server{Handler: echoHandler, IdleTimeout: idleTimeout}
		l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go s.Serve(l)
		sa := &unix.SockaddrInet4{Port: l.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}
		before := liveHeap()
		fds := make([]int, 0, conns)
		for range conns {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			fds = append(fds, fd)
			if err := unix.Connect(fd, sa); err != nil {
				b.Fatal(err)
			}
			if _, err := unix.Write(fd, []byte("ping")); err != nil {
				b.Fatal(err)
			}
			var buf [4]byte
			if n, err := unix.Read(fd, buf[:]); n != 4 || err != nil {
				b.Fatalf("echo: %d, %v", n, err)
			}
		}
		for s.Stats().Idle != conns {
			runtime.Gosched()
		}
		after := liveHeap()
		b.ReportMetric(float64(after.bytes-before.bytes)/conns, "live-B/conn")
		b.ReportMetric(float64(after.objects-before.objects)/conns, "objects/conn")
		b.ReportMetric(float64(after.allocated-before.allocated)/conns, "alloc-B/conn")
		s.Close()
		g.Close()
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// heapFigures: live bytes and objects, and bytes allocated in all (the
// garbage a connection's setup makes is allocated minus live).
type heapFigures struct{ bytes, objects, allocated uint64 }

// liveHeap collects garbage and reads the live heap.
func liveHeap() heapFigures {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/objects:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return heapFigures{s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()}
}

// TestParkAllocatesNothing: a goroutine-per-connection round trip, both
// ends parking in Read each time (with and without a read deadline),
// allocates nothing in steady state, in every mode: a direction keeps its
// token channel (and its deadline timer) from one park to the next, and
// gives the channel back only when a Server hands the connection off; the
// re-arm a mode=oneshot park makes passes its epoll event on the stack.
func TestParkAllocatesNothing(t *testing.T) {
	for _, tt := range []struct {
		mode     string
		deadline bool
	}{{"et", false}, {"et", true}, {"oneshot", false}, {"lt", false}} {
		deadline := tt.deadline
		t.Run(fmt.Sprintf("mode=%v/deadline=%v", tt.mode, deadline), func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+tt.mode+",spin=off")) // no spinning: every Read parks
			l := listen(t, g, "tcp")
			client, server := pipe(t, g, l)
			go func() {
				var b [1]byte
				for {
					if deadline {
						server.SetReadDeadline(time.Now().Add(time.Hour))
					}
					if _, err := server.Read(b[:]); err != nil {
						return
					}
					if _, err := server.Write(b[:]); err != nil {
						return
					}
				}
			}()
			var b [1]byte
			roundTrip := func() {
				if deadline {
					client.SetReadDeadline(time.Now().Add(time.Hour))
				}
				if _, err := client.Write(b[:]); err != nil {
					t.Fatal(err)
				}
				if _, err := client.Read(b[:]); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 {
				roundTrip() // make the channels and timers
			}
			parks := netpoll.Counters(g).Total.ReadParks
			if n := testing.AllocsPerRun(1000, roundTrip); n != 0 {
				t.Errorf("%v allocations per round trip, want 0", n)
			}
			if netpoll.Counters(g).Total.ReadParks-parks < 1000 {
				t.Errorf("%d parks in 1001 round trips: the reads did not park", netpoll.Counters(g).Total.ReadParks-parks)
			}
		})
	}
}
