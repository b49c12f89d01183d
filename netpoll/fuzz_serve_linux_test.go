package netpoll

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FuzzServeHandOff model-checks the idle hand-off of on-demand serving
// (handoff_linux.go, the stServe rows of desc_linux.go's table). The input
// is a script of actions, one a byte (serveActions), that a driver plays
// against one real served connection: a real Server, serverConn, desc and
// run loop, with the socket replaced by a model queue. The handler reads
// through desc.transfer as Conn.Read does (up to 2 bytes, so 1 is short),
// and the hand-off's socket check answers from the queue. Both windows of
// the hand-off (testHookHandOff: before entering serve, and in serve
// before Close and the deadline are checked) are rendezvous at which the
// script may bring data and its edge, an edge held back by the poller, a
// past deadline, Close, or the idle timer of Server.IdleTimeout (an hour,
// so it fires only when the script says: the wait's end, or a fire for an
// old wait). The invariants:
//
//   - Nothing stranded: once the script is played and every held edge
//     delivered, the connection rests idle (stServe, no goroutine) with
//     nothing queued, or is closed.
//   - No goroutine held while idle: it never rests with a handler parked
//     in Read and nothing queued (a start by a stale edge must ask the
//     socket first).
//   - One owner: at most one handler runs, and at most one goroutine is in
//     a hand-off, at any moment.
//   - Close and a past deadline end the wait exactly once: StateClosed is
//     reported once, no handler is called after it or runs during it, and
//     a Close always gets there.
//   - The idle timeout closes only a connection whose wait is over, and
//     leaves no timer running once the connection is closed.
//
// Only edgeTriggered is modelled (armForPark does nothing there, so the
// desc needs no epoll instance); the other modes run on real sockets in
// TestServeHandOffWindows and TestServeIdleEvents.
// TestServeModelCatchesBrokenMachines shows the seeds catch a hand-off
// broken in each of the ways golang/go#15735's objections name. To search
// further:
//
//	cd netpoll && go test -run '^$' -fuzz FuzzServeHandOff -fuzztime 2m .
func FuzzServeHandOff(f *testing.F) {
	for _, s := range serveSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		for _, m := range []serveMachine{realServe, realServeNoSkip} {
			if err := runServeModel(m, script, 5*time.Second); err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
		}
	})
}

// serveActions are the script's actions; any other byte b means
// serveActions[b%len(serveActions)].
//
//	d   one byte arrives, and its edge reaches the descriptor at once
//	D   three bytes arrive with one edge (a full Read leaves one queued)
//	q   one byte arrives, and the poller holds its edge back
//	e   the poller delivers one held edge (perhaps for data already read: stale)
//	t   the read deadline is set in the past
//	c   Close, from its own goroutine
//	.   let the goroutine at a hand-off window go on
//	i   the wait's idle deadline passes and the idle timer fires (expire, on
//	    a goroutine of its own, as time.AfterFunc runs it)
//	S   a fire for an old wait: the timer's function, having found an idle
//	    deadline passed that a later hand-off has since replaced, tries to
//	    take the connection (fire)
const serveActions = "dDqetc.iS"

// serveSeeds reach each window with each event, and the stale edge.
var serveSeeds = []string{
	"d..", "D..", "dd..", "d.d.", "d..d..", "D.d.", "qd..e", "qd..e..", "q.d..e..",
	"dc", "d.c", "d..c", "dt", "d.t", "d..t", "t", "c", "qe..", "d.q.e..",
	"dDqe.t.c", "dq.e.", "D.q..e..c", "d.e", "dqt..",
	"i", "S", "di..", "d.i.", "d..i", "dS..", "d.S..", "d..S..", "qd..Se..", "d..qie",
	"t.i", "d..S..i", "D.i..", "d.ci.", "ic", "Sc", "d..t.S.",
}

// serveMachine is the hand-off under test: the real one, or one broken on
// purpose that TestServeModelCatchesBrokenMachines expects caught.
type serveMachine struct {
	name   string
	skip   bool                     // the desc skips after short transfers
	notify func(*desc, *dir) bool   // the poller's edge
	close  func(*desc) error        // Close
	check  func(queued int) bool    // the socket check's answer
	window func(dr *dir, at string) // runs in each window, after the script's actions there
	fire   func(*serverConn)        // the idle timer's take ('i', 'S'); nil: serverConn.fire
}

