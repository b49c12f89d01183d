package netpoll

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Hot reads (hotread): a busy connection that is not served (Listen's,
// Dial's) reads on the runtime's netpoller, an idle one on ours.
//
// Under the nested wait a parked Read is woken by the poller's goroutine,
// which the runtime woke: two goroutine hops per wakeup, and the second
// (a channel send, whose ready calls wakep) wakes a second thread
// whenever a P is idle. Unpinned that cost 1.6-2.1x package net's CPU per
// request at one connection (testdata/issue35/hot, auto and et). Package
// net's reader is readied by the runtime's netpoller itself. So once a
// connection's read parks are woken within hotTick of each other, its
// reader makes a dup of the fd, which the runtime registers in its own
// epoll instance, and from then on each plain Read (Conn.Read of TCP) runs
// its read(2) inside the dup's RawConn.Read, parking there on EAGAIN:
// package net's read, syscall for syscall. The connection's own
// registration is disarmed meanwhile (EPOLLONESHOT with no events), as a
// hot Server connection's is: a park of a writer or of any other read
// (WaitRead, a raw Read, ReadFrom's splice) arms it for that park.
//
// No skipping after a short read while hot: RawConn.Read clears the
// runtime's readiness flag as it begins (internal/poll's prepareRead), so
// the read must be the callback's first act, or data that came between
// the previous Read and this one would be lost with its edge. That makes
// the syscalls per request package net's.
//
// A connection that stays hot with no read in flight holds its dup for
// nothing, and one whose reader waits with no input holds it too: the
// sweeper (connsHot, hotSet.sweep) makes either cold after a whole tick
// without a read. A waiting reader is kicked (a past deadline on the dup,
// with h.cold set first) and goes cold itself; a connection with no
// reader is made cold by the sweeper under rd.mu, which it only tries for.
// Cold again, its registration is whole (EPOLL_CTL_MOD, which reports what
// is queued by then) and its dup closed.
//
// With one P (hotread=auto) the nested wait's hop is a hand-off on one
// thread, and adaptive spinning wins where the next input comes within
// the spin budget B (1.3x package net's requests per second, echo at one
// connection pinned): a spin sees it one epoll_wait(0) after it comes. A
// hot read leaves the poller nothing to spin for. Where it comes later
// (an open loop of 2,000 or 10,000 requests a second) no spin finds it,
// and the hop costs the syscalls of a second wakeup (testdata/issue35/
// session9). So with one P a connection goes hot only while its poller's
// typical idle gap is over 2B, where adaptive spinning does not even
// probe (pollerCounters.spinFar), or while the poller does not spin (a
// fixed budget, asked for, keeps it cold, and a sweep with one P makes it
// so); and a hot reader times its parks (hotWait.timedParks): the sweeper
// makes it cold when half or more of those since its last look ended
// within 2B (a park holds a wakeup a spin would not pay), and holds it
// cold through a tick (desc.busy negative), in which its poller sees its
// wakes again and learns their gaps. With spinning off the connection
// reads hot whenever busy (B is 0: every park is long).
//
// Invariants:
//   - The reader (rd.mu held) makes the connection hot or cold; the
//     sweeper does so only holding rd.mu too. So a hot Read never meets a
//     closed dup, and only one goroutine is ever in the dup's RawConn.Read.
//   - The hot flag (desc.hotw) changes under armMu, which a park's arm
//     takes, as for a Server's hot connection.
//   - No lost kick: Close, a read deadline set and a failed epoll_ctl
//     (desc.nudge) store their state before they load h.seq, and the
//     reader makes seq odd before it loads that state; the sweeper sets
//     h.cold before it loads seq, and the reader loads h.cold after seq is
//     odd. A kick is a past deadline on the dup, which lasts until the
//     reader sets its own (h.dl is then unknown, -1, and mirrored again).
//   - The dup is closed by whoever makes the connection cold, or by the
//     descriptor's last reference (destroy), after which nothing reads
//     it. So Close leaves no fd behind, as cold.

// connsHot is the hot set of every group's connections that are not
// served: hotMaxConns at most (or a quarter of the fd limit), process-wide.
var connsHot = hotSet{conns: true}

// hotProcs caches runtime.GOMAXPROCS(0), which takes the scheduler's lock,
// for at most procsTTL: hotread=auto reads it at each busy wake of a cold
// connection, and n (stored again by each sweep) at each park of a hot one.
var hotProcs struct {
	at atomic.Int64 // serveClock when n was read; 0: never
	n  atomic.Int32
}

const procsTTL = 20 * time.Millisecond

// procsAbove1 reports whether GOMAXPROCS is above 1, as read within the
// last procsTTL. now is serveClock's.
func procsAbove1(now time.Duration) bool {
	if at := hotProcs.at.Load(); at == 0 || now-time.Duration(at) >= procsTTL {
		hotProcs.n.Store(int32(runtime.GOMAXPROCS(0)))
		hotProcs.at.Store(int64(now))
	}
	return hotProcs.n.Load() > 1
}

// woken notes, after a park of a transfer of size bytes in dr (parked:
// it parked, rather than finding an edge), that a plain Read's park ended
// with an edge, under rd.mu: a connection whose last two such wakes came
// within hotTick of each other is busy, and goes hot. It never goes hot on
// one wake, so a connection that says hello and idles never pays for a
// dup. Only a plain Read (size > 0: Conn.Read's transfer) counts: the
// parks of WaitRead, a raw Read or a splice stay on the poller, hot or
// not, and would then pay an EPOLL_CTL_MOD each for a hot read that never
// comes.
//
// With one P under hotread=auto it stays cold while its poller's typical
// idle gap is within twice its spin budget (not spinFar), or its poller
// spins with a fixed budget (hotread=auto set with spin=<duration>: the
// spins asked for see its wakes), and through the hold the sweeper set as
// it made it cold (d.busy is then the hold's end, negated).
func (d *desc) woken(dr *dir, size int, parked bool) {
	if !parked || size == 0 || dr != &d.rd || d.p.hotRead == hotReadOff {
		return
	}
	if d.kind != kindConn || d.net == netUnix || d.srv.Load() != nil || d.hotw.Load() != nil {
		return // not a TCP Conn of its own, or hot already (a Server's owner keeps desc.busy: serverConn.busy)
	}
	now := serveClock()
	last := d.busy
	if last < 0 { // held cold until -last
		if now < -last {
			return
		}
		last = 0
	}
	d.busy = now
	switch {
	case last == 0 || now-last >= hotTick():
	case d.p.hotRead == hotReadAuto && !procsAbove1(now) && (d.p.spin != 0 || (d.p.auto != nil && !spinFar(d.p))):
	case !d.goHotRead():
		// Refused (the bound, EMFILE): two wakes in a row again before
		// it tries again, not every wake of its busy period, each taking
		// the process-wide set's lock (and a failing dup).
		d.busy = 0
	}
}

// goHotRead makes d hot, under rd.mu with a reference held (the Read's): a
// dup of its fd for the runtime's netpoller, and its own registration
// disarmed. It reports false, d left cold, when the hot set is full or the
// dup or the epoll_ctl failed (counted: /netpoll/hot/refused:conns).
func (d *desc) goHotRead() bool {
	p := d.p
	h := &hotWait{d: d}
	if !connsHot.add(h) {
		p.st.inc(cHotRefused)
		return false
	}
	if h.open() != nil {
		connsHot.remove(h)
		p.st.inc(cHotRefused) // EMFILE among others: read cold
		return false
	}
	h.readFn = h.read // made once: a Read allocates nothing
	var err error
	d.armMu.Lock()
	d.hotw.Store(h)
	// A Close that began before the store found no wait to kick, and
	// needs none: the Read's checkDir sees it. A failed descriptor keeps
	// what fail left.
	if !d.failed() {
		err = p.arm(d) // the parked directions only, EPOLLONESHOT: a writer's, if one waits
	}
	if err != nil || d.failed() {
		d.hotw.Store(nil)
		if err != nil {
			p.fail(d, err)
		}
	}
	d.armMu.Unlock()
	if d.hotw.Load() == nil {
		h.f.Close()
		connsHot.remove(h)
		p.st.inc(cHotRefused)
		return false
	}
	p.st.inc(cHotEntries)
	return true
}

// goColdRead makes d cold, under rd.mu with a reference held: its
// registration whole again, then its dup closed.
func (d *desc) goColdRead(h *hotWait) {
	d.busy = 0 // two wakes in a row again before it goes hot again
	if h.hold.Load() {
		d.busy = -(serveClock() + hotTick()) // spinnable: cold through a tick at least (woken)
	}
	d.dropHot()
	h.f.Close() // nobody is in its RawConn.Read: the reader is us, or (the sweeper) holds none
	connsHot.remove(h)
	d.p.st.inc(cHotExits)
}

// closeHot closes the dup of a hot Conn whose descriptor is being
// destroyed: its last reference is gone, so no Read is in the dup's
// RawConn.Read and no sweeper holds rd.mu with a reference.
func (d *desc) closeHot() {
	h := d.hotw.Load()
	if h == nil || h.sc != nil {
		return // a Server's: its owner closes it (goCold)
	}
	d.hotw.Store(nil)
	h.f.Close()
	connsHot.remove(h)
	d.p.st.inc(cHotExits)
}

// readHot is a plain Read of hot d into b, under rd.mu: b's read(2) runs
// inside the dup's RawConn.Read, and parks there on EAGAIN. cold: d went
// cold first (the sweeper: idle, or spinnable with one P), and the
// caller reads cold.
func (d *desc) readHot(h *hotWait, b []byte) (n int, err error, cold bool) {
	dr := &d.rd
	dr.drained = false // no skipping while hot, nor after it for this Read's sake
	for {
		if dl := dr.deadline.Load(); dl != h.dl {
			var t time.Time
			if dl != 0 {
				t = time.Unix(0, dl)
			}
			if err := h.f.SetReadDeadline(t); err != nil {
				// Cannot be: only the reader, or destroy after every
				// reference, closes f. Read cold rather than wait
				// without the deadline.
				d.goColdRead(h)
				return 0, nil, true
			}
			h.dl = dl
		}
		h.seq.Add(1) // odd: from here a kick lands on the Read
		if err := d.checkDir(dr); err != nil {
			h.seq.Add(1)
			return 0, err, false
		}
		if h.cold.Load() {
			h.seq.Add(1)
			d.goColdRead(h)
			return 0, nil, true
		}
		if dr.deadline.Load() != h.dl {
			h.seq.Add(1) // set since the mirror: mirror it again
			continue
		}
		h.b = b
		rerr := h.rc.Read(h.readFn)
		h.b = nil
		h.parkAt = 0 // a park a kick or deadline ended is not timed
		h.seq.Add(1)
		switch {
		case rerr == nil:
			return h.n, h.err, false
		case !errors.Is(rerr, os.ErrDeadlineExceeded):
			// The runtime will not wait on the dup: ErrNotPollable after
			// an event of EPOLLERR alone (a socket's error queue, such
			// as a TX timestamp, with nothing to read), which it reports
			// again at once. Retried, the Read would spin; cold, it waits
			// on the poller as before.
			d.goColdRead(h)
			return 0, nil, true
		}
		// A kick or the mirrored deadline: f's deadline is unknown now
		// (a kicker may set its past one after ours). checkDir reports
		// the deadline or Close, h.cold the sweep; otherwise the kick was
		// for a deadline that moved, and the Read waits again.
		h.dl = -1
	}
}

// read is readHot's RawConn.Read callback: one read(2) of the socket,
// false on EAGAIN (RawConn.Read then parks until the runtime sees it
// readable, the deadline passes or f is closed).
func (h *hotWait) read(fd uintptr) bool {
	d := h.d
	for {
		n, err := unix.Read(int(fd), h.b)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			d.p.st.op(d.fd, cEAGAIN)
			d.p.st.op(d.fd, cReadParks)
			if h.parkAt == 0 && d.p.hotRead == hotReadAuto && hotProcs.n.Load() == 1 {
				h.parkAt = serveClock() // kept through a wakeup that finds nothing
			}
			return false
		}
		if h.parkAt != 0 {
			h.timed(serveClock() - h.parkAt)
			h.parkAt = 0
		}
		h.n, h.err = n, err
		return true
	}
}

