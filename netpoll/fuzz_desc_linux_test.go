package netpoll

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FuzzDescStateMachine model-checks the per-direction state machine of a
// descriptor (desc_linux.go). The input is a script of actions, one a byte
// (see descActions), that a deterministic driver plays against one real
// desc. An operation goroutine runs desc.begin, desc.transfer and desc.end as
// Conn.Read and Conn.Write do, with the syscall replaced by a rendezvous at
// which the script chooses the outcome (data, EAGAIN or an error), and with
// the window between the ready-token check and the park (testHookBeforePark)
// as a second rendezvous. At those points, and while the operation is
// parked, the driver plays the poller (dir.notify), SetDeadline
// (desc.setDeadline) and Close (desc.close). After every action it predicts
// where the operation may get to next and fails if it gets elsewhere, or
// nowhere within a time limit. The invariants:
//
//   - No lost edge: an event after EAGAIN (during the syscall, in the window
//     before the park, or while parked) leads to a retry of the syscall, or
//     to the error of a Close or deadline that came first; never to a park
//     that nobody ends.
//
//   - Exactly one wake per park: no token is ever left in a wake channel
//     while nobody is parked (a second token for one park panics in
//     dir.send, which fails the target too).
//
//   - No wake after close: once close has returned the operation has ended,
//     no direction is waiting, and later events and deadline changes send no
//     token.
//
//   - An operation that meets Close fails with net.ErrClosed, one past its
//     deadline with os.ErrDeadlineExceeded; an operation begun on a closed
//     desc fails at once, without a syscall.
//
//   - Short reads (desc.skip, run with it on and off): an operation that
//     follows a short one in its direction parks without a syscall only if
//     no edge came since the readiness was consumed before that short
//     syscall, and no sticky event (urgent data, EOF, hang-up, error) was
//     ever seen; an operation after a syscall that stopped short with
//     something still pending ('u', announced by a sticky event before or
//     during it, as the kernel does) always makes its syscall.
//
// Only edgeTriggered is modelled: armForPark does nothing there, so the desc
// needs no epoll instance (the other modes' arming runs on real sockets in
// TestModeCounters and TestPingPongStress).
//
// TestDescModelCatchesBrokenMachines shows that the seed corpus catches a
// state machine broken in each of these ways. To search further:
//
//	cd netpoll && go test -run '^$' -fuzz FuzzDescStateMachine -fuzztime 5m .
func FuzzDescStateMachine(f *testing.F) {
	f.Fuzz(func(t *testing.T, script string) {
		for _, m := range []descMachine{realMachine, realMachineNoSkip, realMachineInline} {
			if err := runDescModel(m, script, 10*time.Second); err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
		}
	})
}

// descActions are the script's actions; any other byte b means
// descActions[b%len(descActions)].
//
//	d a x   the pending syscall returns all it was asked for, EAGAIN or
//	        ECONNRESET; elsewhere they advance like '.'
//	h u     the pending syscall returns short: drained (h), or stopped early
//	        with something still pending (u), which a sticky event announced
//	        before (e) or announces now, during the syscall; elsewhere '.'
//	e       an event with sticky bits (EPOLLERR|EPOLLHUP) for both directions
//	.       advance: start a read if idle, leave the before-park window, or
//	        wait out a near deadline while parked
//	o O     start a read (write) if idle; else advance
//	r w b   an event for the read, write or both directions (the poller)
//	f p s z set the current direction's deadline to the far future, the past,
//	        50µs from now, or none
//	c       close, from its own goroutine
const descActions = "daxhuerwbfpszcoO."

// descMachine is the state machine under test: the real one, or a broken
// copy that TestDescModelCatchesBrokenMachines expects the model to catch.
type descMachine struct {
	name        string
	notify      func(*desc, *dir) bool
	setDeadline func(*desc, *dir, time.Time)
	close       func(*desc) error
	stick       func(*desc, uint32)
	transfer    func(d *desc, dr *dir, size int, op func() (int, error)) (int, error)
	skip        bool // the desc skips after short transfers
	// inline runs the desc on a real poller with wait=inline, so that a park
	// waits on the epoll fd itself (inline_linux.go) and the driver's
	// events, deadlines and closes reach it as another goroutine's would:
	// a token, then a kick through the epoll instance.
	inline bool
}