var (
	realServe       = serveMachine{name: "real", skip: true, notify: (*desc).notify, close: (*desc).close, check: func(q int) bool { return q > 0 }}
	realServeNoSkip = serveMachine{name: "real, no skip", notify: (*desc).notify, close: (*desc).close, check: func(q int) bool { return q > 0 }}
)

// serveModel drives one served connection through a script.
type serveModel struct {
	m       serveMachine
	s       *Server
	sc      *serverConn
	d       *desc
	timeout time.Duration

	hooks chan string   // a goroutine arrived at a window ("before-serve", "in-serve")
	leave chan struct{} // let it go on
	at    string        // the window a goroutine waits at, or ""
	// tail: a hand-off was let go from a window and may still be on
	// its way, until handOffs moves past tailOffs.
	tail     bool
	tailOffs uint64

	mu        sync.Mutex // guards queued, read
	queued    int
	read      int
	sent      int
	held      int // edges held back by the poller
	closeErrs chan error
	closed    bool // Close was called

	inHandler atomic.Int32
	calls     atomic.Int64
	finishes  atomic.Int64
	afterEnd  atomic.Bool // a handler was called after StateClosed
	overlap   atomic.Bool // two handlers, or two goroutines in windows, at once
	inWindow  atomic.Int32
	firing    atomic.Int32 // the script's idle timer goroutines ('i', 'S') not done
	// closedRunning: StateClosed came while a handler ran. earlyIdle:
	// the idle timeout closed the connection with its wait not over.
	closedRunning, earlyIdle atomic.Bool
	trace                    strings.Builder
}

func newServeModel(m serveMachine, timeout time.Duration) *serveModel {
	md := &serveModel{m: m, timeout: timeout, hooks: make(chan string, 2), leave: make(chan struct{}), closeErrs: make(chan error, 4)}
	d := newDesc(modelFD, kindConn)
	d.p = &poller{epfd: -1} // edgeTriggered never arms; unregister's EPOLL_CTL_DEL goes to modelCtl
	d.mode = edgeTriggered
	d.kind = kindShared // destroy closes no fd; nothing reads the kind otherwise, since the desc is never registered
	d.skip = m.skip
	md.d = d
	md.s = &Server{
		Handler:     HandlerFunc(md.handler),
		IdleTimeout: time.Hour,
		ConnState: func(_ net.Conn, st ConnState) {
			if st != StateClosed {
				return
			}
			if md.inHandler.Load() != 0 {
				md.closedRunning.Store(true)
			}
			// The idle timeout counts before it closes; only the
			// owner stores the idle deadline, and the script only
			// moves it to the past.
			if md.s.stats.idleTimeouts.Load() > 0 && md.sc.timer.Load().idle.Load() > time.Now().UnixNano() {
				md.earlyIdle.Store(true)
			}
			md.finishes.Add(1)
		},
	}
	md.sc = &serverConn{s: md.s, c: &Conn{d: d}, h: &md.s.Handler}
	d.srv.Store(md.sc)
	md.s.add(md.sc)
	return md
}

