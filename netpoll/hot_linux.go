package netpoll

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Hot connections (dispatch=hot): a Server's busy connections wait on the
// runtime's netpoller, its idle ones on ours.
//
// Under the nested wait every wakeup of a served connection crosses two
// epoll instances: the runtime's wakes the goroutine parked on the
// poller's epoll fd, which polls that fd, then runs the handler. Without
// any watchdog and without spinning that still cost 1.30x package net's
// CPU per request at one connection unpinned (testdata/issue35/bound).
// Package net crosses one: the runtime's netpoller readies the reader
// itself. So a connection that has just been served keeps the goroutine
// that served it, and that goroutine waits for the next input as net's
// reader does: parked in RawConn.Read of a dup of the connection's fd,
// which the runtime registers in its own epoll instance. Its callback asks
// the socket with a read(2) into a pooled buffer, which the handler's Read
// takes (readahead_linux.go; with readahead=off, a poll(2) that reads
// nothing), and runs the handler itself while there is input (serveHot
// says why inside). The connection's own registration in the poller is
// disarmed for input and output meanwhile (EPOLLONESHOT), so that the data
// the runtime wakes the goroutine for does not wake the poller too; it
// watches only for the end of input, which no segment's wakeup matches,
// the read ahead seeing urgent data and a FIN itself through TCP_INQ
// (stickyWatch; without TCP_INQ for urgent data too under the nested
// wait, and for nothing under wait=block, where the wait then asks the
// socket instead: hotSkips); a park of the handler's Read or of a writer
// arms it for that park, as oneshot mode arms (armForPark,
// rearmAfterEvent).
//
// A connection that waits through a whole sweep of its Server (hotTick)
// with no input goes cold: the sweeper sets a past deadline on the dup
// (kick), and the waiting goroutine closes the dup (the runtime deletes
// its registration), arms the connection's own registration again
// (EPOLL_CTL_MOD, which reports what is queued by then) and hands it off
// as any call's return does (serverConn.handOff): it idles with no
// goroutine, and its next input brings it back through the poller, on a
// goroutine of its own, which makes it hot again after that call. So an
// idle connection costs what it costs under the other dispatches, and a
// busy one the runtime's wakeup, as package net's does; the transitions
// cost a dup, the runtime's EPOLL_CTL_ADD and DEL, two EPOLL_CTL_MOD of
// ours, TCP_INQ set and cleared for a connection that reads ahead, and a
// goroutine, once per busy period.
//
// Invariants:
//   - Only the owner (the goroutine running the connection) makes it hot
//     or cold, and it is cold whenever the owner hands it off or finishes
//     it (serveHot returns cold): the hand-off and its model check are
//     unchanged.
//   - The hot flag (desc.hotw) changes under the descriptor's armMu,
//     and a park re-reads it there, so a park's arm never lands on the
//     whole registration restored by goCold, nor goHot's disarm on a
//     park's arm.
//   - Whatever ends a wait from outside (Close, a read deadline set, a
//     failed epoll_ctl: desc.nudge; Shutdown through Close; the sweeper)
//     stores its state before it loads seq, and the owner makes seq odd
//     before it loads that state: either the kicker sees the wait and
//     kicks it, or the owner sees the state and does not wait. A kick is a
//     past deadline on the dup, which lasts until the owner sets another,
//     which it does only with seq even.
//   - The owner mirrors the connection's read deadline on the dup, so that
//     the deadline ends the wait as it ends an idle connection's.
//   - Close severs the dup (sever) without waiting for the callback's
//     reference, and the owner marks the dup closed under h.mu before it
//     closes it, so that sever never touches a reused fd number.

// hotTick is the sweep period: a connection that waited through a whole
// tick with no input goes cold, between one and two ticks after its last.
// A Server's IdleTimeout is therefore late by up to two ticks for a
// connection that was hot when its wait began.
var hotTickNs atomic.Int64 // 0: 20 ms; set by tests only (SetHotTick), atomic lest a test's store race a connection left by another

func hotTick() time.Duration {
	if t := hotTickNs.Load(); t != 0 {
		return time.Duration(t)
	}
	return 20 * time.Millisecond
}

