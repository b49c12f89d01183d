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
// change that adds a hop shows. wait=inline keeps these counts (its reader
// is its own poller: the park is also the poller's block, with an
// epoll_wait before it and one after) but takes one hop: TestInlineOneHop
// counts that.
func TestPlainPathHops(t *testing.T) {
	const rounds = 2000
	for _, tt := range []struct {
		name string
		cfg  netpoll.Config
	}{
		{"et/nested", cfgOf(t, "spin=off,hotread=off")}, // hot reads: TestHotReadHops
		{"oneshot/nested", cfgOf(t, "mode=oneshot,spin=off")},
		{"lt/nested", cfgOf(t, "mode=lt,spin=off")},
		{"et/block", cfgOf(t, "wait=block,spin=off")},
		{"et/inline", cfgOf(t, "wait=inline,spin=off")},
		{"lt/inline", cfgOf(t, "mode=lt,wait=inline,spin=off")},
		{"oneshot/inline", cfgOf(t, "mode=oneshot,wait=inline,spin=off")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := listen(t, g, "tcp")
			client, server := netClient(t, l)
			before := netpoll.Counters(g).Total
			pingPongParked(t, client, server, rounds)
			s := netpoll.Counters(g).Total
			per := func(a, b uint64) float64 { return float64(a-b) / rounds }
			parks, polls, waits := per(s.ReadParks, before.ReadParks), per(s.BlockingWaits, before.BlockingWaits), per(s.EpollWaits, before.EpollWaits)
			t.Logf("per request: %.2f reader parks, %.2f poller blocks (%.2f wakeups), %.2f epoll_waits, %.2f woken, %.2f EAGAIN, %.2f short-read skips",
				parks, polls, per(s.Wakeups, before.Wakeups), waits, per(s.Woken, before.Woken), per(s.EAGAIN, before.EAGAIN), per(s.ShortSkips, before.ShortSkips))
			// Each request waits for its byte (pingPongParked): the reader
			// parks once, woken once by the poller, which blocked once
			// for it. The poller blocks at most once per request (and
			// once more: after the last request, or when the count
			// began); a block whose wakeup found nobody to wake (an
			// EPOLLOUT edge after a reply: 0 to 3 in 2,000 requests on
			// a thread poller) is not a request's: EmptyWakeups counts
			// it. Most requests pay the block; under wait=inline the
			// holder may find its byte in the poll before it blocks, so
			// that lower bound is not asked of it.
			served := polls - per(s.EmptyWakeups, before.EmptyWakeups)
			if parks != 1 || served > 1+1.0/rounds {
				t.Errorf("per request: %.4f reader parks, %.4f poller blocks that woke someone; want 1 and at most 1", parks, served)
			}
			if !inExperiment(tt.cfg, "wait=inline") && served < 0.5 {
				t.Errorf("per request: %.4f poller blocks that woke someone; want most requests to pay one", served)
			}
			// The poller adds a poll's wakes to Woken after it sent
			// them: the last request's may come after the count ends.
			if woken := per(s.Woken, before.Woken); woken > parks || woken < parks-1.0/rounds {
				t.Errorf("%.4f woken per request for %.4f parks: every park is woken once by the poller", woken, parks)
			}
			// An epoll_wait before each block and one after it, but for
			// the block the count cut from its wakeup.
			if waits < polls-1.0/rounds || waits > 2*polls+0.1 {
				t.Errorf("%.4f epoll_waits per request for %.4f blocks; want one or two per block", waits, polls)
			}
		})
	}
}
