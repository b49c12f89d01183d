package netpoll

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The wait state of one direction (read or write) of a descriptor, in the
// spirit of the runtime's pdReady/pdWait. Who moves it:
//
//	empty   -> ready   the poller saw an edge (notify)
//	empty   -> waiting the operation got EAGAIN and parks (awaitReady)
//	ready   -> empty   the operation consumes the token and retries the syscall (awaitReady)
//	waiting -> ready   the poller saw an edge, then sends the wake token (notify)
//	waiting -> empty   Close, a deadline change or a failed epoll_ctl (fail), then
//	                   sends the wake token (nudge); or the parked operation
//	                   itself when its timer fires (no token)
//
// A connection served on demand (Server, serve_linux.go) has a fourth state
// in its read direction, in which no operation runs and no goroutine waits
// (the Server calls such a connection idle, StateIdle):
//
//	empty   -> serve   the handler's goroutine, after its handler returned and
//	                   the socket was found empty (serverConn.handOff); it exits
//	serve   -> ready   the poller saw an edge: a poll by the inline role's
//	                   holder queues the connection, which that holder (or
//	                   the one after a takeover) runs once, inline or on a
//	                   worker (edge, serverole_linux.go); any other starts
//	                   the handler on a goroutine (notify)
//	serve   -> empty   Close, a read deadline that passed or a failed epoll_ctl
//	                   (nudge, the idle timer), then starts the handler; or the
//	                   idle timer for Server.IdleTimeout, then closes the
//	                   connection; or the handing-off goroutine itself, which
//	                   then keeps the connection
//
// The same invariant holds with "start the handler's goroutine" for "send
// the token": whoever other than the handing-off goroutine moves the
// direction out of serve starts exactly one run (or queues it on the role,
// which has one holder, so the queued connection has one run; or, the idle
// timer, owns the connection and closes it), and nobody else does.
//
// Invariant: whoever other than the waiter moves a direction out of waiting
// sends exactly one token on wake, and nobody else sends. So every park is
// woken exactly once, and an edge that lands between EAGAIN and the park is
// held as ready: it is never lost. A stale ready costs one syscall that
// returns EAGAIN.
//
// With short-read skipping (desc.skip, the shortread key), a stream Read or
// Write also moves ready -> empty just before its syscall (consume), and a
// syscall that moved fewer bytes than asked marks the direction drained:
// the next operation in it goes to awaitReady before any syscall, so it parks
// unless an edge came since that consume. It is safe because the kernel
// queues the data an edge announces before it wakes epoll, so an edge
// consumed before a syscall announces nothing that syscall did not see,
// and anything queued after the syscall found the socket drained wakes
// epoll again, after the consume. The exceptions, where the kernel stops a
// transfer early with something still pending and no edge to come, are
// announced by event bits the descriptor keeps (sticky) and that turn the
// skip off. netpoll/DESIGN.md, "Short reads", has the kernel paths.
const (
	stEmpty uint32 = iota
	stReady
	stWaiting
	stServe
)

// dir is one direction of a descriptor.
type dir struct {
	state atomic.Uint32 // stEmpty, stReady, stWaiting or stServe

	// drained: the last syscall of a stream operation in this direction
	// moved fewer bytes than asked (desc.skip only). Guarded by mu.
	drained bool
	// ended: the last Read returned EOF or an error other than a deadline
	// or Close; a Server closes a connection whose handler returns after
	// that (serve_linux.go). Guarded by mu.
	ended bool

	// token carries the one token of the invariant above (capacity 1). The
	// operation makes it before its first park, under mu and before it
	// enters waiting; a waker reads it only after moving the direction
	// out of waiting, so that move orders the two. It is kept for the
	// connection's next parks, except by a hand-off to serve, which gives
	// it back to tokenPool (an idle connection holds none): it is empty
	// then, because a park returns only after taking its token.
	token    chan struct{}
	deadline atomic.Int64 // unix nanoseconds; 0 means none

	// mu serializes operations in this direction, so at most one goroutine
	// is ever parked on it. Lock order: dir.mu before desc.armMu.
	mu    sync.Mutex
	timer *time.Timer // the parked operation's deadline timer; guarded by mu
}