// hotMaxConns bounds a Server's hot connections: each holds a second fd
// and a goroutine. At most a quarter of the process's fd limit, so that
// the dups never take the fds that accepting needs.
const hotMaxConns = 4096

// hotWait is the wait of one hot connection.
type hotWait struct {
	sc      *serverConn // nil: a Conn's reads (hotread_linux.go)
	d       *desc
	f       *os.File        // the dup of the connection's fd, in the runtime's netpoller
	fd      int             // f's fd number, for sever
	rc      syscall.RawConn // f's
	serveFn func(fd uintptr) bool

	// The owner's, for serveHot: what the callback left, the read deadline
	// set on f (unix nanoseconds, 0: none), and whether the owner runs
	// inside f's RawConn.Read (then f cannot be closed synchronously).
	keep, returned, inCB bool
	dl                   int64
	calls                uint64 // handler calls this wait made; added to the Server's count by goCold
	aheads               uint64 // reads ahead that found something (readahead_linux.go); likewise
	skips                uint64 // waits begun with no syscall after a drained read; likewise

	// inq: h's reads ahead are recvmsg(2)s that count what they leave
	// behind, on a socket with TCP_INQ set (readahead_linux.go), and the
	// watch is EPOLLRDHUP alone (stickyWatch). Set before h is published,
	// never after: the poller reads it. A read without the count (the
	// option refused, or cleared for user code) drains nothing, so no
	// wait skips after it. inqSet: the option is on, set by goHot and
	// cleared by dropInqLocked; guarded by the descriptor's armMu.
	inq, inqSet bool

	// user is true while the owner runs user code (enterUser): a handler
	// call or a ConnState hook. Stored by the owner only; Server.Close
	// (hotSet.awaitCold) loads it and does not wait for the owner then.
	user atomic.Bool

	// ahead is input the owner read for the handler, not yet taken by a
	// Read; nil while none (readahead_linux.go). Stored with the read
	// direction's mu held; File loads it without.
	ahead aheadSlot

	// seq is odd while the owner waits, or is about to: a kick lands on
	// the wait. The owner adds to it; kickers and the sweeper load it.
	seq  atomic.Uint32
	seen uint32 // seq at the sweeper's last look; guarded by hotSet.mu
	idx  int    // h's index in hotSet.list; guarded by hotSet.mu

	mu      sync.Mutex
	closed  bool // the owner closed f, whose fd number may be reused: guarded by mu
	severed bool // sever replaced f's fd: guarded by mu

	// A Conn's (hotread_linux.go): the reader's buffer and result around
	// the callback, readFn (h.read, bound once), and cold, set by the
	// sweeper before it kicks: the connection goes cold.
	b      []byte
	n      int
	err    error
	readFn func(fd uintptr) bool
	cold   atomic.Bool

	// A Conn's under hotread=auto with one P (hotread_linux.go, spinnable):
	// parkAt, when the reader's read(2) first found EAGAIN in the wait
	// under way (serveClock; 0: not timing), the reader's; timedParks, the
	// parks it timed since the sweeper's last look (the high 32 bits) and
	// those that ended within twice the poller's spin budget (the low),
	// one word so that the sweeper takes both at once: added by the reader
	// and swapped by the sweeper; hold, set by the sweeper before it makes
	// the Conn cold for shorts: it then stays cold through a tick
	// (desc.busy).
	parkAt     time.Duration
	timedParks atomic.Uint64
	hold       atomic.Bool
}

// hotSet is a Server's hot connections and their sweeper.
type hotSet struct {
	mu      sync.Mutex
	list    []*hotWait
	timer   *time.Timer // the sweeper, armed while list is not empty
	ticking bool
	max     int           // hotMaxConns or a quarter of the fd limit; 0 until the first add
	tick    time.Duration // hotTick, read as the sweeper starts
	conns   bool          // connsHot: Conns' hot reads (hotread_linux.go), not a Server's
	// gone is broadcast by remove while awaitCold waits (awaiting > 0);
	// both guarded by mu, gone made by the first awaitCold.
	gone     *sync.Cond
	awaiting int
}

