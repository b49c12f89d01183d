package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// BenchmarkAcceptStream measures the thundering herd on a listener shared
// by several pollers: one op is one connection dialed (package net) and
// accepted through the group. For each Wait × Sharing, with the default
// spinning (spin=auto) and without (spin=0), it reports per accept the
// process's context switches and CPU time (getrusage), and the group's
// counters: epoll_wait calls and those that returned nothing, poller
// wakeups, parked operations woken, accept4 calls that found nothing
// (EAGAIN: another acceptor took the connection), and spin polls; and the
// spread of accepts over pollers (min and max/min). In the nested wait the
// herd shows in the counters, not in context switches (netpoll/DESIGN.md, "Pollers
// and sharing").
//
// The comparisons between sharing modes are this benchmark's, not a
// test's: they move with the machine's load (netpoll's
// TestSharingAcceptStream checks what holds on any machine). What netpoll
// claims, read with benchstat -col /sharing on wait=block/pollers=8:
// Exclusive's wakeups/op under half WakeAll's, which wakes every poller
// thread for each connection; and ReusePort's max/min-accepts within 2
// (Exclusive's balancing keeps every poller within two accepts of the
// mean, which the test checks).
func BenchmarkAcceptStream(b *testing.B) {
	for _, spin := range []string{"auto", "0"} {
		for _, wait := range []string{"block", "nested"} {
			for _, pollers := range []int{8, 32} {
				for _, sh := range []string{"single", "exclusive", "wakeall", "reuseport"} {
					if sh == "exclusive" && wait == "nested" {
						continue // New refuses it: see netpoll's doc, "Pollers and sharing"
					}
					cfg, err := netpoll.ParseConfig(fmt.Sprintf("spin=%s,wait=%s,pollers=%d,sharing=%s", spin, wait, pollers, sh))
					if err != nil {
						b.Fatal(err)
					}
					b.Run(fmt.Sprintf("spin=%s/wait=%s/pollers=%d/sharing=%s", spin, wait, pollers, sh), func(b *testing.B) {
						acceptStream(b, cfg)
					})
				}
			}
		}
	}
}

func acceptStream(b *testing.B, cfg netpoll.Config) {
	g, err := netpoll.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	pollers := func() []map[string]uint64 {
		var ps []map[string]uint64
		for i := range pollersOf(b, g) {
			ps = append(ps, readAll(b, func(s []netpoll.Sample) error { return g.ReadPollerStats(i, s) }))
		}
		return ps
	}
	s0, p0 := readAll(b, g.ReadStats), pollers()
	ctxsw, cpu := stream(b, l)
	s1, p1 := readAll(b, g.ReadStats), pollers()
	n := float64(b.N)
	per := func(name string) float64 { return float64(s1[name]-s0[name]) / n }
	b.ReportMetric(ctxsw/n, "ctxsw/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/op")
	b.ReportMetric(per("/netpoll/epoll/waits:calls"), "epoll_wait/op")
	b.ReportMetric(per("/netpoll/epoll/empty-waits:calls"), "empty-polls/op")
	b.ReportMetric(per("/netpoll/poller/wakeups:calls"), "wakeups/op")
	b.ReportMetric(per("/netpoll/poller/empty-wakeups:calls"), "empty-wakeups/op")
	b.ReportMetric(per("/netpoll/poller/woken:operations"), "woken/op")
	b.ReportMetric(per("/netpoll/accept/eagain:calls"), "accept-eagain/op")
	b.ReportMetric(per("/netpoll/spin/polls:calls"), "spin-polls/op")
	var acc []uint64
	var sum uint64
	for i := range p1 {
		acc = append(acc, p1[i]["/netpoll/accepts:conns"]-p0[i]["/netpoll/accepts:conns"])
		sum += acc[i]
	}
	if sum != uint64(b.N) {
		b.Fatalf("pollers counted %d accepts (%v) for %d connections", sum, acc, b.N)
	}
	lo, hi := slices.Min(acc), slices.Max(acc)
	b.ReportMetric(float64(lo), "min-accepts")
	if lo > 0 {
		b.ReportMetric(float64(hi)/float64(lo), "max/min-accepts")
	}
}

// BenchmarkNetAccept is the accept stream on package net: what the runtime
// patch's netpollshards changes (a listener in every shard). Run it on the
// patched toolchain with and without GODEBUG=netpollshards=N.
func BenchmarkNetAccept(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctxsw, cpu := stream(b, l)
	b.ReportMetric(ctxsw/float64(b.N), "ctxsw/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// stream dials b.N connections to l one after another (package net) while
// a goroutine accepts and closes them, and returns the process's context
// switches and CPU time over the stream (getrusage).
func stream(b *testing.B, l net.Listener) (ctxsw float64, cpu time.Duration) {
	accepted := make(chan error, 1)
	go func() {
		for range b.N {
			c, err := l.Accept()
			if err != nil {
				accepted <- err
				return
			}
			c.Close()
		}
		accepted <- nil
	}()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	if err := <-accepted; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu = tvDur(ru1.Utime) + tvDur(ru1.Stime) - tvDur(ru0.Utime) - tvDur(ru0.Stime)
	return float64(ru1.Nvcsw + ru1.Nivcsw - ru0.Nvcsw - ru0.Nivcsw), cpu
}
