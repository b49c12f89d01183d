package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// impl is one way to get listeners and conns: package net, or a netpoll
// group with some configuration.
type impl struct {
	name   string // key=value path, e.g. impl=netpoll/mode=et/wait=nested
	listen func(ctx context.Context, network, addr string) (net.Listener, error)
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	stats  func() netpoll.Stats // nil for package net
	close  func()
}

func netImpl() impl {
	var d net.Dialer
	var lc net.ListenConfig
	return impl{name: "impl=net", listen: lc.Listen, dial: d.DialContext, close: func() {}}
}

func netpollImpl(b *testing.B, cfg netpoll.Config) impl {
	g, err := netpoll.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	spin := cfg.Spin.String()
	switch {
	case cfg.SpinPolicy == netpoll.SpinAuto || (cfg.SpinPolicy == netpoll.SpinDefault && cfg.Spin == 0):
		spin = "auto"
	case cfg.Spin < 0:
		spin = "forever"
	}
	pollers := max(cfg.Pollers, netpoll.DefaultPollers)
	return impl{
		name: fmt.Sprintf("impl=netpoll/mode=%s/pollers=%d/sharing=%s/spin=%s/wait=%s",
			cfg.Mode, pollers, cfg.Sharing, spin, cfg.Wait),
		listen: g.Listen, dial: g.Dial, stats: g.Stats,
		close: func() { g.Close() },
	}
}

// impls lists package net and netpoll in every mode with the default wait
// strategy and every wait strategy in EdgeTriggered mode, all without
// spinning, then spinning: fixed budgets and SpinAuto (the default).
func impls(b *testing.B) []func() impl {
	fs := []func() impl{netImpl}
	// The modes and wait strategies without spinning (spin=0s), so that
	// they compare with each other and with the recorded runs.
	for _, m := range []netpoll.Mode{netpoll.EdgeTriggered, netpoll.OneShot, netpoll.LevelTriggered} {
		fs = append(fs, func() impl { return netpollImpl(b, netpoll.Config{Mode: m, SpinPolicy: netpoll.SpinFixed}) })
	}
	for _, w := range []netpoll.Wait{netpoll.WaitBlock, netpoll.WaitInline} {
		fs = append(fs, func() impl { return netpollImpl(b, netpoll.Config{Wait: w, SpinPolicy: netpoll.SpinFixed}) })
	}
	for _, spin := range []time.Duration{50 * time.Microsecond, -1} {
		fs = append(fs, func() impl { return netpollImpl(b, netpoll.Config{Spin: spin}) })
	}
	fs = append(fs, func() impl { return netpollImpl(b, netpoll.Config{SpinPolicy: netpoll.SpinAuto}) })
	fs = append(fs, func() impl {
		return netpollImpl(b, netpoll.Config{Pollers: 2, Sharing: netpoll.Exclusive, Wait: netpoll.WaitBlock, SpinPolicy: netpoll.SpinFixed})
	})
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
	m := startMeter(im)
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
	stats netpoll.PollerStats
}

func startMeter(im impl) *meter {
	m := &meter{im: im}
	syscall.Getrusage(syscall.RUSAGE_SELF, &m.ru)
	if im.stats != nil {
		m.stats = im.stats().Total
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
		s := m.im.stats().Total
		b.ReportMetric(float64(s.CtlAdd+s.CtlMod+s.CtlDel-m.stats.CtlAdd-m.stats.CtlMod-m.stats.CtlDel)/n, "epoll_ctl/op")
		b.ReportMetric(float64(s.EpollWaits-m.stats.EpollWaits)/n, "epoll_wait/op")
		b.ReportMetric(float64(s.ReadParks+s.WriteParks-m.stats.ReadParks-m.stats.WriteParks)/n, "parks/op")
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
