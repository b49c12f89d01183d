package netpoll_test

import (
	"net"
	"os"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestInlineOneHop counts what one request costs on wait=inline, with an
// Accept parked on the same poller the whole time, as in a server: the
// reader parks once per request and waits on the epoll fd itself (the
// runtime readies it: one hop), not on its channel behind the poller's
// goroutine. The only parks that do not wait inline come after the role
// went to the poller's goroutine (Takeovers: the next request came before
// the reader parked again, firing the watch port), and nobody steps aside, since the holder's
// polls find only its own events. On wait=nested every park waits on its
// channel (InlineWaits 0): this test fails there. Every request parks
// (pingPongParked).
func TestInlineOneHop(t *testing.T) {
	const rounds = 2000
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",wait=inline"))
			l := listen(t, g, "tcp")
			client, server := netClient(t, l) // a peer off the poller: its parks are not counted
			accepted := make(chan error, 1)
			awaitInlinePark(t, "the Accept", func() {
				go func() {
					_, err := l.Accept() // parked until the listener closes
					accepted <- err
				}()
			})
			before := netpoll.Counters(g).Total
			pingPongParked(t, client, server, rounds)
			s := netpoll.Counters(g).Total
			parks, inline := s.ReadParks-before.ReadParks, s.InlineWaits-before.InlineWaits
			asides, takeovers := s.StepAsides-before.StepAsides, s.Takeovers-before.Takeovers
			t.Logf("%d requests: %d reader parks, %d waited inline, %d stepped aside, %d takeovers, %d epoll_waits",
				rounds, parks, inline, asides, takeovers, s.EpollWaits-before.EpollWaits)
			if parks != rounds {
				t.Errorf("%d parks for %d requests; want one each", parks, rounds)
			}
			// A takeover makes at most the next park wait on its channel
			// and the one after it step aside.
			if inline+2*takeovers+1 < parks {
				t.Errorf("%d of %d parks waited inline with %d takeovers; want every park but those after a takeover", inline, parks, takeovers)
			}
			if asides > 2*takeovers+1 {
				t.Errorf("%d parks stepped aside with %d takeovers; the holder's polls found only its own events", asides, takeovers)
			}
			if takeovers > rounds/4 {
				t.Errorf("%d takeovers in %d requests: the reader parks again within microseconds", takeovers, rounds)
			}
			l.Close()
			if err := <-accepted; err == nil {
				t.Error("the parked Accept returned no error when the listener closed")
			}
		})
	}
}

// TestInlineTakeover: a holder that leaves with its own event and then
// does not park again (its handler blocks elsewhere) must not strand the
// operations parked on their channels: at the first event the watch port
// fires and the role goes to the poller's goroutine, which wakes them.
// Without the port the second Read below would wait for good.
func TestInlineTakeover(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",wait=inline"))
			l := listen(t, g, "tcp")
			clientA, serverA := pipe(t, g, l)
			clientB, serverB := pipe(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()

			readA, readB := make(chan ioResult, 1), make(chan ioResult, 1)
			read := func(c net.Conn, res chan<- ioResult) {
				b := make([]byte, 8)
				n, err := c.Read(b)
				res <- ioResult{n, err}
			}
			// The setup's Accepts and Dials parked: wait for the role
			// they left to be free.
			if !netpoll.AwaitInlineRole(serverA, "vacant", expired) {
				t.Fatal("the role stayed taken after the setup")
			}
			base := netpoll.Counters(g).Total
			if !awaitInlinePark(t, "A's Read", func() { go read(serverA, readA) }) {
				t.Fatal("A's Read waited on its channel with nobody holding the role; want it inline")
			}
			if awaitInlinePark(t, "B's Read", func() { go read(serverB, readB) }) {
				t.Fatal("B's Read waited inline while A's held the role")
			}
			if s := netpoll.Counters(g).Total; s.InlineWaits != base.InlineWaits+1 {
				t.Fatalf("%d parks waited inline; want A's alone (B waits on its channel)", s.InlineWaits-base.InlineWaits)
			}

			// A's byte: A's Read returns, and A does not park again.
			if _, err := clientA.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, readA, expired, "A's Read"); r.err != nil || r.n != 1 {
				t.Fatalf("A's Read = %d, %v", r.n, r.err)
			}
			// B's byte arrives with nobody in the epoll fd.
			if _, err := clientB.Write([]byte{2}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, readB, expired, "B's Read"); r.err != nil || r.n != 1 {
				t.Fatalf("B's Read = %d, %v", r.n, r.err)
			}
			if s := netpoll.Counters(g).Total; s.Takeovers == base.Takeovers {
				t.Errorf("B was woken with no takeover counted: who watched the epoll fd?")
			}
		})
	}
}