// notify records an edge in dr, one of d's directions: from the poller's
// events, or handed over by a balancing acceptor. Any goroutine may call it.
func (d *desc) notify(dr *dir) (woke bool) { return d.ready(dr, nil) }

// edge is notify for an edge a poll found: a served connection is queued
// on the role of a poller that runs handlers inline or on its loop, whose
// holder made the poll and runs it after (serverole_linux.go,
// serveloop_linux.go). Only dispatch calls it.
func (d *desc) edge(dr *dir) (woke bool) {
	if dr != &d.rd {
		return d.ready(dr, nil)
	}
	if lp := d.p.loop; lp != nil {
		return d.ready(dr, lp)
	}
	if sr := d.p.serve; sr != nil {
		return d.ready(dr, sr)
	}
	return d.ready(dr, nil)
}

// queuer is a role whose holder runs the served connections its poll
// readied: serveRole or loopRole. A nil queuer is an untyped nil: the
// callers pass a role only when there is one.
type queuer interface{ queued(sc *serverConn) }

// ready moves dr to stReady: it wakes the operation waiting, or takes an
// idle served connection, which q's holder runs (q not nil) or a new
// goroutine does.
func (d *desc) ready(dr *dir, q queuer) (woke bool) {
	if dr.state.Load() == stReady {
		return false
	}
	switch dr.state.Swap(stReady) {
	case stWaiting:
		d.send(dr)
		return true
	case stServe:
		if q != nil {
			q.queued(d.srv.Load())
		} else {
			d.srv.Load().start(true)
		}
		return true
	}
	return false
}

// nudge wakes an operation parked in dr so it re-reads its deadline and
// the descriptor's closing flag. It never invents an edge. On a connection
// served on demand and idle, it starts the handler if the connection is
// closing or its read deadline has passed, and otherwise sets the idle
// timer to the deadline.
func (d *desc) nudge(dr *dir) {
	if dr == &d.rd {
		// Its owner may wait on the runtime's netpoller, whatever else
		// waits in the direction (a Read from outside the handler).
		d.kickHot()
	}
	if dr.state.CompareAndSwap(stWaiting, stEmpty) {
		d.send(dr)
		return
	}
	if dr.state.Load() == stServe {
		d.srv.Load().recheck() // set before the direction first entered serve
	}
}

// send gives the parked operation of dr its wake token.
func (d *desc) send(dr *dir) {
	select {
	case dr.token <- struct{}{}:
	default:
		panic("netpoll: second wake token for one park (state machine invariant broken)")
	}
	if iw := d.p.inline; iw != nil {
		iw.kickIfHolder(dr)
	}
}

// setDeadline stores t as dr's deadline and wakes an operation parked in
// it so the deadline applies at once.
func (d *desc) setDeadline(dr *dir, t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
		if ns <= 0 {
			ns = 1 // before 1970: long past, and not the "no deadline" zero
		}
	}
	dr.deadline.Store(ns)
	d.nudge(dr)
}

// expired reports whether the direction's deadline has passed.
func (dr *dir) expired() bool {
	dl := dr.deadline.Load()
	return dl != 0 && dl <= time.Now().UnixNano()
}

// Reference word of a descriptor, laid out as:
//
//	bit 63     closing: Close has begun; new operations fail with net.ErrClosed
//	bits 0-62  references: 1 for the open descriptor, plus 1 per operation in flight
//
// The fd is deregistered and closed by whoever drops the count to zero after
// closing is set, so no syscall ever runs on an fd number that was closed
// (and perhaps reused) under it.
const (
	refClosing uint64 = 1 << 63
	refMask           = refClosing - 1
)