// handler is the model's: one Read, as Conn.Read makes it, of up to 2
// bytes from the queue; a Read error is returned (it closes).
func (md *serveModel) handler(net.Conn) error {
	if md.inHandler.Add(1) > 1 {
		md.overlap.Store(true)
	}
	defer md.inHandler.Add(-1)
	if md.finishes.Load() > 0 {
		md.afterEnd.Store(true)
	}
	md.calls.Add(1)
	d := md.d
	if err := d.begin(&d.rd); err != nil {
		return err
	}
	defer d.end(&d.rd)
	n, err := d.transfer(&d.rd, 2, func() (int, error) {
		md.mu.Lock()
		defer md.mu.Unlock()
		if md.queued == 0 {
			return 0, unix.EAGAIN
		}
		n := min(md.queued, 2)
		md.queued -= n
		md.read += n
		return n, nil
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return io.EOF
	}
	return nil
}

// window is the hand-off hook: a rendezvous with the driver.
func (md *serveModel) window(sc *serverConn, at handOffPoint) {
	if sc != md.sc {
		return
	}
	if md.inWindow.Add(1) > 1 {
		md.overlap.Store(true)
	}
	name := [...]string{hookBeforeServe: "before-serve", hookInServe: "in-serve"}[at]
	md.hooks <- name
	<-md.leave
	if w := md.m.window; w != nil {
		w(&md.d.rd, name)
	}
	md.inWindow.Add(-1)
}

func runServeModel(m serveMachine, script string, timeout time.Duration) (err error) {
	const maxSteps = 256
	md := newServeModel(m, timeout)
	// The accept's hand-off, before the hooks: the connection starts idle.
	if idle, err := md.sc.handOff(false); err != nil || !idle {
		return fmt.Errorf("the first hand-off: idle %v, %v", idle, err)
	}
	ctl := modelCtl
	ctlHook.Store(&ctl)
	defer ctlHook.Store(nil)
	hook := md.window
	testHookHandOff.Store(&hook)
	defer testHookHandOff.Store(nil)
	check := func(d *desc) (bool, error) {
		md.mu.Lock()
		defer md.mu.Unlock()
		return md.m.check(md.queued), nil
	}
	testHookReadable.Store(&check)
	defer testHookReadable.Store(nil)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
		if err != nil {
			err = fmt.Errorf("script %q, trace %s: %w", script, md.trace.String(), err)
		}
		md.release()
	}()
	for i := 0; i < len(script) && i < maxSteps; i++ {
		a := script[i]
		if strings.IndexByte(serveActions, a) < 0 {
			a = serveActions[int(a)%len(serveActions)]
		}
		md.trace.WriteByte(a)
		if err := md.step(a); err != nil {
			return fmt.Errorf("action %d %q: %w", i, a, err)
		}
		if err := md.invariants(); err != nil {
			return fmt.Errorf("after action %d %q: %w", i, a, err)
		}
	}
	md.trace.WriteString("|end")
	return md.finish()
}

func (md *serveModel) step(a byte) error {
	switch a {
	case 'd', 'D', 'q':
		n := map[byte]int{'d': 1, 'D': 3, 'q': 1}[a]
		md.mu.Lock()
		md.queued += n
		md.mu.Unlock()
		md.sent += n
		if a == 'q' {
			md.held++
			return nil
		}
		md.m.notify(md.d, &md.d.rd)
	case 'e':
		if md.held == 0 {
			return nil
		}
		md.held--
		md.m.notify(md.d, &md.d.rd)
	case 't':
		md.d.setDeadline(&md.d.rd, time.Now().Add(-time.Second))
	case 'c':
		md.closed = true
		go func() { md.closeErrs <- md.m.close(md.d) }()
		// Close has begun before the next action (it may wait for a
		// hand-off's reference to finish).
		if !md.await(func() bool { return md.d.closing() }) {
			return errors.New("Close never began")
		}
	case 'i':
		md.sc.timer.Load().idle.Store(1) // made by the first hand-off (IdleTimeout)
		md.goFire(func(sc *serverConn) {
			if sc.due() != dueNothing {
				md.fire(sc)
			}
		})
	case 'S':
		md.goFire(md.fire)
	case '.':
		if md.at == "" {
			return nil
		}
		// A released hand-off rests in serve only once it has counted
		// itself (its last act); until then serve is a window's.
		md.tail, md.tailOffs = true, md.s.stats.handOffs.Load()
		md.at = ""
		md.leave <- struct{}{}
	}
	return md.settle()
}

// goFire runs f on a goroutine of its own, as time.AfterFunc runs the idle
// timer's function, and counts it until it returns.
func (md *serveModel) goFire(f func(*serverConn)) {
	md.firing.Add(1)
	go func() {
		defer md.firing.Add(-1)
		f(md.sc)
	}()
}

// fire is the machine's take of the idle timer.
func (md *serveModel) fire(sc *serverConn) {
	if f := md.m.fire; f != nil {
		f(sc)
		return
	}
	sc.fire()
}

// settle waits until the connection rests: a goroutine at a window, a
// handler parked in Read, closed, or idle in serve with no hand-off or
// script's timer going on (the hand-off counted it, or nothing was
// started) and its wait not over (a past idle deadline in serve has a
// fire coming: the script's, or the real timer a hand-off armed).
func (md *serveModel) settle() error {
	if md.at != "" {
		return nil // it waits for '.'
	}
	deadline := time.Now().Add(md.timeout)
	stable := 0
	for time.Now().Before(deadline) {
		select {
		case at := <-md.hooks:
			md.at = at
			return nil
		default:
		}
		if md.resting() {
			if stable++; stable > 200 {
				return nil
			}
		} else {
			stable = 0
		}
		runtime.Gosched()
	}
	return fmt.Errorf("the connection never rested: read state %d, %d in the handler, %d finishes", md.d.rd.state.Load(), md.inHandler.Load(), md.finishes.Load())
}