// testHookHot, when set by a test, runs at the windows of a hot wait in
// which Close, a deadline, Shutdown, the sweeper and a sticky condition
// (kickSticky) must not be lost: before the wait is announced (seq still
// even: a kicker does not kick), after it is announced (seq odd) and
// before the state is checked, after the state is checked and before the
// wait, and after the wait ended and before the connection goes cold.
var testHookHot atomic.Pointer[func(sc *serverConn, at hotPoint)]

type hotPoint uint8

const (
	hookHotBefore hotPoint = iota
	hookHotAnnounced
	hookHotWoken
	// hookHotChecked: announced, and every state checked; the wait
	// begins once the hook returns.
	hookHotChecked
)

// serveHot serves sc for as long as it stays hot, after a call returned
// nil: it makes sc hot if it is not (goHot), then waits and calls the
// handler inside one RawConn.Read of the dup (h.serve), and returns when
// sc has gone cold. keep false: the handler asked for the connection to
// be closed (an error, a panic), as call's keep. returned: its handler
// returned last (a hand-off then acts on what the return left: EOF, a
// past deadline), rather than a wait going on. Called by the owner, from
// run, under dispatch=hot.
//
// The handler runs inside the callback, so that the callback and the
// runtime's readiness flag see the whole span from the handler's last
// Read to the park: RawConn.Read clears the flag once, when it begins
// (internal/poll's prepareRead), and an edge for data that comes after
// the last read, before the park, sets it and is not lost. So a wait
// after a short read (the socket drained: short-read skipping) parks with
// no syscall, as it would cold (handOff's skip), and a wakeup costs one
// read(2), which an edge that may be stale needs and which the handler's
// Read takes (readahead_linux.go): per request a read and the handler's
// write, one syscall fewer than package net's reader makes.
func (sc *serverConn) serveHot() (keep, returned bool) {
	// Cold here: serveHot returns only cold, and nothing else makes a
	// connection hot.
	if !sc.plain() {
		return true, true
	}
	h := sc.goHot()
	if h == nil {
		return true, true
	}
	// The return that brought it here begins a wait, as a hand-off's
	// would: the callback's first poll may park it.
	sc.startIdle(true)
	if !h.idle() {
		sc.goCold(h) // Close has begun: the hand-off finds the connection closed
		return true, true
	}
	h.keep, h.returned, h.inCB = true, true, true
	err := h.rc.Read(h.serveFn)
	h.inCB = false
	if h.seq.Load()&1 == 1 {
		h.seq.Add(1) // the wait ended by an error: a kick, the deadline
		h.hook(hookHotWoken)
	}
	if err != nil {
		h.keep, h.returned = true, false
	}
	sc.goCold(h)
	return h.keep, h.returned
}

// busy reports whether sc's handler, which has just returned, had
// returned less than hotTick before, to a hand-off: its connection is
// busy, and goes hot. One call followed by quiet (a connection that says
// hello and idles, a burst) never makes it hot, so an idle connection
// never paid a goroutine, a dup and their transitions for nothing. Called
// by the owner after each return outside a hot wait: it notes the return.
func (sc *serverConn) busy() bool {
	now := serveClock()
	d := sc.desc()
	last := d.busy
	d.busy = now
	return last != 0 && now-last < hotTick()
}

// plain reports whether sc's handler may be called again, or wait, with
// nothing for a hand-off to act on at once (handOff's first switch).
func (sc *serverConn) plain() bool {
	dr := &sc.desc().rd
	dr.mu.Lock()
	defer dr.mu.Unlock()
	return sc.plainLocked()
}

// plainLocked is plain with the read direction's mu held (ended is
// guarded by it).
func (sc *serverConn) plainLocked() bool {
	d := sc.desc()
	dr := &d.rd
	return !d.closing() && !d.failed() && !dr.expired() && !dr.ended && !sc.s.closed.Load()
}