// desc is one fd registered with one poller (a shared listener has one desc
// per poller). See DESIGN.md, "The descriptor state machine".
//
// It is what an idle connection costs besides its Conn (and, served on
// demand, its serverConn): every field is paid per connection, so it holds
// no counter (the poller counts, pollerCounters) and nothing the poller
// knows (its waitInline role is d.p.inline). TestDescSize holds it to its
// size class.
type desc struct {
	fd   int
	gen  uint32 // generation, packed with fd into epoll_event data
	kind descKind
	mode regMode // registration mode: the group's, or edgeTriggered if kindShared
	net  uint8   // a Conn's network: its index in networks
	// skip turns on short-read skipping for this descriptor: a connection
	// of a group with the shortread key on. Set before registration.
	skip bool

	p *poller

	ref  atomic.Uint64                 // see refClosing
	done atomic.Pointer[chan struct{}] // made by the first close, before it sets refClosing; closed once the fd is closed

	rd, wr dir

	// srv is the Server serving the connection on demand, nil otherwise.
	// Set once, before the read direction first enters stServe and before
	// the Conn reaches a goroutine of the user's; atomic because the
	// poller, which has the descriptor from accept on, reads it for each
	// event under dispatch=hot (desc.hot).
	srv atomic.Pointer[serverConn]

	// hotw is the wait on the runtime's netpoller of a connection that
	// stays busy, nil while it has none (hot_linux.go): a Server's under
	// dispatch=hot, a Conn's reads under hotread. Stored by the owner (a
	// Server's goroutine running the connection; a Conn's reader, under
	// rd.mu) with armMu held; loaded by nudge's kick, a park and the
	// poller.
	hotw atomic.Pointer[hotWait]
	// busy is, from serveClock, when a Server's handler last returned to
	// a hand-off, or when a Conn's last read park was woken; 0 before. The
	// next within hotTick makes the connection hot. The owner's (a Conn's:
	// under rd.mu). A Conn's is negative while it is held cold, the
	// hold's end negated (hotread=auto with one P: goColdRead, woken).
	busy time.Duration

	// armMu serializes the EPOLL_CTL_MOD calls of a oneShot or
	// levelTriggered descriptor and the stores to armed; armed may be loaded
	// without it as a hint. In edgeTriggered mode taken only by a hot
	// connection's (hot_linux.go), whose registration is armed per park.
	armMu sync.Mutex
	armed atomic.Uint32 // epoll interest currently armed, without flag bits

	// sticky collects, for good, the event bits that announce a condition
	// the kernel can end a transfer early on while something is still
	// pending (stickyEvents), stickyRaw once the fd has been handed to
	// code of the user's, and stickyFailed once a failed epoll_ctl lost
	// the registration (ctl_linux.go). Any bit turns skipping off. The
	// poller stores event bits before it notifies, so an operation that
	// consumed the edge sees them.
	sticky atomic.Uint32
}

// stickyEvents are the event bits that announce what can end a read early
// with something still pending: urgent data (EPOLLPRI: TCP's urgent mark,
// a unix socket's MSG_OOB byte), end of input (EPOLLRDHUP), hang-up and
// errors. See DESIGN.md, "Short reads".
const stickyEvents = unix.EPOLLPRI | unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR

// stickyRaw marks a descriptor whose fd user code has had (RawConn): it may
// have set options that end reads early (SO_PASSCRED on a unix socket read
// by Read, TCP_ULP), so the descriptor no longer skips. A Conn accepted
// from a listener whose socket user code has had gets it too, before it is
// returned (Listener.inherit): accepted sockets inherit the listener's
// options, SO_RCVLOWAT among them. DESIGN.md, "Options a listener passes
// on", lists them. EPOLLET is never reported as an event bit, so the bit
// is free.
const stickyRaw uint32 = unix.EPOLLET

