package netpoll

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzInlineRole model-checks the role word of wait=inline (inline_linux.go):
// its roles, its armed, owed, passed and lost bits and its generation. The
// input is a script of actions, one a byte (inlineActions), that a
// deterministic driver plays against a model of the goroutines that move
// the word: three operations and the poller's goroutine (the watcher, and
// the loop when it holds the role). The word's transitions are the real
// ones (parkNext, chanLeaveNext, moveOutNext, leaveNext, settleNext,
// retireNext, fireNext), each applied as the CAS that succeeds; the
// syscall a goroutine makes after its CAS (arming or disarming the watch
// port, kicking the epoll fd) is a step of its own, so that others may run
// between the two, as they do; so are a holder's or the loop's last poll
// and its leaving CAS, and the watcher's report of a fire and its CAS. The kernel is modelled as watch_linux.go
// pins it (TestWatchPort): the epoll fd E1 holds each operation's
// readiness, kept until the operation's syscall under mode=lt and until a
// poll reports it under mode=et; an arm with E1 ready fires at once, an
// event on E1 fires an armed port, a reported fire disarms it (ONESHOT),
// and a fire is reported only while E1 still has an event. Goroutines in
// RawRead on E1 are woken by a new event on E1 (an edge), the watcher by a
// fire or by the read deadline retire sets. Every script runs under mode=et
// and mode=lt. The invariants:
//
//   - No stranded event: once the script is played, the model runs every
//     goroutine that can run until none can (no new events, no new parks);
//     then no operation waits, on its channel or holding the role, with
//     its event still in E1: someone polled it, or the port woke the
//     watcher to. (Not checked after stop: the poller is closed then.)
//   - One poller: at most one goroutine is in RawRead on E1 polling, and it
//     holds the role the word names (roleInline for an operation, roleLoop
//     or a lost word for the poller's goroutine).
//   - A takeover moves the generation on by exactly one, so that a CAS made
//     on a word loaded before it fails. This pins the word's contract only:
//     every CAS loop reloads the word at each try and none acts on a word
//     loaded before a syscall, so no interleaving the model reaches depends
//     on the generation.
//   - Nothing arms after stop: once stop retired the word, no transition
//     sets the armed or owed bit again.
//
// Not modelled: a crowd (inlineCrowd waiters: three operations never make
// one), a handler started by an edge (pass; a waiter leaving its channel
// sets passed the same way), deadlines firing (an operation with a deadline
// parks by calling the loop, and its wait ends by an event only), the
// spinning of holders.
//
// TestInlineRoleModelCatchesBrokenMachines shows the seeds catch a word
// broken in each of several ways. To search further:
//
//	cd netpoll && go test -run '^$' -fuzz FuzzInlineRole -fuzztime 1m .
func FuzzInlineRole(f *testing.F) {
	for _, s := range inlineSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		if len(script) > 400 {
			return
		}
		for _, lt := range []bool{false, true} {
			if err := runInlineModel(realRole, script, lt); err != nil {
				t.Fatalf("lt=%v: %v", lt, err)
			}
		}
	})
}

// inlineActions are the script's actions; any other byte b means
// inlineActions[b%len(inlineActions)].
//
//	0 1 2   step operation i: running, it parks (2 with a deadline: it calls
//	        the loop); else its next step (an epoll_ctl or kick after a
//	        CAS, a poll while holding the role if E1 had an edge, leaving
//	        its channel once woken, its syscall and settle point)
//	w       step the poller's goroutine (a fire or deadline on the port,
//	        entering E1, a poll, its epoll_ctl after leaving)
//	a b c   an event for operation i arrives on E1
//	x       the next epoll_ctl on the watch port fails (lose)
//	s       stop
//	.       step the first goroutine that can run
const inlineActions = "012wabcxs."

// inlineSeeds reach the owed window both ways (a readied goroutine
// settling before and after the holder's leaving CAS), takeovers, lost
// ports and stop.
var inlineSeeds = []string{
	"0", "0a0", "00a0", "01a0", "01b0", "01b01", "012", "2c", "2cw", "2cww", "2cwww",
	"01a01w", "01b0w1", "01b00", "01b001", "012c0", "2cwwa", "2awww2", "01b0.a",
	"2cwaw", "2cw0aw", "0x1b0a", "01bx0", "2xcw", "01b0s", "2cws", "0s", "2s",
	"01ab0", "01ba00", "201cww", "012aww", "120bw", "1b1w0aw",
	"2cwww2bww", "0b1a0w", "01b0a1w", "2w0cw", "2w0cww1", "2cww0aww",
	// Found by a random search against the mutants of
	// TestInlineRoleModelCatchesBrokenMachines.
	"10a1bx.", "1b10a", "0a1c", "10a..b010xc", "0c20a", "01b00.s", "c2", "02c0a", "02c.s", "12b.0...cw", "0a0a2.02.0w1", "0a0a2.02.0ww1",
}

