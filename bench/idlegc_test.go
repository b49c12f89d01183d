package bench

import (
	"context"
	"io"
	"net"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// BenchmarkIdleGC asks what idle connections cost the garbage collector
// while others work: 18,000 idle connections (NETPOLL_IDLE_CONNS sets
// another count) held open on a server, and 50 connections doing 64-byte
// echoes through it, the handler allocating 1 KiB of garbage per request
// as a real one would. The idle clients are bare sockets in a child
// process (this test binary again, holdIdleClients), so that the server's
// process holds one fd per connection under the 20,000-fd limit and the
// clients' CPU is not in its figures. Served goroutine-per-connection
// (each idle connection parks a goroutine with a 4 KiB buffer, as
// net/http's conn does) or on demand (netpoll.Server: no goroutine, no
// buffer). It reports the GC's CPU (runtime/metrics
// /cpu/classes/gc/total) per request, its share of the process's CPU
// (getrusage; the 50 active clients run in this process too) and the GC
// cycles per 1,000 requests. Run it alone:
//
//	go test -run '^$' -bench IdleGC -benchtime 400000x -count 6 ./bench
func BenchmarkIdleGC(b *testing.B) {
	idle, err := idleConnCount(idleConns)
	if err != nil {
		b.Fatal(err)
	}
	for _, serve := range []string{"goroutine", "ondemand"} {
		b.Run("serve="+serve+"/idle="+strconv.Itoa(idle), func(b *testing.B) {
			idleGC(b, serve, idle)
		})
	}
}

// gcSink keeps the handlers' garbage reachable until the next request.
var gcSink struct {
	sync.Mutex
	b []byte
}

func garbage() {
	g := make([]byte, 1024)
	gcSink.Lock()
	gcSink.b = g
	gcSink.Unlock()
}

func idleGC(b *testing.B, serve string, idle int) {
	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	switch serve {
	case "goroutine":
		go serveEach(l, func(c net.Conn) {
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				garbage()
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		})
	case "ondemand":
		bufs := sync.Pool{New: func() any { return new([4096]byte) }}
		s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
			buf := bufs.Get().(*[4096]byte)
			defer bufs.Put(buf)
			n, err := c.Read(buf[:])
			if err != nil {
				return err
			}
			garbage()
			_, err = c.Write(buf[:n])
			return err
		})}
		go s.Serve(l)
		defer s.Close()
	}
	stopClients := idleClients(b, l.Addr().(*net.TCPAddr).Port, idle)
	defer stopClients()
	const active = 50
	clients := make([]net.Conn, active)
	for i := range clients {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	runtime.GC()
	before, ru0 := gcMetrics(), rusage()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, c := range clients {
		n := b.N / active
		if i < b.N%active {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, in := make([]byte, 64), make([]byte, 64)
			for range n {
				if _, err := c.Write(msg); err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadFull(c, in); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	after, ru1 := gcMetrics(), rusage()
	gcCPU := after.gcCPU - before.gcCPU
	cpu := ru1 - ru0
	b.ReportMetric(gcCPU*1e9/float64(b.N), "gc-ns/op")
	b.ReportMetric(100*gcCPU/cpu.Seconds(), "gc-cpu-%")
	b.ReportMetric(float64(after.cycles-before.cycles)*1000/float64(b.N), "gc-cycles/1k-op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

type gcFigures struct {
	gcCPU  float64 // seconds
	cycles uint64
}

func gcMetrics() gcFigures {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return gcFigures{s[0].Value.Float64(), s[1].Value.Uint64()}
}

// rusage is the process's CPU time, user and system.
func rusage() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