// networks are the networks a Conn can be on (checkNetwork), by desc.net.
var networks = [...]string{"tcp", "tcp4", "tcp6", "unix"}

const netUnix = 3

// networkIndex returns network's index in networks.
func networkIndex(network string) uint8 {
	for i, n := range networks {
		if n == network {
			return uint8(i)
		}
	}
	panic("netpoll: a Conn on network " + network + " (checkNetwork lets only tcp, tcp4, tcp6 and unix through)")
}

type descKind uint8

const (
	kindConn     descKind = iota
	kindListener          // a listening socket's only registration: it owns the fd
	// kindShared is one of several registrations of a listening socket on
	// different pollers (Exclusive, wakeAll): it does not own the fd, which
	// the Listener closes after every registration is gone.
	kindShared
)

func newDesc(fd int, kind descKind) *desc {
	d := &desc{fd: fd, kind: kind}
	d.ref.Store(1)
	return d
}

// incref starts an operation. It fails once Close has begun. It never
// increments a closing word: a transient reference there could hide the
// last real one from decref, or make two callers both see zero.
func (d *desc) incref() error {
	for {
		v := d.ref.Load()
		if v&refClosing != 0 {
			return net.ErrClosed
		}
		if d.ref.CompareAndSwap(v, v+1) {
			return nil
		}
	}
}

// increfOpen takes a reference while the fd is open, even after Close
// began: some other holder's reference keeps it open, and this one then
// keeps it open a little longer (close waits for every reference). It
// fails only when no reference is left after Close, the fd going or gone.
// For a last word on the socket that must reach it as long as anyone may
// still use it (dropInqLocked: user code holding a reference dups it).
func (d *desc) increfOpen() error {
	for {
		v := d.ref.Load()
		if v&refClosing != 0 && v&refMask == 0 {
			return net.ErrClosed
		}
		if d.ref.CompareAndSwap(v, v+1) {
			return nil
		}
	}
}

// decref ends an operation, destroying the descriptor if it was the last
// reference after Close.
func (d *desc) decref() {
	if d.ref.Add(^uint64(0)) == refClosing {
		d.destroy()
	}
}

func (d *desc) closing() bool { return d.ref.Load()&refClosing != 0 }

// close begins Close, wakes every parked operation, and returns once the fd
// is closed. A later close waits for the first to finish, then returns
// net.ErrClosed: Group.Close relies on that to know no descriptor still
// uses a poller it is about to stop.
func (d *desc) close() error {
	d.makeDone()
	for {
		v := d.ref.Load()
		if v&refClosing != 0 {
			<-*d.done.Load()
			return net.ErrClosed
		}
		if d.ref.CompareAndSwap(v, v|refClosing) {
			break
		}
	}
	d.nudge(&d.rd)
	d.nudge(&d.wr)
	d.decref()
	<-*d.done.Load()
	if d.failed() {
		return d.p.ctl.take(d) // set before destroy, which comes before done
	}
	return nil
}

// makeDone makes d.done, unless a concurrent close made it first: before
// refClosing is set, so that whoever sees it set finds the channel.
func (d *desc) makeDone() {
	if d.done.Load() == nil {
		done := make(chan struct{})
		d.done.CompareAndSwap(nil, &done)
	}
}

func (d *desc) destroy() {
	// A failed descriptor has no registration left (fail removed it), so
	// its DEL's ENOENT says nothing; otherwise close returns DEL's error.
	if err := d.p.unregister(d); err != nil && !d.failed() {
		d.p.ctl.set(d, err)
	}
	if d.kind != kindShared {
		unix.Close(d.fd)
	}
	d.closeHot()          // a hot Conn's dup: the socket's last fd (hotread_linux.go)
	close(*d.done.Load()) // made before refClosing was set, and destroy comes after
}