var (
	realMachine       = descMachine{"real", (*desc).notify, (*desc).setDeadline, (*desc).close, (*desc).stick, (*desc).transfer, true, false}
	realMachineNoSkip = descMachine{"real, no skip", (*desc).notify, (*desc).setDeadline, (*desc).close, (*desc).stick, (*desc).transfer, false, false}
	realMachineInline = descMachine{"real, inline", (*desc).notify, (*desc).setDeadline, (*desc).close, (*desc).stick, (*desc).transfer, true, true}
)

// modelSize is what the model's operations ask for: 2, so that 1 is short.
const modelSize = 2

// modelFD marks the model's desc for the before-park hook; no real
// descriptor has a negative fd.
const modelFD = -1

// modelCtl is the epoll_ctl of a model run (ctlHook): the model's desc is
// in no epoll instance, its fd being no real one, so its EPOLL_CTL_DEL
// succeeds here as a registered descriptor's does, and its close returns
// nil. Every other call is made.
func modelCtl(epfd, op, fd int, event *unix.EpollEvent) error {
	if fd == modelFD {
		return nil
	}
	return unix.EpollCtl(epfd, op, fd, event)
}

// modelOutcome is where the operation got to, as a set of bits when predicted.
type modelOutcome uint16

const (
	opAtSyscall modelOutcome = 1 << iota // at the syscall rendezvous
	opAtHook                             // in the window before the park
	opParked                             // its direction is waiting
	opOK                                 // returned the data
	opClosed                             // returned net.ErrClosed
	opDeadline                           // returned os.ErrDeadlineExceeded
	opErrno                              // returned the syscall's ECONNRESET
)

