package netpoll

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzServeRole model-checks the serve role (serverole_linux.go): the
// word that says whether a waitNested poller's loop is held in loop or out
// while its holder runs a Server's handler inline, whether a watcher is
// parked on the watch port, and whether the poller stopped. The input is a
// script of actions, one a byte (serveRoleActions), that a deterministic
// driver plays against a model of the goroutines that move the word: the
// poller's first goroutine (the holder), the watchers the pool makes, the
// goroutines a takeover displaces, and those stop starts for a batch left
// over; and of three served connections, each with its socket, its read
// direction (empty, ready, waiting or serve, moved as desc.edge, dir.consume
// and the hand-off's CAS move it) and its owner. The word's transitions are
// the real ones (srGoOutNext, srComeBackNext, srFireNext,
// srWatchNext, srStopNext), each applied as the CAS that succeeds or fails
// on the word as it is, in the order serveRole.hold, goOut, comeBack, watch
// and becomeWatcher make them: the epoll_ctl after a CAS, making a watcher,
// each read and write of the queue, each poll and each check of the socket
// are steps of their own, so that others run in between as they do.
//
// The kernel is modelled as TestWatchPort pins it: the epoll fd E1 holds an
// event per connection (mode=et: each arrival adds one, a poll takes them
// all), the kick eventfd's and the stop eventfd's (level-triggered: it
// stays); the port, armed, fires at E1's next event, or at once if E1 has
// one (point 2); a fire is reported once (ONESHOT, point 3) and only while
// E1 still has an event; a disarm drops a fire not yet reported (point 4);
// and a fire already on the port's ready list gives no new edge to a later
// arm (point 5), so a goroutine that parks on the port without polling it
// first sleeps through it. RawRead resets the runtime's readiness as it
// begins and calls its callback before it parks, as internal/poll does.
//
// A handler reads what its connection has, then returns (the default), or
// blocks outside netpoll until the script releases it (B, u), or parks in a
// Read on its own connection for more (R), or ends its goroutine (g,
// runtime.Goexit). The invariants, after every step:
//
//   - One holder: at most one goroutine at a time is where only the role's
//     holder may be (polling E1, touching the queue, going out, arming or
//     disarming, stopping), and it is the goroutine that holds the role:
//     the first holder, then each takeover's watcher. A displaced
//     goroutine's go-out, renewal or come-back CAS never succeeds.
//   - One owner: a connection leaves the queue for exactly one run, by one
//     goroutine, and no two goroutines own a connection at once.
//   - Poll first: no goroutine parks on the port before it polled the port
//     in the same RawRead.
//   - Stopped for good: once stop set the stopped bit, no transition sets
//     the out or the watching bit again.
//
// and once the script is played and every goroutine that can run has run
// (no new events; blocked handlers stay blocked), and again after every
// blocked handler is released and all has run again:
//
//   - No stranded event: every open connection with data is owned by a
//     handler blocked outside netpoll; nothing with data waits in serve, in
//     the queue or parked in a Read.
//   - Nothing armed at rest in loop: the port is armed only while the role
//     is out (a come-back disarms it), but after a stale takeover (below).
//   - Out only with its holder: the role is out only while a goroutine runs
//     a handler inline with the word out, which will bring it back.
//   - After stop: the poller stopped, every goroutine exited (but a handler
//     parked in a Read, which the Group's close of its connections wakes),
//     the port is not armed (but after a stale takeover).
//
// Every script runs at GOMAXPROCS=1 and 2 (the machines that keep a batch
// on the role do so at 1 only, as the role first did).
// Not modelled: the lost fallback (a failed epoll_ctl on the port),
// demotion (a demoted connection runs on a worker, the role held in loop),
// Close, deadlines and the idle timer (FuzzServeHandOff checks the hand-off
// against them), short-read skipping (the hand-off always asks the socket),
// adaptive spinning; and the glue of serveRole.watch, which the model runs
// as intended (a won takeover returns true: see takenNotHeld).
//
// The role as first written failed the model at GOMAXPROCS=1, in two
// ways (each a seed), and kept a batch on the role there (one connection
// after another, renewing the out period, now renewNext below):
//
//   - "Bab": a batch of two, the first handler blocks. The second
//     connection waits in the queue, its event taken from E1 by the poll,
//     so the armed port has nothing to fire on: it is stranded until an
//     unrelated event comes (stranded event; TestServeBatchBlockedOneP
//     shows it on a real Server).
//   - "ab000000000000000c111": the holder renews its out period for the
//     second connection of a batch (its CAS succeeds), and the watcher,
//     woken by c, takes the role before the holder reads the queue: both
//     then read and write queue and head, so one may run a connection the
//     other runs, or a slot the other cleared (one holder).
//
// The real role now spreads every batch to workers (serveRole.spread), at
// any GOMAXPROCS.