// tokenPool holds the token channels of directions that gave theirs back
// (hand-offs to serve), so that parking again allocates nothing.
var tokenPool = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// tokenChan makes sure dr has its token channel; called with dr.mu held,
// before the direction enters waiting.
func (dr *dir) tokenChan() {
	if dr.token == nil {
		dr.token = tokenPool.Get().(chan struct{})
	}
}

// dropToken gives dr's token channel back to tokenPool; called with dr.mu
// held and nobody parked, so the channel is empty and no waker holds it.
func (dr *dir) dropToken() {
	if dr.token != nil {
		tokenPool.Put(dr.token)
		dr.token = nil
	}
}

// testHookBeforePark, when set by a test, runs after an operation saw EAGAIN
// and found no ready token, just before it moves to waiting: the window in
// which an edge must not be lost.
var testHookBeforePark func(d *desc, dr *dir)

// awaitReady is called with dr.mu held after a syscall in direction dr
// returned EAGAIN (or an acceptor handed its turn off). It returns nil when
// the syscall should be retried, or net.ErrClosed or
// os.ErrDeadlineExceeded; parked says whether it parked (and was woken)
// before it returned nil, rather than consuming an edge that was there.
func (d *desc) awaitReady(dr *dir) (parked bool, err error) {
	for {
		if dr.state.CompareAndSwap(stReady, stEmpty) {
			if !parked {
				d.p.st.op(d.fd, cReadyTokens)
			}
			return parked, nil
		}
		if dr.state.Load() == stServe || dr == &d.rd && d.hotWaiting() {
			// A Read on an idle connection served on demand, from
			// outside its handler: the Server waits for it.
			return parked, ErrServed
		}
		if h := testHookBeforePark; h != nil {
			h(d, dr)
		}
		dr.tokenChan()
		if !dr.state.CompareAndSwap(stEmpty, stWaiting) {
			continue // an edge arrived: consume it above
		}
		// From here on, notify, nudge and close each send one token.
		// Checking closing and the deadline after entering waiting (not
		// before) is what makes a concurrent Close or SetDeadline safe.
		err := d.checkDir(dr)
		timedOut := false
		if err == nil {
			if rearmErr := d.p.armForPark(d, dr); rearmErr != nil {
				err = rearmErr
			}
		}
		if err == nil {
			if dr == &d.rd {
				d.p.st.op(d.fd, cReadParks)
			} else {
				d.p.st.op(d.fd, cWriteParks)
			}
			if lp := d.p.loop; lp != nil && dr == &d.rd {
				if sc := d.srv.Load(); sc != nil {
					lp.passOnPark(sc)
				}
			}
			if iw := d.p.inline; iw != nil {
				timedOut = iw.park(dr)
			} else {
				timedOut = dr.park()
			}
			parked = true
		}
		if err != nil || timedOut {
			if !dr.state.CompareAndSwap(stWaiting, stEmpty) {
				<-dr.token // someone else moved us out of waiting: take their token
			}
			if err != nil {
				return parked, err
			}
		}
		// Woken or timed out: loop to re-check the token, closing and deadline.
		if err := d.checkDir(dr); err != nil {
			return parked, err
		}
	}
}

// park blocks until the wake token arrives or the deadline passes.
func (dr *dir) park() (timedOut bool) {
	dl := dr.deadline.Load()
	if dl == 0 {
		<-dr.token
		return false
	}
	dur := time.Duration(dl - time.Now().UnixNano())
	if dr.timer == nil {
		dr.timer = time.NewTimer(dur)
	} else {
		dr.timer.Reset(dur)
	}
	select {
	case <-dr.token:
		dr.timer.Stop()
		return false
	case <-dr.timer.C:
		return true
	}
}