func (o modelOutcome) String() string {
	var s []string
	for i, n := range []string{"syscall", "hook", "parked", "ok", "ErrClosed", "ErrDeadlineExceeded", "ECONNRESET"} {
		if o&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return "{" + strings.Join(s, "|") + "}"
}

// modelDeadline is what the model knows of a direction's deadline.
type modelDeadline uint8

const (
	mdlNone modelDeadline = iota
	mdlFuture
	mdlPast
	mdlSoon
)

// descModel drives one desc through a script.
type descModel struct {
	m       descMachine
	d       *desc
	timeout time.Duration

	req  chan modelOutcome // operation to driver: opAtSyscall or opAtHook
	resp chan byte         // driver to operation: the syscall's result, or leave the hook
	res  chan error        // the operation's result

	running bool         // an operation is running
	at      modelOutcome // where it is: opAtSyscall, opAtHook or opParked
	dr      *dir         // its direction, or the last one's
	ready   [2]bool      // the model's ready token per direction (rd, wr)
	dl      [2]modelDeadline
	soonAt  [2]int64 // a mdlSoon deadline, in unix nanoseconds as the desc keeps it
	closing bool
	closes  []chan error // results of close calls not yet checked
	nCloses int          // close calls made
	closed  bool         // every close has returned
	// wokeByEdge: the parked operation was just woken by an event, so it
	// consumes the token if it retries and keeps it if it fails.
	wokeByEdge bool
	drained    [2]bool // the direction's last syscall was short (skip machines)
	skipping   [2]bool // the operation skipped its first syscall and has made none yet
	sticky     bool    // a sticky event was delivered
	trace      strings.Builder
}

func newDescModel(m descMachine, timeout time.Duration) (*descModel, error) {
	d := newDesc(modelFD, kindConn)
	d.p = &poller{epfd: -1} // edgeTriggered never arms; unregister's EPOLL_CTL_DEL goes to modelCtl
	if m.inline {
		// A real poller, started, with nothing registered: the desc is
		// not in epoll (its fd is not real), so only kicks reach the
		// holder, and unregister's EPOLL_CTL_DEL goes to modelCtl.
		set, err := Config{Experiment: "wait=inline"}.settings()
		if err != nil {
			return nil, err
		}
		p, err := newPoller(0, set)
		if err != nil {
			return nil, err
		}
		if err := p.start(); err != nil {
			p.closeFDs()
			return nil, err
		}
		d.p = p
	}
	d.mode = edgeTriggered
	d.kind = kindShared // destroy closes no fd; nothing reads the kind otherwise, since the desc is never registered
	d.skip = m.skip
	return &descModel{m: m, d: d, timeout: timeout, dr: &d.rd,
		req: make(chan modelOutcome), resp: make(chan byte), res: make(chan error, 1)}, nil
}

// runDescModel plays script against a fresh desc and returns the first
// invariant it saw broken.
func runDescModel(m descMachine, script string, timeout time.Duration) (err error) {
	const maxSteps = 512
	md, err := newDescModel(m, timeout)
	if err != nil {
		return err
	}
	if m.inline {
		defer func() {
			if err == nil {
				md.d.p.stop() // a failed run may have left its operation inside the poller
				return
			}
			// The poller is left running, but its share of the
			// wakeup measurement is given back: while any is held, a
			// goroutine measures W each second through two pipes, and
			// later tests counting their fds (TestSoak) would see them.
			if md.d.p.auto != nil {
				releaseWake()
			}
		}()
	}
	ctl := modelCtl
	ctlHook.Store(&ctl)
	defer ctlHook.Store(nil)
	restore := SetBeforeParkHook(func(fd int) {
		if fd == modelFD {
			md.req <- opAtHook
			<-md.resp
		}
	})
	defer restore()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
		if err != nil {
			err = fmt.Errorf("script %q, trace %s: %w", script, md.trace.String(), err)
			md.release()
		}
	}()
	for i := 0; i < len(script) && i < maxSteps; i++ {
		a := script[i]
		if strings.IndexByte(descActions, a) < 0 {
			a = descActions[int(a)%len(descActions)]
		}
		md.trace.WriteByte(a)
		if err := md.step(a); err != nil {
			return fmt.Errorf("action %d %q: %w", i, a, err)
		}
	}
	md.trace.WriteString("|end")
	return md.finish()
}

// release ends, as far as it can, an operation left at a rendezvous by a
// failed run: it answers with an error so the goroutine returns.
func (md *descModel) release() {
	go func() {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		for {
			select {
			case <-md.req:
				md.resp <- 'x'
			case <-md.res:
				return
			case <-t.C:
				return
			}
		}
	}()
}

func (md *descModel) idx(dr *dir) int {
	if dr == &md.d.wr {
		return 1
	}
	return 0
}

func (md *descModel) step(a byte) error {
	switch a {
	case 'r':
		return md.event(&md.d.rd)
	case 'w':
		return md.event(&md.d.wr)
	case 'b':
		if err := md.event(&md.d.rd); err != nil {
			return err
		}
		return md.event(&md.d.wr)
	case 'f':
		return md.setDeadline(mdlFuture)
	case 'p':
		return md.setDeadline(mdlPast)
	case 's':
		return md.setDeadline(mdlSoon)
	case 'z':
		return md.setDeadline(mdlNone)
	case 'c':
		return md.close()
	case 'e':
		return md.stickyEvent()
	default:
		return md.advance(a)
	}
}

// mayExpire and mustExpire say whether the deadline of dr may have passed,
// or surely has, when the operation next checks it.
func (md *descModel) mayExpire(dr *dir) bool {
	k := md.dl[md.idx(dr)]
	return k == mdlPast || k == mdlSoon
}

func (md *descModel) mustExpire(dr *dir) bool {
	i := md.idx(dr)
	return md.dl[i] == mdlPast || md.dl[i] == mdlSoon && time.Now().UnixNano() >= md.soonAt[i]
}

