package netpoll

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Inline dispatch: waitNested's loop as a role that passes between
// goroutines, so that a Server's handler runs on the goroutine the runtime
// woke.
//
// waitNested's loop is one goroutine in RawRead on the epoll fd (E1). Had
// it started a goroutine for each connection a poll found ready (go
// sc.run), every request would cost a goroutine start, whose wakep wakes a
// second thread whenever a P is idle: the thread the kernel woke runs the
// poller, another runs the handler. Here the goroutine that polled runs
// the handler itself. While it does ("the role is out"), nobody polls E1,
// so it arms the poller's watch port first (watch_linux.go): the first
// event E1 gets while the role is out wakes the watcher, a goroutine
// parked on the port, through the runtime, on the thread the runtime wakes
// for it, as package net's reader would be woken; the watcher takes the
// role (a takeover) and polls. The goroutine that was out keeps the
// connection it runs: a handler parked in a Read on its own connection is
// woken by the new holder like any other operation, and when it returns,
// its goroutine finds the role taken and becomes the next watcher, or goes
// to the pool.
//
// This is the watchdog: it fires on events, not on time. A handler that
// runs long or blocks (in netpoll, on a mutex, in a call through package
// net, in a sleep) holds up nothing once something else needs polling: the
// role passes at the first event that comes while it is out, within one
// wakeup of the runtime's, and with no event, nothing waits. It costs two
// EPOLL_CTL_MOD per out period (arm and disarm) and no wakeup when no event
// comes, where a timer would cost one per period.
//
// The role is one word:
//
//	bit 0      out: the holder runs a handler and the port is armed (or
//	           its arm is under way by the holder)
//	bit 1      watching: a goroutine is the watcher (parked on the port,
//	           or on its way there)
//	bit 2      stopped: the holder saw the stop eventfd; nobody holds the
//	           role from then on
//	bits 3-63  gen: +1 at every go-out and every takeover, so that a
//	           displaced holder's return CAS fails
//
// Invariants: one goroutine holds the role (the CAS winner of a go-out's
// return or a takeover), and only it polls E1, touches the queue, the
// pollStep and the port's arm and disarm; out implies armed, so an event
// that comes while the role is out wakes the watcher; whoever enters
// RawRead, on E1 or on the port, polls before it parks (watch_linux.go,
// point 5); a connection on the queue is owned by the role, and leaves it
// for exactly one run (inline, or on a worker).
const (
	srOut      uint64 = 1 << 0
	srWatching uint64 = 1 << 1
	srStopped  uint64 = 1 << 2
	srGenUnit  uint64 = 1 << 3
)

// The word's transitions, as pure functions of the word loaded: the CAS
// loops call them, and FuzzServeRole drives them through interleavings.

// srGoOutNext: the holder, in loop, goes out (the caller arms the port, and
// makes a watcher if w had none).
func srGoOutNext(w uint64) uint64 { return (w | srOut | srWatching) + srGenUnit }

// srComeBackNext: the holder comes back from out (the caller disarms); CAS
// from the word out, which fails if the watcher took the role.
func srComeBackNext(out uint64) uint64 { return out &^ srOut }

// srFireNext is the watcher's transition after the port reported a fire:
// took, a takeover (the watcher holds the role, and nobody watches); else
// an idle fire (the role is in loop: the holder came back).
func srFireNext(w uint64) (next uint64, took bool) {
	if w&srOut == 0 {
		return w, false
	}
	return (w &^ (srOut | srWatching)) + srGenUnit, true
}

// srWatchNext: a displaced goroutine becomes the watcher, unless one is or
// the poller stopped.
func srWatchNext(w uint64) (next uint64, ok bool) {
	if w&(srWatching|srStopped) != 0 {
		return w, false
	}
	return w | srWatching, true
}

// srStopNext: the holder saw the stop eventfd.
func srStopNext(w uint64) uint64 { return w | srStopped }