// TestInlineCrowd: a holder that leaves with its own event while
// InlineCrowd operations or more wait on their channels gives the role to
// the poller's goroutine at once, which keeps it while it wakes them: the
// waiters never wait for a takeover (none is counted), unlike the two
// operations of TestInlineTakeover. Without the crowd rule the role goes
// out and the waiter's wakeup is a takeover.
func TestInlineCrowd(t *testing.T) {
	const waiters = netpoll.InlineCrowd + 1
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",wait=inline"))
			l := listen(t, g, "tcp")
			done, expired := watchdog(t, time.Minute)
			defer done()
			type end struct {
				client, server net.Conn
				res            chan ioResult
			}
			ends := make([]end, 1+waiters)
			for i := range ends {
				c, s := pipe(t, g, l)
				ends[i] = end{c, s, make(chan ioResult, 1)}
			}
			read := func(e end) {
				b := make([]byte, 8)
				n, err := e.server.Read(b)
				e.res <- ioResult{n, err}
			}

			if !netpoll.AwaitInlineRole(ends[0].server, "vacant", expired) {
				t.Fatal("the role stayed taken after the setup")
			}
			base := netpoll.Counters(g).Total
			if !awaitInlinePark(t, "the first Read", func() { go read(ends[0]) }) {
				t.Fatal("the first Read waited on its channel with nobody holding the role; want it inline")
			}
			for i, e := range ends[1:] {
				if awaitInlinePark(t, "a Read", func() { go read(e) }) {
					t.Fatalf("Read %d waited inline while the first held the role", i+1)
				}
			}
			// The holder's byte: it leaves with its event, waiters behind it.
			if _, err := ends[0].client.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, ends[0].res, expired, "the holder's Read"); r.err != nil || r.n != 1 {
				t.Fatalf("the holder's Read = %d, %v", r.n, r.err)
			}
			// One waiter's byte: the poller's goroutine wakes it and keeps
			// the role (InlineCrowd still wait). The others' Reads end
			// when the cleanup closes their conns.
			if _, err := ends[1].client.Write([]byte{2}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, ends[1].res, expired, "a waiter's Read"); r.err != nil || r.n != 1 {
				t.Fatalf("the waiter's Read = %d, %v", r.n, r.err)
			}
			s := netpoll.Counters(g).Total
			if handoffs := s.CrowdHandoffs - base.CrowdHandoffs; handoffs != 1 {
				t.Errorf("%d crowd handoffs; want 1: the holder left with %d waiters", handoffs, waiters)
			}
			if takeovers := s.Takeovers - base.Takeovers; takeovers != 0 {
				t.Errorf("%d takeovers; want none: the poller's goroutine held the role from the holder's leaving", takeovers)
			}
		})
	}
}

// TestInlineDeadlineAndClose: a Read waiting inline ends at its deadline
// set while it waits, and at Close from another goroutine, each with the
// Conn's error; a Read with a deadline parks on its channel with the
// poller's goroutine watching, and is woken by data.
func TestInlineDeadlineAndClose(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",wait=inline"))
			l := listen(t, g, "tcp")
			client, server := pipe(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()
			res := make(chan ioResult, 1)
			read := func() {
				b := make([]byte, 8)
				n, err := server.Read(b)
				res <- ioResult{n, err}
			}

			base := netpoll.Counters(g).Total
			if !awaitInlinePark(t, "the Read", func() { go read() }) {
				t.Fatal("the Read waited on its channel; want it inline")
			}
			server.SetReadDeadline(time.Now().Add(-time.Second))
			wantOpError(t, "Read past a deadline set while waiting inline", awaitResult(t, res, expired, "Read").err, "read", os.ErrDeadlineExceeded)

			server.SetReadDeadline(time.Now().Add(time.Hour))
			base = netpoll.Counters(g).Total
			if awaitInlinePark(t, "the Read with a deadline", func() { go read() }) {
				t.Fatal("the Read with a deadline waited inline; want it on its channel")
			}
			if _, err := client.Write([]byte{7}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, res, expired, "Read with a deadline"); r.err != nil || r.n != 1 {
				t.Fatalf("Read with a deadline = %d, %v; want 1, nil", r.n, r.err)
			}
			if s := netpoll.Counters(g).Total; s.InlineWaits != base.InlineWaits || s.Takeovers == base.Takeovers {
				t.Errorf("a Read with a deadline: %d inline waits, %d takeovers; want none inline, and the poller's goroutine called",
					s.InlineWaits-base.InlineWaits, s.Takeovers-base.Takeovers)
			}

			// The poller's goroutine, called for the Read with a
			// deadline, leaves the role after the poll that woke it.
			if !netpoll.AwaitInlineRole(server, "vacant", expired) {
				t.Fatal("the poller's goroutine kept the role")
			}
			server.SetReadDeadline(time.Time{})
			base = netpoll.Counters(g).Total
			if !awaitInlinePark(t, "the Read without a deadline", func() { go read() }) {
				t.Fatal("the Read without a deadline waited on its channel; want it inline")
			}
			server.Close()
			wantOpError(t, "Read ended by Close", awaitResult(t, res, expired, "Read").err, "read", net.ErrClosed)
		})
	}
}