// afterCheck is where an operation about to check closing and its deadline
// goes: to err, or on to next. It must be called before the operation is
// let go, so that a deadline the model saw pass has passed for it too.
func (md *descModel) afterCheck(next modelOutcome) modelOutcome {
	switch {
	case md.closing:
		return opClosed
	case md.mustExpire(md.dr):
		return opDeadline
	case md.mayExpire(md.dr):
		return next | opDeadline
	}
	return next
}

func (md *descModel) advance(a byte) error {
	switch {
	case !md.running:
		md.dr = &md.d.rd
		if a == 'O' {
			md.dr = &md.d.wr
		}
		i := md.idx(md.dr)
		w := md.afterCheck(opAtSyscall)
		skips := md.m.skip && md.drained[i] && !md.sticky && !md.ready[i]
		if skips {
			// Drained, and no edge since: to the window before the park
			// without a syscall. (With a ready edge it consumes it and
			// makes the syscall; with a sticky bit it makes it at once.)
			w = md.afterCheck(opAtHook)
		}
		md.start()
		if err := md.reach(w); err != nil {
			return err
		}
		if md.at&(opAtSyscall|opAtHook) != 0 {
			md.drained[i] = false // past begin: io has taken the mark
			md.skipping[i] = md.at == opAtHook
		}
		return nil
	case md.at == opAtSyscall:
		i := md.idx(md.dr)
		switch a {
		case 'd':
			md.resp <- 'd'
			md.drained[i] = false
			return md.reach(opOK)
		case 'u':
			if !md.sticky {
				// The kernel announced what stops the read (its wakeup
				// came before the read could see it); the poller
				// delivers it now, during the syscall.
				if err := md.stickyEvent(); err != nil {
					return err
				}
			}
			fallthrough
		case 'h':
			md.resp <- 'h'
			md.drained[i] = md.m.skip
			return md.reach(opOK)
		case 'x':
			md.resp <- 'x'
			return md.reach(opErrno)
		}
		md.resp <- 'a'
		if i := md.idx(md.dr); md.ready[i] {
			md.ready[i] = false // consumed: retry at once
			return md.reach(opAtSyscall)
		}
		return md.reach(opAtHook)
	case md.at == opAtHook:
		w := md.afterCheck(opParked)
		if i := md.idx(md.dr); md.ready[i] {
			md.ready[i] = false // an edge in the window: retry, whatever else happened
			w = opAtSyscall
		}
		md.resp <- '.'
		return md.reach(w)
	default: // opParked
		if md.dl[md.idx(md.dr)] == mdlSoon {
			return md.reach(opDeadline) // the timer ends the park
		}
		return nil
	}
}

// start runs one operation as Conn.Read or Conn.Write does.
func (md *descModel) start() {
	md.running = true
	d, dr := md.d, md.dr
	go func() {
		err := d.begin(dr)
		if err == nil {
			_, err = md.m.transfer(d, dr, modelSize, func() (int, error) {
				md.req <- opAtSyscall
				switch <-md.resp {
				case 'd':
					return modelSize, nil
				case 'h':
					return 1, nil
				case 'x':
					return 0, unix.ECONNRESET
				}
				return 0, unix.EAGAIN
			})
			d.end(dr)
		}
		md.res <- err
	}()
}

// event delivers an edge for dr as the poller does.
func (md *descModel) event(dr *dir) error {
	here := md.running && md.at == opParked && md.dr == dr
	wake := md.afterCheck(opAtSyscall)
	woke := md.m.notify(md.d, dr)
	i := md.idx(dr)
	if !here {
		if woke {
			return fmt.Errorf("an event woke a direction nobody is parked on")
		}
		md.ready[i] = true
		return md.checkIdle(dr, stReady)
	}
	if !woke {
		if md.dl[i] != mdlSoon {
			return fmt.Errorf("an event for a parked direction woke nobody: lost edge")
		}
		// The timer had ended the park; the edge stays as a token.
		md.ready[i] = true
		return md.reach(opDeadline)
	}
	// Woken: it consumes the token and retries, unless its deadline passed.
	md.wokeByEdge = true
	return md.reach(wake)
}