// Demotion. A connection whose handler blocked (it held the role out when
// the watcher took it, and went on for demoteAfter or more after the
// takeover; or, on a worker, a call that took demoteAfter or more) runs its
// next calls on a worker, a goroutine of its own, until demoteRuns calls in
// a row have returned in less than demoteAfter. An inline call that blocks
// costs a takeover, which is a wakeup, and a watcher to replace the one
// that took the role; a worker call costs a hop. Both are a wakeup's order,
// so the hysteresis is short: a connection that blocks at least every
// fourth call stays on workers. demoteAfter is ten wakeup round trips and
// more on the machines measured (7-100 µs), so that a call slowed down by
// one wakeup is not called blocked.
const (
	demoteAfter = 100 * time.Microsecond
	demoteRuns  = 4
)

// testHookServeClock, when set by a test, is the clock demotion reads, so
// that which calls count as blocked does not depend on the machine's speed.
var testHookServeClock atomic.Pointer[func() time.Duration]

// serveClock is the clock demotion reads: the monotonic clock, or a test's.
// It is read on the paths off the inline fast path only: a takeover, a
// displaced return, a call on a worker.
func serveClock() time.Duration {
	if h := testHookServeClock.Load(); h != nil {
		return (*h)()
	}
	return monoNow()
}

// testHookServePoll, when set by a test, runs before each poll the role's
// holder makes.
var testHookServePoll atomic.Pointer[func()]

// serveRole is a waitNested poller's loop as a role (above).
type serveRole struct {
	p    *poller
	word atomic.Uint64
	port *watchPort
	rc   syscall.RawConn // E1's
	file *os.File        // E1's, closed by poller.stop once the loop has stopped
	// kickfd is an eventfd in E1, edge-triggered: written by a goroutine
	// that exits (runtime.Goexit in a handler) while it holds the role
	// out, so that the watcher takes the role and the queue.
	kickfd int

	// Owned by the role's holder.
	step    pollStep
	queue   []*serverConn // the served connections the last poll readied
	head    int           // queue[head:] are still to run
	stopped bool          // the last poll saw the stop eventfd
	pollFn  func(uintptr) bool

	takenAt atomic.Int64 // serveClock at the latest takeover
	lost    atomic.Bool  // an epoll_ctl on the port failed: every call runs on a worker
	lostErr atomic.Pointer[error]
	quit    chan struct{} // closed by stop, once the loop has stopped
	pool    workerPool
}

func newServeRole(p *poller) (_ *serveRole, err error) {
	sr := &serveRole{p: p, kickfd: -1, quit: make(chan struct{}), queue: make([]*serverConn, 0, pollBatch)}
	sr.step = pollStep{p: p, spins: true}
	sr.pollFn = sr.pollStep
	sr.pool.sr = sr
	defer func() {
		if err != nil {
			sr.close()
		}
	}()
	if sr.kickfd, err = newKick(p.epfd); err != nil {
		return nil, err
	}
	if sr.port, err = newWatchPort(p); err != nil {
		return nil, err
	}
	return sr, nil
}

// close closes the port and the kick eventfd; the poller closes E1 after.
func (sr *serveRole) close() {
	if sr.port != nil {
		sr.port.close()
	}
	if sr.kickfd >= 0 {
		unix.Close(sr.kickfd)
		sr.kickfd = -1
	}
}

// queued is notify's part for a served connection whose read direction a
// poll by the role's holder moved out of serve: the role owns it now, and
// runs it after the poll.
func (sr *serveRole) queued(sc *serverConn) { sr.queue = append(sr.queue, sc) }

// run is the role's loop for the goroutine that calls it: holding, it
// holds the role (the poller's first goroutine); else it has just become
// the watcher. It returns false once the poller has stopped, true when the
// goroutine has nothing left to do: displaced, with another watcher in
// place, it may go to the pool.
func (sr *serveRole) run(wk *worker, holding bool) bool {
	for {
		if !holding && !sr.watch(wk) {
			return false
		}
		if sr.hold() {
			return false
		}
		// Displaced: the role went on while our handler ran. Watch, unless
		// another does.
		if !sr.becomeWatcher() {
			return true
		}
		holding = false
	}
}