// One thing the model allows: a watcher that reported a fire in one out
// period may make its CAS in the next (the holder came back and went out
// again meanwhile), a stale takeover; the port that period armed, or is
// about to arm after its CAS, then stays armed in loop, for at most one
// idle fire. Nothing armed at rest in loop is asserted except after a
// stale takeover, until the port is next disarmed or reports a fire.
//
// fixedServeRole is the other change that passes (the batch kept on the
// role, correctly); the mutants of TestServeRoleModelCatchesBrokenMachines
// are made from it and
// show that the seeds catch the role broken in each of several ways. To
// search further:
//
//	cd netpoll && go test -run '^$' -fuzz FuzzServeRole -fuzztime 2m .
func FuzzServeRole(f *testing.F) {
	for _, s := range serveRoleSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		if len(script) > 300 {
			return
		}
		for _, procs := range []int{1, 2} {
			if err := runServeRoleModel(realServeRole, procs, script); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// serveRoleActions are the script's actions; any other byte b means
// serveRoleActions[b%len(serveRoleActions)].
//
//	0-5     step goroutine i (0 is the poller's first), if it can run
//	a b c   data, and its event on E1, arrive for connection i
//	B       the next handler call blocks outside netpoll until released
//	R       the next handler call parks in a Read on its connection for more
//	g       the next handler call ends its goroutine (runtime.Goexit)
//	u       release the handler blocked longest
//	s       stop: the stop eventfd becomes readable (poller.stop)
//	.       step the first goroutine that can run
const serveRoleActions = "012345abcBRgus."

// serveRoleSeeds reach each window with each event: a batch of two and of
// three, an event while the role is out (before and after the arm, while
// the handler runs or blocks or parks in a Read), during the hand-off of a
// connection back to serve (before and after its check of the socket and
// its CAS), between a come-back and its disarm, between a fire's report and
// the watcher's CAS, as a displaced goroutine becomes the watcher or goes
// to the pool, a Goexit with a batch left, and stop in each.
var serveRoleSeeds = []string{
	"", "a", "a.", "a...", "aa", "ab", "abc", "ab..........", "Ba", "Bab", "Ba.....b", "Ba.....b.....",
	"Ba....b.......u", "Ba.....b.......a....u", "Ra", "Ra.....a", "Ra......b", "Rab", "Ba.....a",
	"ga", "gab", "gab......", "gBab", "Bga", "a0a0a0", "a00a00a", "a0000a", "a00000a", "a000000a",
	"a0000000a", "a00000000a", "a000000000a", "a0000000000a", "Ba0000b1111", "Ba00000b1111",
	"Ba000000b1111", "Bab00000001111", "Bab000000011111", "Ba000b", "Ba0000b", "Ba00000b0", "Ba000001b1",
	"Bab.......1111c.......", "Bab0000000111c", "a0s", "as", "Bas", "Ba....s", "Ba.....b....s",
	"Bab.......s", "s", "sa", "Ba.....bu.....s", "Ra....s", "gas", "abs", "Babc.........",
	"BBab.......c........u", "BBabc..........u.......", "RBab......b.......", "aBb.......a......",
	// A batch's renewal, then a takeover before the next connection is
	// taken from the queue; a fire reported in one out period and its CAS
	// made in the next, in loop or out (a stale takeover).
	"ab0000000000000000111", "ab000000000000000c111", "a0000000b11000000001", "a0000000b11000000000000000001",
	// Found by a random search against the mutants of
	// TestServeRoleModelCatchesBrokenMachines.
	"Bbc", "a100Bs", "c100BbB",
}

// serveRoleMachine is the role under test: the real transitions and steps,
// or a copy broken in one place (TestServeRoleModelCatchesBrokenMachines).
type serveRoleMachine struct {
	name  string
	goOut func(w uint64) uint64
	// renew and comeBack are the holder's CAS from the word out (it
	// succeeds, giving next, or fails: the role went on).
	renew    func(word, out uint64) (next uint64, ok bool)
	comeBack func(word, out uint64) (next uint64, ok bool)
	fire     func(w uint64) (uint64, bool)
	watch    func(w uint64) (uint64, bool)
	stop     func(w uint64) uint64

	// Steps, broken or changed.
	nextInLoop     bool // for the next connection of a batch, come back (CAS, disarm) and go out again (CAS, arm)
	kickMore       bool // going out with more of the batch queued, kick E1 after the arm, so that the watcher takes the rest
	spreadAlways   bool // spread a batch to workers whatever GOMAXPROCS is
	spreadAll      bool // above one P, spread all of a batch, the first too
	renewByLoad    bool // the holder stays out for the next connection if a plain load finds the word out unchanged
	noArm          bool // go out without arming the port
	noSummon       bool // go out without making a watcher when w had none
	noPollFirst    bool // the watcher's first callback parks without polling the port
	queueStays     bool // a takeover leaves the queue to the displaced holder
	displacedPolls bool // a holder whose CAS failed polls E1 all the same
	noDisarm       bool // come back without disarming the port
	noKick         bool // a handler's Goexit while its goroutine holds the role out makes no kick
	takenNotHeld   bool // the watcher wins the takeover's CAS but does not go on to hold the role
}

// casExact is the holder's CAS from out: it succeeds only on the word
// exactly as it left it.
func casExact(next func(uint64) uint64) func(word, out uint64) (uint64, bool) {
	return func(word, out uint64) (uint64, bool) {
		if word != out {
			return word, false
		}
		return next(out), true
	}
}

// renewNext is the renewal the role first made: the holder, out, stayed
// out for the next connection of a batch, the port still armed; a CAS from
// the word out.
func renewNext(out uint64) uint64 { return out + srGenUnit }

// realServeRole is serverole_linux.go's: every batch spread to workers, so
// the holder never has a second connection of a batch to run.
var realServeRole = serveRoleMachine{
	name:         "real",
	goOut:        srGoOutNext,
	renew:        casExact(renewNext),
	comeBack:     casExact(srComeBackNext),
	fire:         srFireNext,
	watch:        srWatchNext,
	stop:         srStopNext,
	spreadAlways: true,
	spreadAll:    true,
}

// fixedServeRole keeps a batch on the role at GOMAXPROCS=1 and passes the
// model: the holder comes back (CAS, disarm) before it takes the next
// connection of a batch from the queue, and goes out again for it (CAS,
// arm), so it touches the queue only in loop; going out with more of the
// batch queued, it kicks E1 after the arm, so that the watcher takes the
// role, and the rest of the batch, at once.
var fixedServeRole = func() serveRoleMachine {
	m := realServeRole
	m.name, m.spreadAlways, m.spreadAll, m.nextInLoop, m.kickMore = "fixed", false, false, true, true
	return m
}()

// Where a model goroutine is; each state is the step it makes next.
type rmState uint8

const (
	// Holding the role (serveRole.hold).
	rmTop       rmState = iota // the loop's top: read queue[head], or come back, or poll
	rmPopped                   // clear queue[head], head++, take the connection
	rmGoOut                    // goOut's CAS
	rmSummon                   // goOut: pool.watch, w had no watcher
	rmArm                      // goOut: arm the port
	rmKickMore                 // kickMore: the kick after the arm
	rmSpread                   // spread: the rest of a batch to workers
	rmEnter                    // reset the queue, enter RawRead on E1 (its readiness reset)
	rmPoll                     // pollStep: poll E1
	rmParkE1                   // parked in RawRead on E1
	rmDisarm                   // comeBack's disarm after its CAS
	rmStop                     // serveRole.stop
	rmRenew                    // the renewal's CAS, for the next connection of the batch
	rmNextBack                 // nextInLoop: the come-back's CAS before the next connection
	rmComeBack                 // comeBack's CAS
	rmDisplaced                // becomeWatcher's CAS, or the pool
	// Watching (serveRole.watch).
	rmWEnter // enter RawRead on the port (its readiness reset)
	rmWPoll  // the callback's poll of the port (fired)
	rmWFire  // the takeover's CAS after a fire was reported
	rmWQuit  // the callback's look at quit
	rmWPark  // parked in RawRead on the port
	// Running a connection (serverConn.run).
	rmRun      // the run loop's top
	rmHandOff  // handOff: consume, ask the socket
	rmServe    // handOff: CAS empty -> serve
	rmCall     // the handler: it reads, then as its kind says
	rmBlocked  // the handler blocked outside netpoll
	rmReadPark // the handler's Read for more: data, or CAS empty -> waiting
	rmParked   // parked in that Read
	rmGoexit   // Goexit: finish, and look at the word for the kick
	rmKick     // the kick's write
	rmReturn   // the handler returned: the displaced check
	// Elsewhere.
	rmIdle   // an idle worker in the pool
	rmExited // returned
)

var rmStateNames = [...]string{
	"top", "popped", "goOut", "summon", "arm", "kickMore", "spread", "enter", "poll", "parkE1", "disarm", "stop", "renew",
	"nextBack", "comeBack", "displaced", "wEnter", "wPoll", "wFire", "wQuit", "wPark", "run", "handOff",
	"serve", "call", "blocked", "readPark", "parked", "goexit", "kick", "return", "idle", "exited",
}

// A name for every state: an index out of range does not compile.
var _ = rmStateNames[rmExited]

func (s rmState) String() string { return rmStateNames[s] }

// holding says whether a goroutine in s is where only the role's holder
// may be. The arm after a go-out's CAS is not among them: a watcher that
// reported a fire in the holder's last out period may make its CAS in this
// one before the arm (a stale takeover), and the arm is then one the new
// holder does not need; nor is a kick, which any goroutine may make.
func (s rmState) holding() bool {
	switch s {
	case rmTop, rmPopped, rmGoOut, rmSummon, rmSpread, rmEnter, rmPoll, rmParkE1, rmDisarm, rmStop:
		return true
	}
	return false
}

// What a run returns to when its connection idles.
type rmEnd uint8

const (
	endHold    rmEnd = iota // hold's loop, after sc.run
	endOwn                  // a goroutine of its own (stop's go sc.run): it exits
	endPrivate              // queueStays: the displaced holder's left-over batch
	endPool                 // a worker's job: it goes to the pool
)

// Kinds of handler call.
const (
	callQuick = iota
	callBlock
	callRead
	callGoexit
)

type rmGor struct {
	st  rmState
	out uint64 // the word out, held by hold (0: in loop)
	// In hold: the connection popped, and whether the queue had more.
	pop  int
	more bool
	// Running connection sc: started by an edge (check), a call returned,
	// with the role out inline (sr != nil in run), and what follows.
	sc       int
	check    bool
	returned bool
	inline   bool
	end      rmEnd
	tok      bool   // parked in a Read: its token was sent
	reported uint64 // the word as the watcher's poll reported a fire
	polled   bool   // in RawRead on the port: polled it since entering
	toTop    bool   // nextInLoop: after the disarm, the next connection
	private  []int  // queueStays: the batch a takeover left it
	released bool   // blocked: the script released it
}

// Read direction states, as desc_linux.go's.
const (
	rdEmpty = iota
	rdReady
	rdWaiting
	rdServe
)

const (
	ownNone  = -1 // idle in serve, or closed
	ownQueue = -2 // on the role's queue
)

type serveRoleModel struct {
	m     serveRoleMachine
	procs int // GOMAXPROCS: at 2 or more the holder spreads a batch to workers
	word  uint64
	gs    []*rmGor
	// holder is who holds the role, by the protocol: the first goroutine,
	// then each takeover's watcher; -1 once stopped.
	holder int

	queue []int // the role's queue; -1 is a cleared slot (nil)
	head  int

	data   [3]bool // the socket has unread data
	rd     [3]int  // the read direction's state
	owner  [3]int
	closed [3]bool
	kinds  []int // the next handler calls' kinds

	e1      [3]bool // E1 holds connection i's event
	e1Kick  bool
	e1Stop  bool // the stop eventfd, level-triggered
	rtE1    bool // the runtime's readiness for E1
	armed   bool // the port, as the kernel sees it
	pending bool // E1 on the port's ready list, not yet reported
	rtPort  bool // the runtime's readiness for the port
	// staleArm: since the port was last disarmed or reported, a watcher
	// took the role by a fire it reported in an earlier out period: the
	// out period it took had armed the port, or is about to, for nothing.
	staleArm bool
	// The poller's stop: p.stopped closed by the holder's stop, then
	// shutdown (quit closed, the port's read deadline, the pool stopped).
	stoppedClosed, shutdown bool
	poolDone                bool
	idle                    []int // the pool's idle workers

	takeovers, idleFires int
	steps                int
	trace                strings.Builder
}

func runServeRoleModel(m serveRoleMachine, procs int, script string) error {
	md := &serveRoleModel{m: m, procs: procs, holder: 0}
	md.gs = []*rmGor{{st: rmEnter, sc: -1, pop: -1}} // the jobHold worker
	for i := range md.rd {
		md.rd[i], md.owner[i] = rdServe, ownNone // accepted and handed off: idle
	}
	for i := 0; i < len(script); i++ {
		a := script[i]
		if strings.IndexByte(serveRoleActions, a) < 0 {
			a = serveRoleActions[int(a)%len(serveRoleActions)]
		}
		fmt.Fprintf(&md.trace, "%c", a)
		if err := md.act(a); err != nil {
			return md.fail(err)
		}
	}
	if err := md.drain(); err != nil {
		return md.fail(err)
	}
	if err := md.atRest(); err != nil {
		return md.fail(fmt.Errorf("at rest: %w", err))
	}
	// Every blocked handler returns; all runs again.
	for _, g := range md.gs {
		if g.st == rmBlocked {
			g.released = true
		}
	}
	if err := md.drain(); err != nil {
		return md.fail(err)
	}
	if err := md.atRest(); err != nil {
		return md.fail(fmt.Errorf("at rest, blocked handlers released: %w", err))
	}
	return nil
}

func (md *serveRoleModel) fail(err error) error {
	var gs []string
	for i, g := range md.gs {
		gs = append(gs, fmt.Sprintf("%d:%s", i, g.st))
	}
	return fmt.Errorf("%s GOMAXPROCS=%d: %w\n\tscript %q, word %s, holder %d, goroutines %v, queue %v[%d:], port armed %v pending %v",
		md.m.name, md.procs, err, md.trace.String(), srWordString(md.word), md.holder, gs, md.queue, md.head, md.armed, md.pending)
}

func srWordString(w uint64) string {
	var b []string
	for _, f := range []struct {
		bit  uint64
		name string
	}{{srOut, "out"}, {srWatching, "watching"}, {srStopped, "stopped"}} {
		if w&f.bit != 0 {
			b = append(b, f.name)
		}
	}
	return fmt.Sprintf("{%v gen %d}", b, w/srGenUnit)
}

func (md *serveRoleModel) drain() error {
	for {
		ran, err := md.stepAny()
		if err != nil {
			return err
		}
		if !ran {
			return nil
		}
		if md.steps > 20000 {
			return fmt.Errorf("no rest after 20000 steps (a livelock)")
		}
	}
}

// atRest checks what must hold once nothing can run.
func (md *serveRoleModel) atRest() error {
	if md.word&srStopped != 0 || md.stoppedClosed {
		for i, g := range md.gs {
			if g.st != rmExited && g.st != rmParked && g.st != rmBlocked {
				return fmt.Errorf("after stop goroutine %d did not exit (%s)", i, g.st)
			}
		}
		if !md.shutdown {
			return fmt.Errorf("after stop the poller's shutdown never ran")
		}
		if md.armed && !md.staleArm {
			return fmt.Errorf("the port is armed after stop")
		}
		return nil
	}
	if md.e1Stop {
		return fmt.Errorf("stop was written but nobody polled E1 to see it (stranded stop)")
	}
	for i := range md.data {
		if !md.data[i] || md.closed[i] {
			continue
		}
		if o := md.owner[i]; o >= 0 && md.gs[o].st == rmBlocked && !md.gs[o].released {
			continue
		}
		return fmt.Errorf("stranded event: connection %d has data, direction %d, owner %d, E1 has its event %v, and nobody will serve it",
			i, md.rd[i], md.owner[i], md.e1[i])
	}
	if md.word&srOut == 0 && md.armed && !md.staleArm {
		return fmt.Errorf("the port is armed at rest with the role in loop")
	}
	if md.word&srOut != 0 {
		for _, g := range md.gs {
			if g.inline && g.out == md.word && g.sc >= 0 {
				return nil
			}
		}
		return fmt.Errorf("the role is out at rest, but no goroutine runs a handler with it out (nobody will bring it back)")
	}
	return nil
}

func (md *serveRoleModel) act(a byte) error {
	switch {
	case a >= '0' && a <= '5':
		if i := int(a - '0'); i < len(md.gs) {
			_, err := md.step(i)
			return err
		}
	case a >= 'a' && a <= 'c':
		i := int(a - 'a')
		if !md.closed[i] {
			md.data[i] = true
			md.e1[i] = true
			md.e1Event()
		}
	case a == 'B':
		md.kinds = append(md.kinds, callBlock)
	case a == 'R':
		md.kinds = append(md.kinds, callRead)
	case a == 'g':
		md.kinds = append(md.kinds, callGoexit)
	case a == 'u':
		for _, g := range md.gs {
			if g.st == rmBlocked && !g.released {
				g.released = true
				break
			}
		}
	case a == 's':
		if !md.e1Stop {
			md.e1Stop = true
			md.e1Event()
		}
	case a == '.':
		_, err := md.stepAny()
		return err
	}
	return nil
}

func (md *serveRoleModel) e1Ready() bool {
	return md.e1[0] || md.e1[1] || md.e1[2] || md.e1Kick || md.e1Stop
}

// e1Event is a new event on E1: the runtime readies a goroutine parked in
// E1's RawRead, and an armed port fires, once until it is reported.
func (md *serveRoleModel) e1Event() {
	md.rtE1 = true
	if md.armed && !md.pending {
		md.pending, md.rtPort = true, true
	}
}

// arm is EPOLL_CTL_MOD to EPOLLIN|EPOLLONESHOT: it polls E1 again, and a
// fire still on the port's ready list gives no new edge (point 5).
func (md *serveRoleModel) arm() {
	md.armed = true
	if md.e1Ready() && !md.pending {
		md.pending, md.rtPort = true, true
	}
}

// cas installs a word, checking that stop is for good.
func (md *serveRoleModel) cas(next uint64) error {
	w := md.word
	md.word = next
	if w&srStopped != 0 && (next&^w)&(srOut|srWatching) != 0 {
		return fmt.Errorf("a transition sets %s after stop (from %s)", srWordString(next), srWordString(w))
	}
	return nil
}

// check is what must hold after every step.
func (md *serveRoleModel) check() error {
	n := 0
	for i, g := range md.gs {
		if !g.st.holding() {
			continue
		}
		n++
		if i != md.holder {
			return fmt.Errorf("goroutine %d is where only the holder may be (%s), but the role is goroutine %d's", i, g.st, md.holder)
		}
	}
	if n > 1 {
		return fmt.Errorf("%d goroutines hold the role", n)
	}
	for i, g := range md.gs {
		if g.st == rmWPark && !g.polled {
			return fmt.Errorf("goroutine %d parks on the port without polling it first", i)
		}
	}
	return nil
}

func (md *serveRoleModel) stepAny() (bool, error) {
	for i := range md.gs {
		if ran, err := md.step(i); ran || err != nil {
			return ran, err
		}
	}
	if md.stoppedClosed && !md.shutdown {
		md.shutdownStep()
		return true, md.check()
	}
	return false, nil
}

// shutdownStep is poller.stop's part once the loop has stopped:
// serveRole.shutdown.
func (md *serveRoleModel) shutdownStep() {
	md.shutdown = true
	md.poolDone = true
	for _, i := range md.idle {
		md.gs[i].st = rmExited // the exit job
	}
	md.idle = nil
}

// spawn makes a goroutine in state st.
func (md *serveRoleModel) spawn(st rmState) *rmGor {
	g := &rmGor{st: st, sc: -1, pop: -1}
	md.gs = append(md.gs, g)
	return g
}

// worker is workerPool.give's choice: an idle worker, or a new goroutine.
func (md *serveRoleModel) worker() int {
	if n := len(md.idle); n > 0 && !md.poolDone {
		w := md.idle[n-1]
		md.idle = md.idle[:n-1]
		return w
	}
	md.spawn(rmIdle)
	return len(md.gs) - 1
}

// toPool is workerPool.work after a job: idle, or exit.
func (md *serveRoleModel) toPool(i int) {
	if md.poolDone || len(md.idle) >= maxIdleWorkers {
		md.gs[i].st = rmExited
		return
	}
	md.gs[i].st = rmIdle
	md.idle = append(md.idle, i)
}

// take makes goroutine i the owner of connection c, which it took from the
// queue.
func (md *serveRoleModel) take(i, c int) error {
	if c < 0 {
		return fmt.Errorf("goroutine %d took a cleared queue slot (a nil connection)", i)
	}
	if o := md.owner[c]; o != ownQueue {
		return fmt.Errorf("goroutine %d takes connection %d from the queue, but its owner is %d (a second run)", i, c, o)
	}
	md.owner[c] = i
	return nil
}

// startRun makes goroutine i run connection c, which it owns.
func (md *serveRoleModel) startRun(i, c int, inline bool, end rmEnd) {
	g := md.gs[i]
	g.sc, g.check, g.returned, g.inline, g.end = c, true, false, inline, end
	g.st = rmRun
}

// edge is desc.edge for connection c, from the holder's poll.
func (md *serveRoleModel) edge(c int) {
	if md.closed[c] {
		return // closed: removed from E1
	}
	switch md.rd[c] {
	case rdReady:
	case rdWaiting:
		md.rd[c] = rdReady
		md.gs[md.owner[c]].tok = true
	case rdServe:
		md.rd[c] = rdReady
		md.owner[c] = ownQueue
		md.queue = append(md.queue, c) // serveRole.queued
	default:
		md.rd[c] = rdReady
	}
}

// displaced is where a holder goes when its CAS failed.
func (md *serveRoleModel) displaced(g *rmGor) {
	g.out = 0
	if md.m.displacedPolls {
		g.st = rmEnter
		return
	}
	g.st = rmDisplaced
}

func (md *serveRoleModel) step(i int) (bool, error) {
	g := md.gs[i]
	md.steps++
	switch g.st {
	case rmTop:
		switch {
		case md.head < len(md.queue):
			g.pop, g.st = md.queue[md.head], rmPopped
		case g.out != 0:
			g.st = rmComeBack
		default:
			g.st = rmEnter
		}
	case rmPopped:
		c := g.pop
		if md.head >= len(md.queue) {
			return true, fmt.Errorf("goroutine %d clears queue[%d] of %d: another holder moved the queue under it", i, md.head, len(md.queue))
		}
		md.queue[md.head] = -1
		md.head++
		g.more = md.head < len(md.queue)
		if err := md.take(i, c); err != nil {
			return true, err
		}
		if g.out == 0 {
			g.sc, g.st = c, rmGoOut
			break
		}
		md.startRun(i, c, true, endHold)
	case rmGoOut:
		w := md.word
		next := md.m.goOut(w)
		if err := md.cas(next); err != nil {
			return true, err
		}
		g.out = next
		g.st = rmArm
		if w&srWatching == 0 && !md.m.noSummon {
			g.st = rmSummon
		}
	case rmSummon:
		md.gs[md.worker()].st = rmWEnter
		g.st = rmArm
	case rmArm:
		if !md.m.noArm {
			md.arm()
		}
		if md.m.kickMore && g.more {
			g.st = rmKickMore
			break
		}
		md.startRun(i, g.sc, true, endHold)
	case rmKickMore:
		md.e1Kick = true
		md.e1Event()
		md.startRun(i, g.sc, true, endHold)
	case rmSpread:
		first := md.head + 1
		if md.procs >= 2 && md.m.spreadAll {
			first = md.head // serveRole.spread above one P: all of the batch
		}
		for _, c := range md.queue[first:] {
			w := md.worker()
			if err := md.take(w, c); err != nil {
				return true, err
			}
			md.startRun(w, c, false, endPool)
		}
		md.queue = md.queue[:first]
		g.st = rmTop
	case rmEnter:
		md.queue, md.head = md.queue[:0], 0
		md.rtE1 = false // RawRead: prepareRead
		g.st = rmPoll
	case rmPoll:
		md.e1Kick = false
		for c := range md.e1 {
			if md.e1[c] {
				md.e1[c] = false
				md.edge(c)
			}
		}
		switch {
		case md.e1Stop:
			g.st = rmStop
		case len(md.queue)-md.head >= 2 && (md.procs >= 2 || md.m.spreadAlways):
			g.st = rmSpread
		case md.head < len(md.queue):
			g.st = rmTop
		default:
			g.st = rmParkE1
		}
	case rmParkE1:
		if !md.rtE1 {
			return false, nil
		}
		md.rtE1 = false
		g.st = rmPoll
	case rmStop:
		if err := md.cas(md.m.stop(md.word)); err != nil {
			return true, err
		}
		for _, c := range md.queue[md.head:] {
			if c >= 0 {
				md.spawn(rmRun)
				if err := md.take(len(md.gs)-1, c); err != nil {
					return true, err
				}
				md.startRun(len(md.gs)-1, c, false, endOwn)
			}
		}
		md.queue, md.head = md.queue[:0], 0
		md.holder = -1
		md.stoppedClosed = true
		g.st = rmExited // run returns false: work returns
	case rmRenew, rmNextBack, rmComeBack:
		var next uint64
		var ok bool
		switch {
		case g.st == rmRenew && md.m.renewByLoad:
			next, ok = md.word, md.word == g.out
		case g.st == rmRenew:
			next, ok = md.m.renew(md.word, g.out)
		default:
			next, ok = md.m.comeBack(md.word, g.out)
		}
		if !ok {
			md.displaced(g)
			break
		}
		if i != md.holder {
			return true, fmt.Errorf("goroutine %d's %s CAS succeeded from %s, but the role is goroutine %d's (a displaced holder's CAS must fail)",
				i, g.st, srWordString(md.word), md.holder)
		}
		if err := md.cas(next); err != nil {
			return true, err
		}
		switch g.st {
		case rmRenew:
			g.out, g.st = next, rmTop
		default:
			g.out, g.st, g.toTop = 0, rmDisarm, g.st == rmNextBack
			if md.m.noDisarm {
				g.st = rmEnter
				if g.toTop {
					g.st = rmTop
				}
			}
		}
	case rmDisarm:
		md.armed, md.pending, md.staleArm = false, false, false
		g.st = rmEnter
		if g.toTop {
			g.st = rmTop
		}
	case rmDisplaced:
		if n := len(g.private); n > 0 {
			c := g.private[0]
			g.private = g.private[1:]
			if err := md.take(i, c); err != nil {
				return true, err
			}
			md.startRun(i, c, false, endPrivate)
			break
		}
		w := md.word
		next, ok := md.m.watch(w)
		if !ok {
			md.toPool(i)
			break
		}
		if err := md.cas(next); err != nil {
			return true, err
		}
		g.st = rmWEnter

	case rmWEnter:
		if md.shutdown {
			// The read deadline shutdown set: RawRead fails at once, and
			// quit is closed.
			g.st = rmExited
			break
		}
		md.rtPort, g.polled = false, false
		g.st = rmWPoll
		if md.m.noPollFirst {
			g.st = rmWQuit
		}
	case rmWPoll:
		g.polled = true
		g.st = rmWQuit
		if md.pending {
			md.pending = false
			if md.armed && md.e1Ready() {
				md.armed, md.staleArm = false, false // reported: ONESHOT
				g.st, g.reported = rmWFire, md.word
			}
		}
	case rmWFire:
		w := md.word
		next, took := md.m.fire(w)
		if !took {
			md.idleFires++
			g.st = rmWQuit
			break
		}
		if err := md.cas(next); err != nil {
			return true, err
		}
		md.takeovers++
		old := md.holder
		md.holder = i
		g.out, g.st = 0, rmTop
		if w != g.reported {
			md.staleArm = true
		}
		if md.m.queueStays && old >= 0 {
			md.gs[old].private = append(md.gs[old].private, md.queue[md.head:]...)
			md.queue, md.head = md.queue[:0], 0
		}
		if md.m.takenNotHeld {
			g.st = rmExited
		}
	case rmWQuit:
		g.st = rmWPark
		if md.shutdown {
			g.st = rmExited
		}
	case rmWPark:
		if md.shutdown {
			g.st = rmExited // the read deadline wakes it; quit is closed
			break
		}
		if !md.rtPort {
			return false, md.check()
		}
		md.rtPort = false
		g.st = rmWPoll

	case rmRun:
		g.st = rmCall
		if g.check || g.returned {
			g.st = rmHandOff
		}
	case rmHandOff:
		c := g.sc
		if md.rd[c] == rdReady {
			md.rd[c] = rdEmpty // consume
		}
		g.st = rmServe
		if md.data[c] {
			g.st = rmCall
		}
	case rmServe:
		c := g.sc
		if md.rd[c] != rdEmpty {
			g.st = rmHandOff // an edge since the check: ask again
			break
		}
		md.rd[c], md.owner[c] = rdServe, ownNone
		g.sc = -1
		switch g.end {
		case endHold:
			switch {
			case g.more && md.m.nextInLoop:
				g.st = rmNextBack
			case g.more:
				g.st = rmRenew
			default:
				g.st = rmComeBack
			}
		case endOwn:
			g.st = rmExited
		case endPrivate:
			g.st = rmDisplaced
		case endPool:
			md.toPool(i)
		}
	case rmCall:
		md.data[g.sc] = false
		kind := callQuick
		if len(md.kinds) > 0 {
			kind, md.kinds = md.kinds[0], md.kinds[1:]
		}
		switch kind {
		case callQuick:
			g.st = rmReturn
		case callBlock:
			g.st, g.released = rmBlocked, false
		case callRead:
			g.st = rmReadPark
		case callGoexit:
			g.st = rmGoexit
		}
	case rmBlocked:
		if !g.released {
			return false, nil
		}
		g.st = rmReturn
	case rmReadPark:
		c := g.sc
		switch {
		case md.data[c]:
			md.data[c] = false
			g.st = rmReturn
		case md.rd[c] == rdReady:
			md.rd[c] = rdEmpty // its syscall, after consuming a ready edge
		default:
			md.rd[c], g.tok, g.st = rdWaiting, false, rmParked
		}
	case rmParked:
		if !g.tok {
			return false, nil
		}
		md.data[g.sc] = false
		g.st = rmReturn
	case rmGoexit:
		c := g.sc
		md.closed[c], md.owner[c], g.sc = true, ownNone, -1
		g.st = rmExited
		if g.inline && md.word == g.out && !md.m.noKick {
			g.st = rmKick
		}
	case rmKick:
		md.e1Kick = true
		md.e1Event()
		g.st = rmExited
	case rmReturn:
		if g.inline && md.word != g.out {
			g.inline = false // the rest of the run on a goroutine of its own
		}
		g.returned = true
		g.st = rmRun
	default: // rmIdle, rmExited
		return false, nil
	}
	return true, md.check()
}