// stickyEvent delivers an event with sticky bits for both directions, as
// the poller does: the bits first, then the edges.
func (md *descModel) stickyEvent() error {
	md.m.stick(md.d, unix.EPOLLERR|unix.EPOLLHUP)
	md.sticky = true
	if err := md.event(&md.d.rd); err != nil {
		return err
	}
	return md.event(&md.d.wr)
}

func (md *descModel) setDeadline(k modelDeadline) error {
	dr := md.dr
	i := md.idx(dr)
	here := md.running && md.at == opParked
	wasSoon := md.dl[i] == mdlSoon
	var t time.Time
	switch k {
	case mdlFuture:
		t = time.Now().Add(time.Hour)
	case mdlPast:
		t = time.Now().Add(-time.Second)
	case mdlSoon:
		t = time.Now().Add(50 * time.Microsecond)
		md.soonAt[i] = t.UnixNano()
	}
	md.m.setDeadline(md.d, dr, t)
	md.dl[i] = k
	if !here {
		return md.checkIdle(dr, 0)
	}
	// The nudge wakes the park; the operation re-checks, finds no token and
	// goes back to the window before the park.
	w := opAtHook
	switch k {
	case mdlPast:
		w = opDeadline
	case mdlSoon:
		w |= opDeadline
	}
	if wasSoon {
		w |= opDeadline // its timer may have ended the park first
	}
	return md.reach(w)
}

func (md *descModel) close() error {
	ch := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- fmt.Errorf("panic in close: %v", p)
			}
		}()
		ch <- md.m.close(md.d)
	}()
	md.closes = append(md.closes, ch)
	md.nCloses++
	if !md.closing {
		// Wait for Close to begin, so the next step sees it.
		start := time.Now()
		for !md.d.closing() {
			if time.Since(start) > md.timeout {
				return fmt.Errorf("close never set the closing flag")
			}
			runtime.Gosched()
		}
		md.closing = true
	}
	if !md.running {
		return md.awaitCloses()
	}
	if md.at == opParked {
		w := opClosed
		if md.mayExpire(md.dr) {
			w |= opDeadline
		}
		return md.reach(w)
	}
	return nil
}

// reach waits for the operation to get to one of the places in w.
func (md *descModel) reach(w modelOutcome) error {
	timer := time.NewTimer(md.timeout)
	defer timer.Stop()
	var got modelOutcome
	var err error
wait:
	for {
		if w&opParked != 0 && md.dr.state.Load() == stWaiting {
			got = opParked
			break
		}
		var timeout <-chan time.Time = timer.C
		var poll chan struct{}
		if w&opParked != 0 {
			poll = make(chan struct{})
			close(poll)
		}
		select {
		case got = <-md.req:
			break wait
		case err = <-md.res:
			switch err {
			case nil:
				got = opOK
			case net.ErrClosed:
				got = opClosed
			case os.ErrDeadlineExceeded:
				got = opDeadline
			case unix.ECONNRESET:
				got = opErrno
			default:
				return fmt.Errorf("operation returned %v", err)
			}
			break wait
		case <-timeout:
			return fmt.Errorf("want the operation to reach %v; after %v it has not (read %s, write %s): lost wake",
				w, md.timeout, stateNames[md.d.rd.state.Load()], stateNames[md.d.wr.state.Load()])
		case <-poll:
			runtime.Gosched()
		}
	}
	fmt.Fprintf(&md.trace, ">%s ", got)
	if got&w == 0 {
		return fmt.Errorf("want the operation to reach %v, it reached %v", w, got)
	}
	md.at = got
	if md.wokeByEdge {
		md.wokeByEdge = false
		md.ready[md.idx(md.dr)] = got != opAtSyscall
	}
	if got == opAtSyscall && md.m.skip {
		md.ready[md.idx(md.dr)] = false // consumed just before the syscall
	}
	if got == opAtSyscall {
		md.skipping[md.idx(md.dr)] = false
	}
	if got&(opClosed|opDeadline) != 0 && md.skipping[md.idx(md.dr)] {
		// A skip that failed without a syscall consumed no edge: the
		// direction stays drained.
		md.skipping[md.idx(md.dr)] = false
		md.drained[md.idx(md.dr)] = true
	}
	switch got {
	case opAtSyscall, opAtHook:
		want := uint32(stEmpty)
		if got == opAtSyscall && md.ready[md.idx(md.dr)] {
			want = stReady
		}
		return md.checkIdle(md.dr, want)
	case opParked:
		return nil
	}
	md.running = false
	if s := md.dr.state.Load(); s == stWaiting || (s == stReady) != md.ready[md.idx(md.dr)] {
		return fmt.Errorf("operation ended with its direction %s, model ready=%v", stateNames[s], md.ready[md.idx(md.dr)])
	}
	if err := md.checkTokens(); err != nil {
		return err
	}
	if md.closing {
		return md.awaitCloses()
	}
	return nil
}