// awaitInlinePark runs start, which starts one operation on a wait=inline
// poller, and returns once it commits to its wait: whether inline.
func awaitInlinePark(t *testing.T, what string, start func()) (inline bool) {
	t.Helper()
	parked := make(chan bool, 1)
	restore := netpoll.SetInlineParkHook(func(inline bool) {
		select {
		case parked <- inline:
		default: // only the first is this operation's
		}
	})
	defer restore()
	done, expired := watchdog(t, time.Minute)
	defer done()
	start()
	select {
	case inline = <-parked:
		return inline
	case <-expired:
		t.Fatalf("%s did not park within a minute", what)
	}
	return false
}

// TestInlineWatchTakeover: a holder that leaves with its own event and
// then blocks outside netpoll (here on a channel, as a handler on a mutex)
// leaves the role out with B's Read parked on its channel. B's byte, the
// first event on the epoll fd while the holder is away, fires the watch
// port: the poller's goroutine takes the role (one takeover, the role word's
// generation one on) and wakes B while the holder is still blocked. With
// the port never armed B's Read would wait for the holder.
func TestInlineWatchTakeover(t *testing.T) {
	for _, mode := range modes {
		t.Run("mode="+mode, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "mode="+mode+",wait=inline"))
			l := listen(t, g, "tcp")
			clientA, serverA := pipe(t, g, l)
			clientB, serverB := pipe(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()

			if !netpoll.AwaitInlineRole(serverA, "vacant", expired) {
				t.Fatal("the role stayed taken after the setup")
			}
			base, gen := netpoll.Counters(g).Total, netpoll.InlineGen(serverA)

			// A's goroutine: one Read, then it blocks until released.
			readA, release := make(chan ioResult, 1), make(chan struct{})
			blockedA := make(chan struct{})
			if !awaitInlinePark(t, "A's Read", func() {
				go func() {
					b := make([]byte, 8)
					n, err := serverA.Read(b)
					readA <- ioResult{n, err}
					close(blockedA)
					<-release
				}()
			}) {
				t.Fatal("A's Read waited on its channel with nobody holding the role; want it inline")
			}
			readB := make(chan ioResult, 1)
			if awaitInlinePark(t, "B's Read", func() {
				go func() {
					b := make([]byte, 8)
					n, err := serverB.Read(b)
					readB <- ioResult{n, err}
				}()
			}) {
				t.Fatal("B's Read waited inline while A's held the role")
			}
			if _, err := clientA.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, readA, expired, "A's Read"); r.err != nil || r.n != 1 {
				t.Fatalf("A's Read = %d, %v", r.n, r.err)
			}
			<-blockedA
			if !netpoll.AwaitInlineRole(serverA, "out", expired) {
				t.Fatal("A left the role, B waiting, and the role is not out")
			}
			if s := netpoll.Counters(g).Total; s.WatchArms == base.WatchArms {
				t.Fatal("the role is out and the watch port was never armed")
			}

			// B's byte: served while A is still blocked.
			if _, err := clientB.Write([]byte{2}); err != nil {
				t.Fatal(err)
			}
			if r := awaitResult(t, readB, expired, "B's Read (A blocked)"); r.err != nil || r.n != 1 {
				t.Fatalf("B's Read = %d, %v", r.n, r.err)
			}
			s := netpoll.Counters(g).Total
			// Exactly one in every mode. Under mode=lt A's fd stays ready
			// until A reads it, and so does B's until B does: the arm
			// each leaving left owed is paid after that read (the owed
			// bit, inline_linux.go), so neither fires the port at once.
			takeovers, moved := s.Takeovers-base.Takeovers, netpoll.InlineGen(serverA)-gen
			if takeovers != 1 {
				t.Errorf("%d takeovers; want 1, at B's byte", takeovers)
			}
			if moved != takeovers {
				t.Errorf("the role word's generation moved %d for %d takeovers", moved, takeovers)
			}
			if s.InlineWaits-base.InlineWaits != 1 {
				t.Errorf("%d parks waited inline; want A's alone", s.InlineWaits-base.InlineWaits)
			}
			close(release)
		})
	}
}
