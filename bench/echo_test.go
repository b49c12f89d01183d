package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/servecmd"
	"github.com/edgepoll/edgepoll/netpoll"
)

// impl is one way to get listeners and conns: package net, or a netpoll
// group with some configuration.
type impl struct {
	name   string // key=value path, e.g. impl=netpoll/mode=et/wait=nested
	listen func(ctx context.Context, network, addr string) (net.Listener, error)
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	stats  func([]netpoll.Sample) error // the group's ReadStats; nil for package net
	close  func()
}

func netImpl() impl {
	var d net.Dialer
	var lc net.ListenConfig
	return impl{name: "impl=net", listen: lc.Listen, dial: d.DialContext, close: func() {}}
}

// netpollImpl is a group configured by s in the NETPOLL syntax, named
// after its settings: s spells out mode, pollers, sharing, spin and wait,
// so that the names match the recorded runs'.
func netpollImpl(b *testing.B, s string) impl {
	cfg, err := netpoll.ParseConfig(s)
	if err != nil {
		b.Fatal(err)
	}
	g, err := netpoll.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return impl{
		name: "impl=netpoll/" + strings.ReplaceAll(s, ",", "/"),
		listen: func(ctx context.Context, network, addr string) (net.Listener, error) {
			return g.Listen(ctx, network, addr)
		},
		dial:  func(ctx context.Context, network, addr string) (net.Conn, error) { return g.Dial(ctx, network, addr) },
		stats: g.ReadStats,
		close: func() { g.Close() },
	}
}

// impls lists package net and netpoll in every mode with the default wait
// strategy and every wait strategy in edge-triggered mode, all without
// spinning, then spinning: fixed budgets and the adaptive default.
func impls(b *testing.B) []func() impl {
	fs := []func() impl{netImpl}
	// The modes and wait strategies without spinning (spin=0s), so that
	// they compare with each other and with the recorded runs.
	for _, m := range []string{"et", "oneshot", "lt"} {
		fs = append(fs, func() impl { return netpollImpl(b, "mode="+m+",pollers=1,sharing=single,spin=0s,wait=default") })
	}
	for _, w := range []string{"block", "inline"} {
		fs = append(fs, func() impl { return netpollImpl(b, "mode=et,pollers=1,sharing=single,spin=0s,wait="+w) })
	}
	for _, spin := range []string{"50µs", "forever", "auto"} {
		fs = append(fs, func() impl { return netpollImpl(b, "mode=et,pollers=1,sharing=single,spin="+spin+",wait=default") })
	}
	fs = append(fs, func() impl { return netpollImpl(b, "mode=et,pollers=2,sharing=exclusive,spin=0s,wait=block") })
	return fs
}

// BenchmarkEcho measures echo round trips: conns client connections, each
// sending size bytes and reading them back, one request in flight each.
// Client and server run in this process on the same implementation.
func BenchmarkEcho(b *testing.B) {
	roundTrips(b, []int{1, 50, 1000}, []int{64, 4096})
}

// BenchmarkRPC is the tiny-read case: a 1-byte request and a 1-byte
// response, so every read parks and the poller's cost is the whole cost.
func BenchmarkRPC(b *testing.B) {
	roundTrips(b, []int{1, 50}, []int{1})
}

func roundTrips(b *testing.B, connCounts, sizes []int) {
	for _, mk := range impls(b) {
		im := mk()
		for _, conns := range connCounts {
			for _, size := range sizes {
				b.Run(fmt.Sprintf("%s/conns=%d/size=%d", im.name, conns, size), func(b *testing.B) {
					echo(b, im, conns, size)
				})
			}
		}
		im.close()
	}
}

func echo(b *testing.B, im impl, conns, size int) {
	l, err := im.listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go serveEcho(l)

	cs := make([]net.Conn, conns)
	for i := range cs {
		if cs[i], err = im.dial(context.Background(), "tcp", l.Addr().String()); err != nil {
			b.Fatal(err)
		}
		defer cs[i].Close()
	}
	// One warm-up round trip per conn, so accepts and first reads are not timed.
	for _, c := range cs {
		if err := roundTrip(c, make([]byte, size), make([]byte, size)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * size))
	b.ReportAllocs()
	m := startMeter(b, im)
	lat, err := parallel(b, conns, func(i int) func() error {
		c, out, in := cs[i], make([]byte, size), make([]byte, size)
		return func() error { return roundTrip(c, out, in) }
	})
	m.report(b)
	reportLatency(b, lat)
	if err != nil {
		b.Fatal(err)
	}
}