// serve is serveHot's RawConn.Read callback: it runs the handler while
// the socket has input and returns false to park (a wait) when it has
// none, or true with h.keep and h.returned set to go cold. Entered first
// after the handler's return, and then after each wait: either way what
// the flag said may be stale, so it asks the socket first: with a read(2)
// into a pooled buffer where it may (readahead_linux.go), which the
// handler's Read then takes, or with a poll(2).
func (h *hotWait) serve(fd uintptr) bool {
	sc := h.sc
	d := sc.desc()
	dr := &d.rd
	if h.seq.Load()&1 == 1 {
		h.seq.Add(1) // back from a wait
		h.hook(hookHotWoken)
	}
	// counted: the last read ahead drained the socket by its TCP_INQ
	// count (h.inq). A short read of the handler's own, a read(2), has no
	// count: it may have stopped at an urgent mark or before a FIN that
	// came in the wakeup this wait consumed. Trusted only after a read
	// ahead that drained, since then whatever it read came later, and set
	// the runtime's flag again.
	ask, counted := true, false
	for {
		dr.mu.Lock()
		ahead := h.ahead.Load() != nil
		read := false
		if !ahead && ask {
			var found bool
			if read, found = h.readAhead(d, int(fd)); read && !found {
				dr.mu.Unlock()
				return h.park(false)
			}
			h.aheads += uint64(boolInt(read))
			counted = read && dr.drained
		}
		if !read {
			dr.drained = false // the handler's Read makes its syscall, or takes what was left
		}
		dr.mu.Unlock()
		if ask && !ahead && !read {
			// POLLPRI, POLLRDHUP, POLLHUP and POLLERR have the values
			// of their epoll bits on Linux: stickyEvents reads them.
			ev, err := pollFD(int(fd), unix.POLLIN|unix.POLLRDHUP|unix.POLLPRI)
			if ev&readableEvents == 0 && err == nil {
				return h.park(false)
			}
			// The connection's own registration is disarmed while hot,
			// so the poller reports none of the conditions that end a
			// read early with something pending (urgent data, end of
			// input: stickyEvents): this poll does, before the handler's
			// Read can find the socket drained and the skip trust it.
			// A connection that reads ahead has them watched instead
			// (stickyWatch).
			d.stick(uint32(ev))
		}
		if !h.enterUser() {
			return true // Close has begun: cold, and the hand-off finds it closed
		}
		h.calls++
		keep := sc.callIn(nil, 0)
		h.user.Store(false)
		if !keep {
			h.keep = false
			return true
		}
		// Drained (a short Read or read ahead, skipping on and the
		// conditions watched or counted: hotSkips, counted; nothing
		// sticky) and no edge since on our side: anything that comes sets
		// the runtime's flag, cleared before the call. Otherwise ask the
		// socket, unless input read ahead is left for the handler.
		dr.mu.Lock()
		plain := sc.plainLocked()
		left := h.ahead.Load() != nil
		ask = !left && !(hotSkips(d, h) && dr.drained && (counted || !h.inq) && d.sticky.Load() == 0 && dr.state.Load() == stEmpty)
		dr.mu.Unlock()
		if !plain {
			// Returned: the hand-off acts on it, closing the connection
			// whichever state it finds. With input read ahead left it
			// closes here: goCold drops the input, and a read deadline
			// cleared meanwhile would have the hand-off keep the
			// connection open without it.
			h.keep = !left
			return true
		}
		sc.startIdle(true)
		if !h.idle() {
			return true
		}
		if left || ask {
			continue
		}
		h.skips++
		if !h.park(true) {
			return false
		}
		if !h.returned {
			return true // cold, its wait going on
		}
		ask = true // a condition came since the skip: ask
	}
}

// enterUser marks the start of user code on the owner (a handler call, a
// ConnState hook), unless Server.Close has begun: then it reports false
// and the owner runs none, but goes cold (the connection is closed). The
// owner stores user before it loads closed, and Close stores closed
// before it loads user (hotSet.awaitCold): either Close sees the owner in
// user code and does not wait for it, or the owner sees Close and runs no
// user code before it goes cold, which Close waits for.
func (h *hotWait) enterUser() bool {
	h.user.Store(true)
	if h.sc.s.closed.Load() {
		h.user.Store(false)
		return false
	}
	return true
}