// timed counts a park of the reader's that lasted dur, with one P: short
// if it ended within twice the poller's spin budget, the line past which
// its typical gap is far (spinFar). A park holds a wakeup, which a spin
// would not have paid.
func (h *hotWait) timed(dur time.Duration) {
	n := uint64(1) << 32
	if dur <= 2*spinBudgetOf(h.d.p) {
		n++
	}
	h.timedParks.Add(n)
}

// parksOf splits a timedParks word: the parks timed, and the short ones.
func parksOf(v uint64) (parks, shorts uint32) { return uint32(v >> 32), uint32(v) }

// spinBudgetOf is p's adaptive spin budget B as last set (0 with spinning
// off, or before its first event), or a test's (SetHotParkBudget).
func spinBudgetOf(p *poller) time.Duration {
	if b := hotParkBudget.Load(); b != 0 {
		return time.Duration(b)
	}
	return time.Duration(p.st.spinBudget.Load())
}

// hotParkBudget, when set by a test, stands for every poller's spin budget
// in hotWait.timed.
var hotParkBudget atomic.Int64

// spinFar reports whether p's adaptive spinning finds its typical idle gap
// over twice its budget, where it does not even probe: a wake it could see
// by spinning is rare. A test's word (SetSpinFar) stands for every poller's.
func spinFar(p *poller) bool {
	if f := testSpinFar.Load(); f != 0 {
		return f > 0
	}
	return p.st.spinFar.Load()
}