func (md *serveModel) resting() bool {
	st := md.d.rd.state.Load()
	switch {
	case md.finishes.Load() > 0 && md.inHandler.Load() == 0:
		return true
	case st == stServe && md.inHandler.Load() == 0 && md.inWindow.Load() == 0 && md.firing.Load() == 0:
		if md.sc.timer.Load().idle.Load() <= time.Now().UnixNano() {
			return false
		}
		return !md.tail || md.s.stats.handOffs.Load() != md.tailOffs
	case st == stWaiting && md.inHandler.Load() == 1:
		return true // parked in Read
	}
	return false
}

func (md *serveModel) invariants() error {
	switch {
	case md.overlap.Load():
		return errors.New("two owners: two handlers, or two goroutines in hand-off windows, at once")
	case md.finishes.Load() > 1:
		return fmt.Errorf("StateClosed reported %d times", md.finishes.Load())
	case md.s.stats.conns.Load() < 0:
		// setState reports a state once, so a second finish shows here.
		return errors.New("finished twice: two owners")
	case md.afterEnd.Load():
		return errors.New("a handler was called after StateClosed")
	case md.closedRunning.Load():
		return errors.New("StateClosed while a handler ran: two owners")
	case md.earlyIdle.Load():
		return errors.New("closed by the idle timeout with its wait not over")
	}
	return nil
}

// finish delivers the held edges, lets every window go, and checks where
// the connection rests; then closes it (if the script did not) and checks
// it ends exactly once.
func (md *serveModel) finish() error {
	for md.at != "" || md.held > 0 {
		a := byte('.')
		if md.at == "" {
			a = 'e'
		}
		if err := md.step(a); err != nil {
			return err
		}
		if err := md.invariants(); err != nil {
			return err
		}
	}
	md.mu.Lock()
	queued := md.queued
	md.mu.Unlock()
	if md.finishes.Load() == 0 && !md.closed {
		st := md.d.rd.state.Load()
		switch {
		case st == stServe && queued > 0:
			return fmt.Errorf("stranded: idle with %d bytes queued", queued)
		case st == stWaiting && queued == 0:
			return errors.New("a goroutine held while idle: a handler parked in Read with nothing queued")
		case st != stServe && st != stWaiting:
			return fmt.Errorf("rests in read state %d", st)
		}
		md.closed = true
		go func() { md.closeErrs <- md.m.close(md.d) }()
		if !md.await(func() bool { return md.d.closing() }) {
			return errors.New("Close never began")
		}
	}
	// Close ends the connection, perhaps through hand-off windows.
	for md.await(func() bool { return md.finishes.Load() > 0 || md.at != "" || len(md.hooks) > 0 }) && md.finishes.Load() == 0 {
		if md.at == "" {
			md.at = <-md.hooks
		}
		if err := md.step('.'); err != nil {
			return err
		}
	}
	if !md.await(func() bool { return md.finishes.Load() > 0 && md.inHandler.Load() == 0 }) {
		return errors.New("Close never finished the connection")
	}
	// A second owner would finish too, once the fd is closed: let every
	// goroutine that could get there do so.
	last, still := md.finishes.Load(), 0
	for still < 500 {
		if n := md.finishes.Load(); n != last {
			last, still = n, 0
		}
		still++
		runtime.Gosched()
	}
	if err := md.invariants(); err != nil {
		return err
	}
	if it := md.sc.timer.Load(); it != nil {
		it.mu.Lock()
		running := it.t != nil && it.t.Stop()
		it.mu.Unlock()
		if running {
			return errors.New("an idle timer left running after the connection closed")
		}
	}
	if md.read+queued != md.sent {
		return fmt.Errorf("%d bytes read and %d queued of %d sent", md.read, queued, md.sent)
	}
	return nil
}

// await yields until cond holds, or the model's time limit.
func (md *serveModel) await(cond func() bool) bool {
	deadline := time.Now().Add(md.timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
	return true
}

// release lets go, as far as it can, goroutines a failed run left at a
// window, so they end.
func (md *serveModel) release() {
	go func() {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		for {
			select {
			case md.leave <- struct{}{}:
			case <-md.hooks:
			case <-t.C:
				return
			}
		}
	}()
}