// parallel runs b.N operations spread over conns goroutines, op(i) giving
// goroutine i's operation, times each, and returns the latencies and the
// first error. It resets the timer before and stops it after.
func parallel(b *testing.B, conns int, op func(i int) func() error) ([]time.Duration, error) {
	lat := make([][]time.Duration, conns) // per goroutine, so no lock is timed
	ops := make([]func() error, conns)
	for i := range conns {
		lat[i] = make([]time.Duration, 0, b.N/conns+1)
		ops[i] = op(i)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	errc := make(chan error, conns)
	for i := range conns {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				t0 := time.Now()
				if err := ops[i](); err != nil {
					errc <- err
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errc)
	return slices.Concat(lat...), <-errc
}

func roundTrip(c net.Conn, out, in []byte) error {
	if _, err := c.Write(out); err != nil {
		return err
	}
	_, err := io.ReadFull(c, in)
	return err
}

// serveEcho echoes every accepted conn on its own goroutine until l closes.
func serveEcho(l net.Listener) {
	serveEach(l, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
}

// serveEach runs handle on its own goroutine for every accepted conn, and
// closes the conn when handle returns, until l closes.
func serveEach(l net.Listener, handle func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// meter measures the process's CPU time and context switches (getrusage)
// and, for netpoll, its epoll counters over the timed part of a benchmark.
type meter struct {
	im    impl
	ru    syscall.Rusage
	stats map[string]uint64
}

// readAll reads every group statistic through read (a group's ReadStats
// or ReadPollerStats) by name.
func readAll(b *testing.B, read func([]netpoll.Sample) error) map[string]uint64 {
	m, err := servecmd.ReadStats(false, read)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// pollersOf returns g's poller count.
func pollersOf(b *testing.B, g *netpoll.Group) int {
	return int(readAll(b, g.ReadStats)["/netpoll/pollers:pollers"])
}

func startMeter(b *testing.B, im impl) *meter {
	m := &meter{im: im}
	syscall.Getrusage(syscall.RUSAGE_SELF, &m.ru)
	if im.stats != nil {
		m.stats = readAll(b, im.stats)
	}
	return m
}

func (m *meter) report(b *testing.B) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	n := float64(b.N)
	cpu := tvDur(ru.Utime) + tvDur(ru.Stime) - tvDur(m.ru.Utime) - tvDur(m.ru.Stime)
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/op")
	b.ReportMetric(float64(ru.Nvcsw+ru.Nivcsw-m.ru.Nvcsw-m.ru.Nivcsw)/n, "ctxsw/op")
	if m.im.stats != nil {
		s := readAll(b, m.im.stats)
		d := func(names ...string) float64 {
			var sum float64
			for _, name := range names {
				sum += float64(s[name]) - float64(m.stats[name])
			}
			return sum / n
		}
		b.ReportMetric(d("/netpoll/epoll/ctl-add:calls", "/netpoll/epoll/ctl-mod:calls", "/netpoll/epoll/ctl-del:calls"), "epoll_ctl/op")
		b.ReportMetric(d("/netpoll/epoll/waits:calls"), "epoll_wait/op")
		b.ReportMetric(d("/netpoll/parks/read:operations", "/netpoll/parks/write:operations"), "parks/op")
		// The watch port's arms and disarms (wait=inline, and a Server's
		// handlers run inline), and the role taken by its watcher.
		b.ReportMetric(d("/netpoll/watch/arms:calls", "/netpoll/watch/disarms:calls"), "watch-ctl/op")
		b.ReportMetric(d("/netpoll/inline/takeovers:calls"), "takeovers/op")
	}
}

// reportLatency reports the p50 and p99 of the round trips.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
}

func tvDur(tv syscall.Timeval) time.Duration {
	return time.Duration(tv.Sec)*time.Second + time.Duration(tv.Usec)*time.Microsecond
}
