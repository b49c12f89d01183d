package netpoll_test

import (
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestPlainPathHops counts what one request costs the server on the plain
// path (no spinning) of each registration mode and wait: a client on
// package net sends a byte, the server's Conn reads it and writes it back.
// Package net's own read makes one goroutine park and resume per request
// (the reader, readied by the runtime's netpoller) and no epoll_wait of its
// own. On netpoll the reader parks too (ReadParks), and the poller in
// between is a second park and resume (BlockingWaits: the nested poller
// parks in the runtime's netpoller, the thread poller blocks in
// epoll_wait) with the epoll_wait that finds the event: two hops and an
// epoll_wait where net has one hop. The test asserts that count, so that a
// change that adds a hop shows. WaitInline keeps these counts (its reader
// is its own poller: the park is also the poller's block, with an
// epoll_wait before it and one after) but takes one hop: TestInlineOneHop
// counts that.
func TestPlainPathHops(t *testing.T) {
	const rounds = 2000
	for _, tt := range []struct {
		name string
		cfg  netpoll.Config
	}{
		{"et/nested", netpoll.Config{SpinPolicy: netpoll.SpinFixed}},
		{"oneshot/nested", netpoll.Config{Mode: netpoll.OneShot, SpinPolicy: netpoll.SpinFixed}},
		{"lt/nested", netpoll.Config{Mode: netpoll.LevelTriggered, SpinPolicy: netpoll.SpinFixed}},
		{"et/block", netpoll.Config{Wait: netpoll.WaitBlock, SpinPolicy: netpoll.SpinFixed}},
		{"et/inline", netpoll.Config{Wait: netpoll.WaitInline, SpinPolicy: netpoll.SpinFixed}},
		{"lt/inline", netpoll.Config{Mode: netpoll.LevelTriggered, Wait: netpoll.WaitInline, SpinPolicy: netpoll.SpinFixed}},
		{"oneshot/inline", netpoll.Config{Mode: netpoll.OneShot, Wait: netpoll.WaitInline, SpinPolicy: netpoll.SpinFixed}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := listen(t, g, "tcp")
			client, server := netClient(t, l)
			before := g.Stats().Total
			pingPongConn(t, client, server, rounds)
			s := g.Stats().Total
			per := func(a, b uint64) float64 { return float64(a-b) / rounds }
			parks, polls, waits := per(s.ReadParks, before.ReadParks), per(s.BlockingWaits, before.BlockingWaits), per(s.EpollWaits, before.EpollWaits)
			t.Logf("per request: %.2f reader parks, %.2f poller blocks (%.2f wakeups), %.2f epoll_waits, %.2f woken, %.2f EAGAIN, %.2f short-read skips",
				parks, polls, per(s.Wakeups, before.Wakeups), waits, per(s.Woken, before.Woken), per(s.EAGAIN, before.EAGAIN), per(s.ShortSkips, before.ShortSkips))
			// Each request waits for its byte: the reader parks once,
			// woken once by the poller, which blocked once for it. A
			// request whose byte came while the reader was still running
			// does neither, so the counts are at most one each (and one
			// more: the poller blocks again after the last request, and
			// was blocked when the count began), and most requests pay
			// both.
			most := 1 + 1.0/rounds
			if parks > most || polls > most || parks < 0.5 || polls < 0.5 {
				t.Errorf("per request: %.4f reader parks, %.4f poller blocks; want each in [0.5, %.4f]", parks, polls, most)
			}
			if woken := per(s.Woken, before.Woken); woken < parks-0.01 || woken > parks+0.01 {
				t.Errorf("%.2f woken per request for %.2f parks: every park is woken once by the poller", woken, parks)
			}
			if waits < polls || waits > 2*polls+0.1 {
				t.Errorf("%.2f epoll_waits per request for %.2f blocks; want one or two per block", waits, polls)
			}
		})
	}
}