// checkDir returns the error an operation in direction dr must fail with now.
func (d *desc) checkDir(dr *dir) error {
	if d.closing() {
		return net.ErrClosed
	}
	if d.failed() {
		return d.p.ctl.get(d) // an epoll_ctl error lost the registration (fail)
	}
	if dr.expired() {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// begin starts an operation in direction dr: a reference and the direction's
// lock. The caller must call end.
func (d *desc) begin(dr *dir) error {
	if err := d.incref(); err != nil {
		return err
	}
	dr.mu.Lock()
	if err := d.checkDir(dr); err != nil {
		d.end(dr)
		return err
	}
	return nil
}

func (d *desc) end(dr *dir) {
	if iw := d.p.inline; iw != nil {
		iw.settle() // an arm of the watch port owed (inline_linux.go)
	}
	dr.mu.Unlock()
	d.decref()
}

// io runs op in direction dr until it returns something other than EAGAIN
// or EINTR, parking between tries. op must not retain anything past its call.
//
// size > 0 says op is a plain stream transfer of up to size bytes (Conn's
// Read and Write), the only kind that skips after a short one (d.skip): the
// readiness is consumed just before each syscall, a result of fewer than
// size bytes marks the direction drained, and an operation that finds it
// drained waits before its first syscall. Other operations (connect, raw,
// accept) pass 0: their op may return EAGAIN without a syscall, which a
// consumed edge would leave parked for good.
func (d *desc) transfer(dr *dir, size int, op func() (int, error)) (int, error) {
	stream := size > 0 && d.skip
	if !stream {
		// Whatever op does (a splice from this socket, a sendfile into
		// it) may consume what a short read left drained, and its waits
		// consume edges: the next stream operation makes its syscall.
		dr.drained = false
	}
	if stream && dr.drained {
		dr.drained = false
		if d.sticky.Load() == 0 {
			d.p.st.op(d.fd, cShortSkips)
			parked, err := d.awaitReady(dr)
			if err != nil {
				// awaitReady fails (Close, deadline) without consuming an edge:
				// one that came stays ready. So the direction is still
				// known drained: net/http's background read, ended by a
				// past deadline, must not spend the skip of the next Read.
				dr.drained = true
				return 0, err
			}
			d.woken(dr, size, parked)
		}
	}
	for {
		if stream {
			dr.consume()
		}
		n, err := op()
		if iw := d.p.inline; iw != nil {
			// After the syscall that read what made the role leave
			// (inline_linux.go, the owed bit).
			iw.settle()
		}
		switch err {
		case nil:
			if stream {
				dr.drained = n > 0 && n < size
			}
			return n, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN, errTurnPassed:
			if err == unix.EAGAIN {
				d.p.st.op(d.fd, cEAGAIN)
			}
			parked, err := d.awaitReady(dr)
			if err != nil {
				return 0, err
			}
			d.woken(dr, size, parked)
		default:
			return n, err
		}
	}
}

// stick keeps the sticky bits of event bits e.
func (d *desc) stick(e uint32) {
	if b := e & stickyEvents; d.skip && b != 0 && d.sticky.Load()&b != b {
		d.sticky.Or(b)
	}
}

// exposeRaw turns skipping off for good once user code has the fd, and
// the TCP_INQ a hot connection's reads ahead use (dropInq).
func (d *desc) exposeRaw() {
	if d.skip && d.sticky.Load()&stickyRaw == 0 {
		d.sticky.Or(stickyRaw)
	}
	d.dropInq()
}

// consume drops a ready edge before a syscall that will see whatever the
// edge announced. Only the operation (under mu) moves ready to empty.
func (dr *dir) consume() {
	if dr.state.Load() == stReady {
		dr.state.CompareAndSwap(stReady, stEmpty)
	}
}

// event hands the bits of one epoll event to d's directions and returns how
// many parked operations it woke. Sticky bits are stored first, so an
// operation that consumes the edge also sees them.
func (d *desc) event(e uint32) (woke int) {
	d.stick(e)
	if e&(unix.EPOLLIN|unix.EPOLLPRI|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && d.edge(&d.rd) {
		woke++
	}
	if e&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 && d.notify(&d.wr) {
		woke++
	}
	return woke
}