// idle reports the connection idle (setState, whose ConnState hook is user
// code: enterUser), and false, reporting nothing, once Close has begun.
func (h *hotWait) idle() bool {
	if !h.enterUser() {
		return false
	}
	h.sc.setState(StateIdle)
	h.user.Store(false)
	return true
}

// park announces a wait and returns false (RawConn.Read then waits), or,
// if something ended it before it began, returns true with h.returned
// false: the connection goes cold with its wait going on. skipped: the
// wait follows a drained read with no syscall since, and a condition the
// poller stored since (sticky: stickyWatch) returns true with h.returned
// true, for the caller to ask the socket.
func (h *hotWait) park(skipped bool) bool {
	sc := h.sc
	d := sc.desc()
	dr := &d.rd
	for {
		if dl := dr.deadline.Load(); dl != h.dl {
			var t time.Time
			if dl != 0 {
				t = time.Unix(0, dl)
			}
			if h.f.SetReadDeadline(t) != nil {
				h.returned = false
				return true // severed or closed: cold
			}
			h.dl = dl
		}
		h.hook(hookHotBefore)
		h.seq.Add(1) // odd: from here a kick lands on the wait
		h.hook(hookHotAnnounced)
		if d.closing() || sc.s.closed.Load() || d.failed() {
			h.seq.Add(1)
			h.returned = false
			return true
		}
		if skipped && d.sticky.Load() != 0 {
			// Stored by the poller before it loaded seq (kickSticky):
			// seen here, or kicked there.
			h.seq.Add(1)
			return true
		}
		if dr.deadline.Load() == h.dl {
			h.hook(hookHotChecked)
			return false
		}
		h.seq.Add(1) // set since the mirror: mirror it again
	}
}

func (h *hotWait) hook(at hotPoint) {
	if hk := testHookHot.Load(); hk != nil {
		(*hk)(h.sc, at)
	}
}

// goHot makes sc hot: a dup of its fd for the runtime's netpoller, and its
// own registration disarmed. It returns nil, sc staying cold, when the
// Server has hotMaxConns hot already or the dup or the epoll_ctl failed
// (counted: /server/hot-refused:conns).
func (sc *serverConn) goHot() *hotWait {
	s, d := sc.s, sc.desc()
	h := &hotWait{sc: sc, d: d}
	if !s.hot.add(h) {
		s.stats.hotRefused.Add(1)
		return nil
	}
	if d.incref() != nil {
		s.hot.remove(h)
		return nil // closing: the hand-off sees it
	}
	defer d.decref()
	// The ref keeps d.fd from being closed, and its number reused, under
	// the dup and the epoll_ctl.
	if h.open() != nil {
		s.hot.remove(h)
		s.stats.hotRefused.Add(1) // EMFILE among others: served cold
		return nil
	}
	h.serveFn = h.serve // made once: a wait allocates nothing
	h.inq = d.mayReadAhead() && !inqRefused.Load() && !testNoInq.Load()
	var err error
	d.armMu.Lock()
	d.hotw.Store(h)
	// A Close that began before the store found no wait to sever: seen
	// here (it sets closing before it looks for the wait).
	closing := d.closing()
	if !closing {
		if h.inq {
			h.setInq()
		}
		err = d.p.arm(d) // the parked directions only, EPOLLONESHOT: none while the owner runs
	}
	if closing || err != nil {
		h.dropInqLocked() // while dropInq still finds h, as dropHot does
		d.hotw.Store(nil)
		if err != nil {
			d.p.fail(d, err)
		}
	}
	d.armMu.Unlock()
	if closing || err != nil {
		h.close()
		s.hot.remove(h)
		if err != nil {
			s.stats.hotRefused.Add(1)
		}
		return nil
	}
	s.stats.hotEntries.Add(1)
	return h
}