// hold runs the role until the poller stops (true) or the role passes on
// while this goroutine runs a handler (false). The queue holds at most one
// connection after spread, and the holder touches it only while it holds
// the role in loop, where nobody else moves the role.
func (sr *serveRole) hold() (stopped bool) {
	for {
		if sr.head < len(sr.queue) {
			sc := sr.queue[sr.head]
			sr.queue[sr.head] = nil
			sr.head++
			if !sr.runOne(sc) {
				return false
			}
			continue
		}
		sr.queue, sr.head = sr.queue[:0], 0
		if err := sr.rc.Read(sr.pollFn); err != nil {
			panic("netpoll: RawConn.Read on our own epoll fd failed: " + err.Error())
		}
		if sr.stopped {
			sr.stop()
			return true
		}
		sr.spread()
	}
}

// runOne runs sc, which the role held: inline with the role out, or on a
// worker if it was demoted or the port is lost. It reports whether this
// goroutine holds the role again (in loop) after.
func (sr *serveRole) runOne(sc *serverConn) (holding bool) {
	if sc.demoted > 0 || sr.lost.Load() {
		sr.pool.run(sc, true)
		return true
	}
	out, holding := sr.goOut()
	switch {
	case !holding:
		sc.run(true, nil, 0) // ours, and no role to come back to
		return false
	case out == 0:
		sr.pool.run(sc, true) // the arm failed: lost, the role ours in loop
		return true
	}
	sc.run(true, sr, out)
	pprof.SetGoroutineLabels(context.Background())
	return sr.comeBack(out)
}

// pollStep is the holder's RawRead callback: poll, and return once a poll
// readied served connections (the holder runs them outside RawRead) or saw
// the stop eventfd, else as runNested's.
func (sr *serveRole) pollStep(uintptr) bool {
	s := &sr.step
	for {
		if h := testHookServePoll.Load(); h != nil {
			(*h)()
		}
		n, woke, stop := s.poll(0)
		if stop {
			sr.stopped = true
			return true
		}
		if len(sr.queue) > 0 {
			s.leave(n, woke)
			return true
		}
		if !s.next(n, woke) {
			return false
		}
	}
}

// spread runs a batch of served connections on workers, readied through
// their channels. With GOMAXPROCS above 1 it takes all of them, and the
// holder stays in loop: a poll that finds several connections ready is a
// busy poller, where an out period is soon cut short by the next event (a
// takeover, and a watcher to summon: two wakeups where a worker costs at
// most one), and other Ps run the workers at once (the runtime's wakep
// wakes a thread for a readied worker only if a P is idle). Measured on
// echo at 50 connections unpinned: the first of each batch run inline cost
// 1.29x package net's CPU per request, against 1.09x with a goroutine per
// call (testdata/issue35/run1). With one P all but the first run on
// workers, in turn, each a goroutine switch, and the holder runs the first:
// run inline one after another they would wait behind a first handler that
// blocks, their edges taken by the poll and nothing left on the epoll fd to
// fire the port (FuzzServeRole's script "Bab"). So the holder holds at most
// one connection out. GOMAXPROCS is read per batch of two or more (about
// 25 ns; since Go 1.25 it follows the CPU limit at run time).
func (sr *serveRole) spread() {
	if len(sr.queue)-sr.head < 2 || sr.lost.Load() {
		return
	}
	first := sr.head + 1
	if runtime.GOMAXPROCS(0) > 1 {
		first = sr.head
	}
	for i := first; i < len(sr.queue); i++ {
		sr.pool.run(sr.queue[i], true)
		sr.queue[i].s.stats.spread.Add(1)
		sr.queue[i] = nil
	}
	sr.queue = sr.queue[:first]
}