// checkIdle checks dr, which nobody is parked on: no token pending and,
// unless want is 0, the state word equal to want.
func (md *descModel) checkIdle(dr *dir, want uint32) error {
	if s := dr.state.Load(); s == stWaiting || (want != 0 && s != want) {
		return fmt.Errorf("direction %d is %s, want %s", md.idx(dr), stateNames[s], stateNames[want])
	}
	return md.checkTokens()
}

// checkTokens checks that no wake token is pending: called only when
// nobody is parked, so a token would be a wake for no park.
func (md *descModel) checkTokens() error {
	for i, dr := range []*dir{&md.d.rd, &md.d.wr} {
		if n := len(dr.token); n != 0 {
			return fmt.Errorf("direction %d holds %d wake token(s) with nobody parked", i, n)
		}
	}
	return nil
}

// awaitCloses waits for every close call, once no operation holds the desc:
// the first returns nil, the others net.ErrClosed; then the fd is gone and
// nothing is left to wake.
func (md *descModel) awaitCloses() error {
	timer := time.NewTimer(md.timeout)
	defer timer.Stop()
	first := md.nCloses - len(md.closes)
	for i, ch := range md.closes {
		select {
		case err := <-ch:
			if first+i == 0 && err != nil {
				return fmt.Errorf("first close returned %v, want nil", err)
			}
			if first+i > 0 && err != net.ErrClosed {
				return fmt.Errorf("close %d returned %v, want net.ErrClosed", first+i, err)
			}
		case <-timer.C:
			return fmt.Errorf("close %d has not returned after %v with no operation running", i, md.timeout)
		}
	}
	md.closes = nil
	md.closed = true
	select {
	case <-*md.d.done.Load():
	default:
		return fmt.Errorf("close returned before the desc was destroyed")
	}
	if r := md.d.ref.Load(); r != refClosing {
		return fmt.Errorf("reference word %#x after close, want closing with no references", r)
	}
	for _, dr := range []*dir{&md.d.rd, &md.d.wr} {
		if dr.state.Load() == stWaiting {
			return fmt.Errorf("a direction is still waiting after close returned")
		}
	}
	return md.checkTokens()
}

// finish closes the desc if the script did not, drives a running operation
// to its end, and checks that nothing wakes after close returned.
func (md *descModel) finish() error {
	if !md.closing {
		if err := md.close(); err != nil {
			return err
		}
	}
	for i := 0; md.running; i++ {
		if i > 8 {
			return fmt.Errorf("operation still running after close and %d steps", i)
		}
		if err := md.advance('a'); err != nil {
			return err
		}
	}
	if !md.closed {
		if err := md.awaitCloses(); err != nil {
			return err
		}
	}
	// The poller may still deliver events for a closed desc, and
	// SetDeadline may race with Close: neither may send a token now.
	for _, dr := range []*dir{&md.d.rd, &md.d.wr} {
		md.m.notify(md.d, dr)
		md.m.setDeadline(md.d, dr, time.Now().Add(-time.Second))
		md.m.notify(md.d, dr)
	}
	return md.checkTokens()
}