// open makes h's dup of its descriptor's fd, which the runtime registers
// in its own epoll instance, and its RawConn. The caller holds a reference
// to h.d, so that d.fd is not closed, nor its number reused, under the dup.
func (h *hotWait) open() error {
	nfd, err := unix.FcntlInt(uintptr(h.d.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	h.fd = nfd
	h.f = os.NewFile(uintptr(nfd), "netpoll-hot") // non-blocking: the runtime registers it
	if h.rc, err = h.f.SyscallConn(); err != nil {
		h.f.Close()
		return err
	}
	return nil
}

// dropHot clears d's hot wait and gives it its edge-triggered registration
// back (restore), under armMu, unless d has failed or is closing (the
// registration then goes with the fd). The reference taken for the MOD
// keeps d.fd from being closed, nor its number reused, under it and under
// fail's DEL.
func (d *desc) dropHot() {
	d.armMu.Lock()
	if h := d.hotw.Load(); h != nil && h.inq {
		h.dropInqLocked() // while dropInq still finds h: user code may have the fd once it is gone
	}
	d.hotw.Store(nil)
	if !d.failed() && d.incref() == nil {
		if err := d.p.restore(d); err != nil {
			d.p.fail(d, err)
		}
		d.decref()
	}
	d.armMu.Unlock()
}

// goCold ends sc's hot period, if h (its wait) is not nil: its own
// registration whole again, then the dup closed.
func (sc *serverConn) goCold(h *hotWait) {
	if h == nil {
		return
	}
	s := sc.s
	d := sc.desc()
	d.dropHot()
	// Input read ahead is left only when the connection is to close: a
	// call failed, panicked or closed it, or returned leaving it unable to
	// go on, and serve then closes it (readahead_linux.go). Only the owner
	// stores it.
	if h.ahead.Load() != nil {
		d.rd.mu.Lock()
		h.ahead.drop()
		d.rd.mu.Unlock()
	}
	h.close()
	// The period's counts before it leaves the set: whoever sees it gone
	// (Server.Close's awaitCold, a Stats reader watching the hot count)
	// sees them too.
	s.stats.hotExits.Add(1)
	s.stats.hotCalls.Add(h.calls) // once per hot period, not per request
	s.stats.readAheads.Add(h.aheads)
	s.stats.hotSkips.Add(h.skips)
	s.hot.remove(h) // after the close: a Server with nothing hot holds no dup
}

// setInq turns TCP_INQ on for h's reads ahead, with the descriptor's
// armMu held and h published (d.hotw), unless user code has the fd: user
// code marks that (stickyRaw) before it looks for a hot wait to clear the
// option of (dropInq), and this looks at the mark after the store, so
// either this sees the mark and sets nothing, or dropInq sees h and
// clears the option after this set it. A kernel that refuses the option
// (ENOPROTOOPT, before 4.18) is not asked again: later hot periods watch
// EPOLLPRI instead (stickyWatch). This one's reads ahead get no count,
// and none of its waits skips.
func (h *hotWait) setInq() {
	if !h.d.mayReadAhead() {
		return
	}
	err := unix.SetsockoptInt(h.d.fd, unix.SOL_TCP, unix.TCP_INQ, 1)
	if err == unix.ENOPROTOOPT {
		inqRefused.Store(true)
	}
	h.inqSet = err == nil
}

// inqRefused records that the kernel refused TCP_INQ (setInq).
var inqRefused atomic.Bool

// dropInqLocked turns TCP_INQ off again, if h set it and it is still on,
// with the descriptor's armMu held and h still published (d.hotw): when
// the connection goes cold (dropHot, goHot's failure) and before user
// code has the fd (dropInq), so that user code never sees the option, nor
// loses its own setting of it to a later clear. Even after Close began,
// as long as any reference keeps the fd open (increfOpen): a File taken
// meanwhile would carry the option on in its dup. With no reference left
// the socket goes with the fd, and nothing can dup it any more.
func (h *hotWait) dropInqLocked() {
	d := h.d
	if !h.inqSet || d.increfOpen() != nil {
		return
	}
	h.inqSet = false
	// Cannot fail: the reference keeps the socket, which took the option.
	unix.SetsockoptInt(d.fd, unix.SOL_TCP, unix.TCP_INQ, 0)
	d.decref()
}

// dropInq turns TCP_INQ off for user code that is about to have the fd
// of a hot connection (exposeRaw, which marked stickyRaw first), before
// its function runs. A read ahead of the owner's in flight may still get
// its count, but stickyRaw, stored first, stops every skip after it.
func (d *desc) dropInq() {
	if h := d.hotw.Load(); h != nil && h.inq {
		d.armMu.Lock()
		if d.hotw.Load() == h {
			h.dropInqLocked()
		}
		d.armMu.Unlock()
	}
}

// testNoInq, set by tests, makes goHot behave as on a kernel that refuses
// TCP_INQ: the watch takes EPOLLPRI (stickyWatch).
var testNoInq atomic.Bool

// close closes f, telling sever first: f's fd number is free once it is
// closed. The owner's.
func (h *hotWait) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	if h.inCB {
		// A handler's Goexit unwinding through f's RawConn.Read, whose
		// reference the close waits for: it drops it further up.
		go h.f.Close()
		return
	}
	h.f.Close() // the runtime deletes its registration and closes the dup
}

// hotWaiting reports whether d is a hot Server connection's whose owner
// waits for its next input (or is about to): a Read from another goroutine
// is one from outside the handler (ErrServed).
func (d *desc) hotWaiting() bool {
	h := d.hotw.Load()
	return h != nil && h.sc != nil && h.seq.Load()&1 == 1
}

// kickHot ends d's hot wait, if it is in one: desc.nudge's part for a
// connection that may be hot (Close, a read deadline set, a failed
// epoll_ctl), called after the change is stored. Close also severs a
// Server connection's dup whatever the owner does, so that the socket is
// closed when the Conn is, as it is cold, and not when a handler that runs
// returns. A Conn's reader makes no call of the user's inside the dup's
// RawConn.Read, so the last reference's destroy closes its dup (hotread_linux.go).
func (d *desc) kickHot() {
	h := d.hotw.Load()
	switch {
	case h == nil:
	case h.sc != nil && d.closing():
		h.sever()
		h.kick()
	case h.seq.Load()&1 == 1:
		h.kick()
	}
}

// sever makes f's fd number refer to a placeholder (a fresh eventfd, never
// readable) instead of the connection's socket, so that the socket is
// released when the Conn's own fd closes. It cannot close f: the owner may
// run the handler inside f's RawConn.Read, whose reference the close
// would wait for, and the handler may be the one closing (or blocked on
// what the closer holds). dup3 replaces the number atomically, a syscall
// in flight on it keeps the socket it began with, and the runtime's
// registration of the socket goes with the socket, when the Conn's fd
// closes (its EPOLL_CTL_DEL of the number, at the owner's close of f,
// fails, which it ignores; an event the registration still reports
// before the socket goes carries the pollDesc's old sequence tag, which
// the runtime drops: netpoll_epoll.go's fdseq). The owner's close of f
// closes the placeholder. Invariant: f's fd number is not
// reused while sever may touch it: the owner sets closed under mu before
// it closes f. Without an eventfd (EMFILE) the socket closes when the
// owner goes cold: at once if it waits (the kick), when the handler
// returns if one runs.
func (h *hotWait) sever() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.severed {
		return
	}
	ph, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return
	}
	if unix.Dup3(ph, h.fd, unix.O_CLOEXEC) == nil {
		h.severed = true
	}
	unix.Close(ph)
}