// goOut moves the role out from loop and arms the port, making a watcher
// first if there is none. It returns the word out; or, if the arm failed
// (lose), 0 with the role back in loop, or the word with holding false if
// the role was taken meanwhile (a fire from before the failure).
func (sr *serveRole) goOut() (out uint64, holding bool) {
	if a := sr.p.auto; a != nil {
		// Nobody spins while out: the spin slot is not the holder's to
		// keep. Before the CAS: the policy's state is the role's.
		a.leaveRole()
	}
	for {
		w := sr.word.Load() // in loop, only the watching bit moves under the holder
		next := srGoOutNext(w)
		if !sr.word.CompareAndSwap(w, next) {
			continue
		}
		if w&srWatching == 0 {
			sr.pool.watch()
		}
		if err := sr.port.arm(); err != nil {
			sr.lose(err)
			if sr.word.CompareAndSwap(next, srComeBackNext(next)) {
				return 0, true
			}
			return next, false
		}
		return next, true
	}
}

// comeBack ends an out period: the role back in loop and the port
// disarmed. It reports false if the watcher took the role meanwhile.
func (sr *serveRole) comeBack(out uint64) bool {
	if !sr.word.CompareAndSwap(out, srComeBackNext(out)) {
		return false
	}
	if err := sr.port.disarm(); err != nil {
		sr.lose(err)
	}
	return true
}

// displaced reports whether a call that began out with word out has lost
// the role since, long enough ago to call the call blocked.
func (sr *serveRole) displaced(out uint64) (blocked bool) {
	if sr.word.Load() == out {
		return false
	}
	return serveClock()-time.Duration(sr.takenAt.Load()) >= demoteAfter
}

// becomeWatcher makes the caller the watcher unless one is, or the poller
// has stopped.
func (sr *serveRole) becomeWatcher() bool {
	for {
		w := sr.word.Load()
		next, ok := srWatchNext(w)
		if !ok {
			return false
		}
		if sr.word.CompareAndSwap(w, next) {
			return true
		}
	}
}

// watch is the watcher's wait: RawRead on the port until it fires with the
// role out (a takeover: true, the caller holds the role), or the poller
// stopped (false). The port is polled first in every callback.
func (sr *serveRole) watch(wk *worker) bool {
	wk.took = false
	err := sr.port.rc.Read(wk.watchFn)
	if wk.took {
		return true
	}
	select {
	case <-sr.quit:
		return false
	default:
	}
	panic("netpoll: RawConn.Read on our own watch port failed: " + errString(err))
}

// watchStep is watch's RawRead callback for the worker wk, made once per
// worker (worker.watchFn): a closure made per watch would allocate at each
// takeover, and the flag is the goroutine's own, since a displaced holder
// may become the next watcher while this one is still returning.
func (sr *serveRole) watchStep(wk *worker, fd uintptr) bool {
	if sr.port.fired(fd) {
		for {
			w := sr.word.Load()
			next, ok := srFireNext(w)
			if !ok {
				sr.p.st.inc(cWatchIdleFires)
				break
			}
			if sr.word.CompareAndSwap(w, next) {
				sr.takenAt.Store(int64(serveClock()))
				sr.p.st.inc(cTakeovers)
				wk.took = true
				return true
			}
		}
	}
	select {
	case <-sr.quit:
		return true
	default:
		return false
	}
}

// kick makes an event on E1, so that the watcher takes a role left out by
// a goroutine that will not come back.
func (sr *serveRole) kick() { signal(sr.kickfd) }

// lose is the fallback after an epoll_ctl on the port failed (as a failed
// epoll_ctl fails a descriptor): from now on every call runs on a worker,
// and the holder never goes out. The first error is kept.
func (sr *serveRole) lose(err error) {
	sr.lostErr.CompareAndSwap(nil, &err)
	sr.lost.Store(true)
}

// stop is the holder's last act, after its poll saw the stop eventfd: the
// word stopped, the connections the poll readied run on goroutines of
// their own (the pool is stopping), and the loop reported stopped.
func (sr *serveRole) stop() {
	for {
		w := sr.word.Load()
		if sr.word.CompareAndSwap(w, srStopNext(w)) {
			break
		}
	}
	for _, sc := range sr.queue[sr.head:] {
		go sc.run(true, nil, 0)
	}
	if a := sr.p.auto; a != nil {
		a.release()
	}
	clear(sr.queue)
	sr.queue, sr.head = sr.queue[:0], 0
	close(sr.p.stopped)
}

