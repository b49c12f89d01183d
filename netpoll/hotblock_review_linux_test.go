package netpoll_test

import (
	"net"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Review of commit 8134538 (a hot connection under wait=block watches
// nothing and never skips). Each test runs its script under the nested
// wait too; each failed under wait=block at that commit, and passes since
// eb99c5d.

// TestHotBlockReviewPollSkips: a hot connection that does not read ahead
// (readahead=off; a unix socket, whose reads carry control messages a
// read(2) would drop) asks the socket with a poll(2) before each call of
// its handler, and that poll stores the conditions that end a read early
// (hotWait.serve: d.stick of what pollFD reported). Such a connection's
// skip after its handler's short Read never depended on the sticky watch
// (stickyWatch is 0 for it under every wait), and it skips under
// the nested wait: as many skips as hot calls. At 8134538 hotSkips turned
// the skip off under wait=block for it too, though nothing it relied on
// changed there: each of its requests paid a poll(2) more (a poll before
// the call, and one in the wait that skipped before). It must skip under
// wait=block as under the nested wait.
func TestHotBlockReviewPollSkips(t *testing.T) {
	for _, wait := range []string{"nested", "block"} {
		for _, c := range []struct{ name, network, cfg string }{
			{"readahead-off", "tcp", "readahead=off"},
			{"unix", "unix", "readahead=on"},
		} {
			t.Run(wait+"/"+c.name, func(t *testing.T) {
				hotBlockPollSkips(t, "dispatch=hot,spin=off,wait="+wait+","+c.cfg, c.network)
			})
		}
	}
}

func hotBlockPollSkips(t *testing.T, cfg, network string) {
	t.Cleanup(netpoll.SetHotTick(time.Hour)) // the test sweeps (goCold)
	g := newGroup(t, cfgOf(t, cfg))
	l := listen(t, g, network)
	s := &netpoll.Server{Handler: echoHandler}
	serveOn(t, s, l)
	c, err := net.Dial(network, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done, stop := watchdog(t, time.Minute)
	defer done()
	heatAhead(t, s, c, stop)
	const n = 100
	echoN(t, c, "poll", n)
	goCold(t, s, stop)
	calls, aheads, skips := aheadSkips(t, s)
	t.Logf("%s: hot calls %d, reads ahead %d, skips %d", cfg, calls, aheads, skips)
	if calls < n || aheads != 0 {
		t.Fatalf("hot calls %d, reads ahead %d: want at least %d calls and no read ahead (the test shows nothing)", calls, aheads, n)
	}
	if skips < n {
		t.Errorf("%s: hot calls %d, skips %d: want a skip after each call's short Read (at least %d), as under the nested wait: the poll before each call stores what the watch would", cfg, calls, skips, n)
	}
}