// kick sets a past deadline on the dup: the wait ends, now or as it
// starts. f may be closed already (the owner went cold): then it does
// nothing.
func (h *hotWait) kick() { h.f.SetReadDeadline(time.Unix(1, 0)) }

// hot reports whether d is a hot connection's: its registration is armed
// per park, as oneShot's is.
func (d *desc) hot() bool { return d.hotw.Load() != nil }

// perPark reports whether d's registration is armed for each park.
func (d *desc) perPark() bool { return d.mode == oneShot || d.hot() }

// restore gives a connection that was hot its edge-triggered registration
// back, with d.armMu held. The MOD reports what is queued by then, as an
// edge: the hand-off that follows may find a ready token, which it checks.
func (p *poller) restore(d *desc) error {
	ev := registration(d)
	e := unix.EpollEvent{Events: ev, Fd: int32(d.fd), Pad: int32(d.gen)}
	p.st.op(d.fd, cCtlMod)
	if err := epollCtl(p.epfd, unix.EPOLL_CTL_MOD, d.fd, &e); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	d.armed.Store(ev &^ (unix.EPOLLET | unix.EPOLLONESHOT))
	return nil
}

// add puts h in the set and starts the sweeper if it is not running. It
// reports false when the set is full.
func (hs *hotSet) add(h *hotWait) bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.max == 0 {
		hs.max = hotMaxConns
		var rl unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur/4 < uint64(hs.max) {
			hs.max = max(int(rl.Cur/4), 1)
		}
	}
	if len(hs.list) >= hs.max {
		return false
	}
	h.idx = len(hs.list)
	h.seen = ^uint32(0) // not seq's first value: the first sweep after this finds it changed
	hs.list = append(hs.list, h)
	if !hs.ticking {
		hs.ticking = true
		hs.tick = hotTick() // read at each start: connsHot lives as long as the process
		if hs.timer == nil {
			hs.timer = time.AfterFunc(hs.tick, hs.sweep)
		} else {
			hs.timer.Reset(hs.tick)
		}
	}
	return true
}