// shutdown is poller.stop's part once the loop has stopped: the watcher
// and the idle workers are told to exit.
func (sr *serveRole) shutdown() {
	close(sr.quit)
	sr.port.wake()
	sr.pool.stop()
}

// workerPool keeps the goroutines a serving poller runs calls on besides
// the role's holder: the watcher, and the connections demoted or spread
// from a batch. (Close, a deadline and the idle timer start a goroutine of
// their own: serverConn.start.) Idle workers wait on their channel; at most
// maxIdleWorkers are kept, the rest exit.
type workerPool struct {
	sr   *serveRole
	mu   sync.Mutex
	idle []*worker
	done bool
}

// maxIdleWorkers bounds the idle workers a poller keeps: a batch's extra
// connections each take one (spread), so a busy server with one P, where
// they run one after another, reuses them instead of starting a goroutine
// per connection (counted: /netpoll/serve/workers-started:goroutines). At
// most 32 parked goroutines per poller, kept once a burst made them, about
// 8 KiB of stack each; none while the poller never served a batch.
const maxIdleWorkers = 32

type worker struct {
	wake    chan job
	watchFn func(uintptr) bool // serveRole.watchStep for this worker, made with it
	took    bool               // watchStep took the role
}

// newWorker makes a worker of sr's pool.
func (sr *serveRole) newWorker() *worker {
	wk := &worker{wake: make(chan job, 1)}
	wk.watchFn = func(fd uintptr) bool { return sr.watchStep(wk, fd) }
	return wk
}

type jobKind uint8

const (
	jobRun   jobKind = iota // run sc
	jobWatch                // become the watcher
	jobHold                 // hold the role: the poller's first goroutine
	jobExit                 // the pool stopped
)

type job struct {
	kind   jobKind
	byEdge bool
	sc     *serverConn
}

// run runs sc on a worker. byEdge: as serverConn.start's.
func (wp *workerPool) run(sc *serverConn, byEdge bool) {
	wp.give(job{kind: jobRun, sc: sc, byEdge: byEdge})
}

// watch makes a worker the watcher.
func (wp *workerPool) watch() { wp.give(job{kind: jobWatch}) }

// give hands j to an idle worker, or to a new one.
func (wp *workerPool) give(j job) {
	wp.mu.Lock()
	if n := len(wp.idle); n > 0 && !wp.done {
		w := wp.idle[n-1]
		wp.idle[n-1] = nil
		wp.idle = wp.idle[:n-1]
		wp.mu.Unlock()
		w.wake <- j // capacity 1, and a worker is given one job at a time
		return
	}
	wp.mu.Unlock()
	wp.sr.p.st.inc(cWorkersStarted)
	go wp.work(wp.sr.newWorker(), j)
}

// work is a worker's life: jobs until the pool stops or has enough idle.
func (wp *workerPool) work(w *worker, j job) {
	for {
		switch j.kind {
		case jobExit:
			return
		case jobWatch, jobHold:
			if !wp.sr.run(w, j.kind == jobHold) {
				return
			}
		case jobRun:
			j.sc.run(j.byEdge, nil, 0)
			pprof.SetGoroutineLabels(context.Background())
		}
		j = job{}
		wp.mu.Lock()
		if wp.done || len(wp.idle) >= maxIdleWorkers {
			wp.mu.Unlock()
			return
		}
		wp.idle = append(wp.idle, w)
		wp.mu.Unlock()
		j = <-w.wake
	}
}

// stop makes the idle workers exit, and the busy ones once they are done.
func (wp *workerPool) stop() {
	wp.mu.Lock()
	wp.done = true
	idle := wp.idle
	wp.idle = nil
	wp.mu.Unlock()
	for _, w := range idle {
		w.wake <- job{kind: jobExit}
	}
}