// roleMachine is the word's transitions under test: the real ones, or a
// copy broken in one place that TestInlineRoleModelCatchesBrokenMachines
// expects caught.
type roleMachine struct {
	name      string
	park      func(w uint64, deadline bool) (uint64, parkHow)
	chanLeave func(w uint64) (uint64, bool)
	moveOut   func(w, add uint64, lt bool, owe owing) (uint64, bool, bool)
	leave     func(w uint64, lt bool, owe owing) (uint64, bool, bool)
	settle    func(w uint64) (uint64, bool)
	retire    func(w uint64) uint64
	fire      func(w uint64) (uint64, bool, bool)
}

var realRole = roleMachine{"real", parkNext, chanLeaveNext, moveOutNext, leaveNext, settleNext, retireNext, fireNext}

// Where a model goroutine is.
type mstate uint8

const (
	msRun    mstate = iota // an operation running, not waiting
	msEffect               // a syscall after its CAS (eff), then next
	msHold                 // an operation holding the role, in RawRead on E1
	msChan                 // an operation on its channel
	msSettle               // an operation back from its wait: its syscall, then settle
	msWatch                // the watcher, in RawRead on the port
	msEnter                // the poller's goroutine entering RawRead on E1
	msLoop                 // the loop, in RawRead on E1
	msGive                 // out of RawRead on E1 after its last poll: its leaving CAS
	msFired                // the watcher, its port\'s fire reported: its CAS (fireNext)
	msDone                 // the poller's goroutine returned (stop)
)

type meffect uint8

const (
	effNone meffect = iota
	effArm
	effDisarm
	effKick
)

type mgor struct {
	st   mstate
	eff  meffect
	next mstate // after the effect
	poll bool   // in RawRead on E1: an edge came (or just entered): it polls
	tok  bool   // on its channel: its token was sent
	// In msGive: the leaving CAS gives the role up by moveOut (aside: the
	// holder steps aside) or leave, with owe, and goes to after.
	aside bool
	owe   owing
	after mstate
}

type inlineModel struct {
	m  roleMachine
	lt bool

	word uint64
	ops  [3]mgor
	lp   mgor // the poller's goroutine

	pend   [3]bool // E1 holds operation i's event
	stored [3]bool // mode=et: operation i's event was reported while it did not wait (its desc is ready)
	kick   bool    // the kick eventfd's event is in E1
	// The watch port, as the kernel sees it.
	armed, fired bool
	deadline     bool // retire's read deadline on the port
	failNext     bool // the next epoll_ctl on the port fails
	lost         bool // an epoll_ctl on the port failed
	stopped      bool
	steps        int
	trace        strings.Builder
}

func runInlineModel(m roleMachine, script string, lt bool) error {
	md := &inlineModel{m: m, lt: lt, word: roleVacant}
	md.lp.st = msWatch
	for i := 0; i < len(script); i++ {
		a := script[i]
		if strings.IndexByte(inlineActions, a) < 0 {
			a = inlineActions[int(a)%len(inlineActions)]
		}
		fmt.Fprintf(&md.trace, "%c", a)
		if err := md.act(a); err != nil {
			return md.fail(err)
		}
	}
	// Drain: every goroutine that can run runs, with no new event or park.
	for {
		ran, err := md.stepAny()
		if err != nil {
			return md.fail(err)
		}
		if !ran {
			break
		}
		if md.steps > 10000 {
			return md.fail(fmt.Errorf("no rest after 10000 steps (a livelock)"))
		}
	}
	if md.stopped {
		// The poller's goroutine returns, or waits to enter E1 behind a
		// holder that stop's closing of every descriptor would wake.
		if md.lp.st != msDone && md.lp.st != msEffect && md.lp.st != msEnter {
			return md.fail(fmt.Errorf("the poller's goroutine did not return after stop (state %d)", md.lp.st))
		}
		return nil
	}
	for i := range md.ops {
		g := &md.ops[i]
		if g.waiting() && !g.tok && md.pend[i] {
			return md.fail(fmt.Errorf("stranded event: operation %d waits (state %d) with its event in E1 and nobody polls it (word %s, port armed %v fired %v)", i, g.st, wordString(md.word), md.armed, md.fired))
		}
	}
	return nil
}

func (md *inlineModel) fail(err error) error {
	return fmt.Errorf("%w\n\tscript %q (mode lt %v), word %s", err, md.trace.String(), md.lt, wordString(md.word))
}