// testSpinFar, when set by a test, is every poller's spinFar: > 0 far, < 0
// near.
var testSpinFar atomic.Int32

// spinnable reports, for the sweeper with one P, whether half or more of
// the parks h's reader timed since the last look ended within twice the
// spin budget (timed), and starts the count again. No park timed: it read without
// waiting, which a hot read does as package net's.
func (h *hotWait) spinnable() bool {
	parks, shorts := parksOf(h.timedParks.Swap(0))
	return parks > 0 && 2*shorts >= parks
}

// sweepConn is the sweeper's part for a Conn's hot wait h (connsHot):
// idle since the last sweep (seq unchanged) or, under hotread=auto with
// GOMAXPROCS 1, spinnable (a count every sweep starts again), it goes
// cold. A reader in the dup's RawConn.Read is kicked and goes cold
// itself; a connection with no Read in flight is returned, to be made
// cold by coldIdle, outside the set's lock.
func (h *hotWait) sweepConn(seq uint32, oneP bool) (idle bool) {
	if seq == h.seen {
		return h.goCold()
	}
	// spinnable first: every sweep starts the count again.
	if h.d.p.hotRead == hotReadAuto && (h.spinnable() || h.d.p.spin != 0) && oneP {
		h.hold.Store(true) // before cold: whoever makes it cold loads it
		return h.goCold()
	}
	return false
}

// goCold asks h's connection to go cold: h.cold, then a kick if a Read
// waits, else idle true for coldIdle. It loads seq again after it stored
// cold, not the sweep's load from before: a Read announced in between
// loaded cold before the store, and would wait unkicked (no lost kick:
// the reader makes seq odd, then loads cold).
func (h *hotWait) goCold() (idle bool) {
	h.cold.Store(true)
	if h.seq.Load()&1 == 1 {
		h.kick()
		return false
	}
	return true
}

// coldIdle makes a hot Conn with no Read in flight cold, from the
// sweeper: only if it gets rd.mu at once (a Read that holds it reads h.cold)
// and a reference (else destroy closes the dup).
func (h *hotWait) coldIdle() {
	d := h.d
	dr := &d.rd
	if !dr.mu.TryLock() {
		return
	}
	if d.incref() == nil {
		if d.hotw.Load() == h {
			d.goColdRead(h)
		}
		d.decref()
	}
	dr.mu.Unlock()
}