// remove takes h out of the set.
func (hs *hotSet) remove(h *hotWait) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	last := hs.list[len(hs.list)-1]
	hs.list[h.idx], last.idx = last, h.idx
	hs.list[len(hs.list)-1] = nil
	hs.list = hs.list[:len(hs.list)-1]
	if len(hs.list) == 0 && hs.ticking && hs.timer.Stop() {
		hs.ticking = false // nothing to sweep: no timer fires into an idle Server
	}
	if hs.awaiting > 0 {
		hs.gone.Broadcast()
	}
}

// awaitCold waits until every hot connection whose owner runs no user
// code as it looks has gone cold, its dup closed: Server.Close calls it
// after it stored closed and closed the connections, which kicks their
// waits. An owner not in user code then reaches goCold running none
// (enterUser says why); one in user code (a handler, which may block on
// anything, or a ConnState hook, which may wait for the goroutine calling
// Close) is not waited for, and closes its dup when that code returns.
func (hs *hotSet) awaitCold() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var owed []*hotWait
	for _, h := range hs.list {
		if !h.user.Load() {
			owed = append(owed, h)
		}
	}
	if len(owed) == 0 {
		return
	}
	if hs.gone == nil {
		hs.gone = sync.NewCond(&hs.mu)
	}
	hs.awaiting++
	defer func() { hs.awaiting-- }()
	for _, h := range owed {
		for h.idx < len(hs.list) && hs.list[h.idx] == h {
			hs.gone.Wait()
		}
	}
}

// sweep kicks every connection that has waited, the same wait, since the
// last sweep: it goes cold. It runs every hotTick while any is hot.
//
// connsHot's sweep also makes cold a Conn that read nothing since the
// last sweep (hotWait.sweepConn), and, with GOMAXPROCS 1, a hotread=auto
// Conn half or more of whose parks since the last sweep ended within twice
// its poller's spin budget.
func (hs *hotSet) sweep() {
	var idle []*hotWait
	oneP := false
	if hs.conns {
		n := runtime.GOMAXPROCS(0)
		hotProcs.n.Store(int32(n)) // for hot readers, which time their parks with one P
		oneP = n == 1
	}
	hs.mu.Lock()
	for _, h := range hs.list {
		seq := h.seq.Load()
		switch {
		case hs.conns:
			if h.sweepConn(seq, oneP) {
				idle = append(idle, h)
			}
		case seq&1 == 1 && seq == h.seen:
			h.kick()
		}
		h.seen = seq
	}
	if len(hs.list) == 0 {
		hs.ticking = false
	} else {
		hs.timer.Reset(hs.tick)
	}
	hs.mu.Unlock()
	for _, h := range idle {
		h.coldIdle() // takes hs.mu to leave the set
	}
}