func wordString(w uint64) string {
	role := [...]string{"loop", "inline", "out", "vacant"}[w&roleMask]
	var b []string
	for _, f := range []struct {
		bit  uint64
		name string
	}{{armedBit, "armed"}, {owedBit, "owed"}, {lostBit, "lost"}, {passBit, "passed"}} {
		if w&f.bit != 0 {
			b = append(b, f.name)
		}
	}
	return fmt.Sprintf("{%s %v gen %d waiters %d}", role, b, (w&genMask)/genUnit, w/waiterUnit)
}

// waiting says whether g is an operation whose direction waits: from its
// park's CAS until it takes its token, holding the role or not. A poll
// sends its token in any of those states, as dir.notify does.
func (g *mgor) waiting() bool {
	switch g.st {
	case msChan, msHold:
		return true
	case msGive:
		return g.aside
	case msEffect:
		return g.next == msChan || g.next == msHold
	}
	return false
}

// e1Ready says whether E1 has an event for a poll, an arm or a fire report.
func (md *inlineModel) e1Ready() bool {
	return md.pend[0] || md.pend[1] || md.pend[2] || md.kick
}

// edge is a new event on E1: the goroutine in RawRead on E1 polls, and an
// armed port fires.
func (md *inlineModel) edge() {
	for i := range md.ops {
		if md.ops[i].st == msHold {
			md.ops[i].poll = true
		}
	}
	if md.lp.st == msLoop {
		md.lp.poll = true
	}
	if md.armed {
		md.fired = true
	}
}

func (md *inlineModel) act(a byte) error {
	switch a {
	case '0', '1', '2':
		_, err := md.stepOp(int(a - '0'))
		return err
	case 'w':
		_, err := md.stepLoop()
		return err
	case 'a', 'b', 'c':
		md.pend[a-'a'] = true
		md.edge()
	case 'x':
		md.failNext = true
	case 's':
		if !md.stopped {
			md.stopped = true
			md.edge() // the stop eventfd, level-triggered: the loop sees it
			md.cas(md.m.retire(md.word))
			md.deadline = true
		}
	case '.':
		_, err := md.stepAny()
		return err
	}
	return nil
}

// cas installs the word of a transition whose CAS succeeded: the model
// runs one goroutine at a time, so every CAS it makes succeeds, on the word
// as it is, as a real CAS loop's last try does. check, after every step,
// tests what must hold of the word.
func (md *inlineModel) cas(next uint64) {
	md.word = next
}

func (md *inlineModel) check() error {
	if md.stopped && md.word&(armedBit|owedBit) != 0 {
		return fmt.Errorf("armed or owed after stop")
	}
	in := 0
	for i := range md.ops {
		if md.ops[i].st == msHold {
			in++
			if md.word&roleMask != roleInline {
				return fmt.Errorf("operation %d polls E1 but the role is %s", i, wordString(md.word))
			}
		}
	}
	if md.lp.st == msLoop {
		in++
		if md.word&roleMask != roleLoop && md.word&lostBit == 0 {
			return fmt.Errorf("the loop polls E1 but the role is %s", wordString(md.word))
		}
	}
	if in > 1 {
		return fmt.Errorf("%d goroutines poll E1 at once", in)
	}
	return nil
}

// stepAny runs the first goroutine that can run.
func (md *inlineModel) stepAny() (bool, error) {
	for i := range md.ops {
		if md.ops[i].st == msRun {
			continue // no new parks
		}
		if ran, err := md.stepOp(i); ran || err != nil {
			return ran, err
		}
	}
	return md.stepLoop()
}

// effect makes g's syscall after its CAS.
func (md *inlineModel) effect(g *mgor) {
	switch g.eff {
	case effArm, effDisarm:
		if md.stopped {
			break // the port is closed: arm and disarm do nothing
		}
		if md.failNext {
			md.failNext = false
			md.lost = true
			md.cas(md.m.retire(md.word)) // lose
			md.deadline = true
			break
		}
		if g.eff == effDisarm {
			md.armed, md.fired = false, false
			break
		}
		md.armed = true
		if md.e1Ready() {
			md.fired = true
		}
	case effKick:
		md.kick = true
		md.edge()
	}
	g.st, g.eff = g.next, effNone
	if g.st == msHold || g.st == msLoop {
		g.poll = true
	}
}

// give is g's leaving CAS, after the poll that ended its RawRead.
func (md *inlineModel) give(g *mgor) {
	w := md.word
	var next uint64
	var arm bool
	if g.aside {
		next, arm, _ = md.m.moveOut(w, waiterUnit, md.lt, g.owe)
	} else {
		next, arm, _ = md.m.leave(w, md.lt, g.owe)
	}
	md.cas(next)
	g.st = g.after
	if arm && w&armedBit == 0 {
		g.st, g.eff, g.next = msEffect, effArm, g.after
	}
}

// poll is a poll of E1 by the goroutine holding the role (self: the
// operation's index, or -1 for the loop): it sends the tokens of waiting
// operations whose events it finds, and returns how many it woke and
// whether self's own event was among them.
func (md *inlineModel) poll(self int) (woke int, own bool) {
	md.kick = false
	for j := range md.ops {
		if !md.pend[j] {
			continue
		}
		if !md.lt {
			md.pend[j] = false
		}
		switch g := &md.ops[j]; {
		case j == self:
			own = true
		case g.waiting() && !g.tok:
			g.tok = true
			woke++
		case !g.waiting() && !md.lt:
			md.stored[j] = true
		}
	}
	return woke, own
}

func (md *inlineModel) stepOp(i int) (bool, error) {
	md.steps++
	g := &md.ops[i]
	switch g.st {
	case msRun:
		if md.stored[i] || md.pend[i] && md.lt {
			// Its syscall finds the event: no park.
			md.stored[i] = false
			g.st = msSettle
			break
		}
		w := md.word
		next, how := md.m.park(w, i == 2)
		md.cas(next)
		g.tok = false
		switch how {
		case parkWaiter:
			g.st, g.tok = msChan, false
		case parkCall:
			g.st, g.tok = msChan, false
			if w&armedBit == 0 {
				g.st, g.eff, g.next = msEffect, effArm, msChan
			}
		case parkHold:
			g.st, g.poll = msHold, true
			if w&armedBit != 0 {
				g.st, g.eff, g.next = msEffect, effDisarm, msHold
			}
		}
	case msEffect:
		md.effect(g)
	case msHold:
		if !g.poll {
			return false, md.check()
		}
		g.poll = false
		woke, own := md.poll(i)
		own = own || g.tok // its token came otherwise
		switch {
		case own:
			md.stored[i] = false
			g.st, g.aside, g.owe, g.after = msGive, false, oweSelf, msSettle
		case woke > 0:
			g.st, g.aside, g.owe, g.after = msGive, true, oweWoken, msChan
		}
	case msGive:
		md.give(g)
	case msChan:
		if !g.tok {
			return false, md.check()
		}
		next, kick := md.m.chanLeave(md.word)
		md.cas(next)
		g.st = msSettle
		if kick {
			g.st, g.eff, g.next = msEffect, effKick, msSettle
		}
	case msSettle:
		// The syscall reads the operation's data, then the settle point.
		if md.lt {
			md.pend[i] = false
		}
		md.stored[i] = false
		w := md.word
		next, ok := md.m.settle(w)
		g.st = msRun
		if ok {
			md.cas(next)
			if w&armedBit == 0 {
				g.st, g.eff, g.next = msEffect, effArm, msRun
			}
		}
	default:
		return false, md.check()
	}
	return true, md.check()
}

func (md *inlineModel) stepLoop() (bool, error) {
	md.steps++
	g := &md.lp
	switch g.st {
	case msWatch:
		switch {
		case md.deadline:
			// RawRead on the port fails at once: stopped, or lost.
			if md.stopped {
				g.st = msDone
			} else {
				g.st = msEnter
			}
		case md.fired:
			md.fired = false
			if !md.e1Ready() {
				break // the kernel re-polls E1 and reports nothing; still armed
			}
			md.armed = false // reported: ONESHOT
			g.st = msFired
		default:
			return false, md.check()
		}
	case msFired:
		// The CAS after the report: others may have moved the word, and
		// armed the port again, in between.
		w := md.word
		next, took, takeover := md.m.fire(w)
		if takeover && (next&genMask)/genUnit != ((w&genMask)/genUnit+1)%(genMask/genUnit+1) {
			return true, fmt.Errorf("a takeover from %s to %s does not move the generation on by one", wordString(w), wordString(next))
		}
		md.cas(next)
		g.st = msWatch
		if took {
			g.st = msEnter
		}
	case msEnter:
		for i := range md.ops {
			if md.ops[i].st == msHold || md.ops[i].st == msEffect && md.ops[i].next == msHold {
				return false, md.check() // RawRead's lock: a holder is inside
			}
		}
		g.st, g.poll = msLoop, true
	case msLoop:
		if !g.poll {
			return false, md.check()
		}
		g.poll = false
		if md.stopped {
			g.st = msDone
			break
		}
		woke, _ := md.poll(-1)
		w := md.word
		if waiters := w / waiterUnit; w&lostBit == 0 && (woke > 0 && waiters < inlineCrowd || waiters == 0) {
			owe := oweNone
			if woke > 0 {
				owe = oweWoken
			}
			g.st, g.aside, g.owe, g.after = msGive, false, owe, msWatch
		}
	case msGive:
		md.give(g)
	case msEffect:
		md.effect(g)
	default:
		return false, md.check()
	}
	return true, md.check()
}
