package netpoll

import (
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The poller: one epoll instance, its counters, starting and stopping
// its loop (loop_linux.go), its dispatch (dispatch_linux.go) and how it
// arms descriptors in each Mode (arm_linux.go).

// pollBatch is how many events one epoll_wait returns at most.
const pollBatch = 128

// levelRepeatWindow is how long a LevelTriggered poller keeps getting
// batches that wake nobody (yielding the P after each) before it disarms
// the readers that are not reading. See doc.go, "LevelTriggered".
const levelRepeatWindow = 10 * time.Millisecond

// poller owns one epoll instance and its event loop.
type poller struct {
	id   int
	epfd int
	evfd int // eventfd registered level-triggered: written once to stop the loop
	mode Mode
	// strategy is how the loop waits: Config.Wait resolved. WaitNested
	// keeps the loop inside one RawConn.Read on the epoll fd from start
	// to stop and never leaves it but to stop: a goroutine that enters
	// RawRead on the fd again resets the runtime's readiness for it
	// (internal/poll's prepareRead), so an edge that came in between
	// would be lost until the next one (runNested).
	strategy Wait
	spin     time.Duration // Config.Spin
	auto     *autoSpin     // SpinAuto's state, nil otherwise
	inline   *inlineWait   // WaitInline's role, nil otherwise

	shortRead bool // Config.ShortRead resolved: its connections skip after short transfers

	table fdTable
	ctl   ctlFailures // errors of descriptors a failed epoll_ctl lost

	stopped chan struct{} // closed when the loop has returned

	// Owned by the loop goroutine.
	events      []unix.EpollEvent
	lastEvent   time.Time // when a poll last returned events (spinning)
	repeatSince time.Time // start of a run of LevelTriggered batches that woke nobody

	st pollerCounters
}

// pollerCounters are written by the poller's loop (and, for ctl counts and
// accepts, by registration and acceptors) and read by Stats. Per-I/O
// counters live in desc and are folded in when a descriptor closes.
type pollerCounters struct {
	c          [numCounters - numDescCounters]atomic.Uint64 // the counters from numDescCounters on (stats.go)
	spinNanos  atomic.Uint64                                // SpinAuto: time spent in spins (PollerStats.SpinTime)
	blockCost  atomic.Uint64                                // SpinAuto: median process CPU (ns) of a sampled blocked idle period
	spinBudget atomic.Uint64                                // SpinAuto: the budget (ns) of its latest idle moment
}

// add adds n to counter c, one of the poller's own.
func (pc *pollerCounters) add(c counter, n uint64) { pc.c[c-numDescCounters].Add(n) }

// inc adds one to counter c.
func (pc *pollerCounters) inc(c counter) { pc.c[c-numDescCounters].Add(1) }

// load reads counter c.
func (pc *pollerCounters) load(c counter) uint64 { return pc.c[c-numDescCounters].Load() }

func newPoller(id int, cfg Config) (_ *poller, err error) {
	p := &poller{id: id, epfd: -1, evfd: -1, mode: cfg.Mode, strategy: cfg.wait(), spin: cfg.Spin,
		shortRead: cfg.shortRead(), stopped: make(chan struct{}), events: make([]unix.EpollEvent, pollBatch)}
	defer func() {
		if err != nil {
			p.closeFDs() // p, not the nil result
		}
	}()
	if cfg.autoSpin() {
		if err = acquireWake(); err != nil {
			return nil, err
		}
		p.auto = newAutoSpin(wakeCost) // closeFDs releases it
	}
	if p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if cfg.BusyPoll != 0 {
		if err = setBusyPoll(p.epfd, cfg.BusyPoll); err != nil {
			return nil, err
		}
	}
	if p.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	// The eventfd is told apart by its fd number, which the table never holds.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.evfd)}
	if err = epollCtl(p.epfd, unix.EPOLL_CTL_ADD, p.evfd, &ev); err != nil {
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	if p.strategy == WaitInline {
		if p.inline, err = newInlineWait(p); err != nil {
			return nil, err
		}
		p.inline.auto = p.auto
	}
	return p, nil
}

// closeFDs closes the poller's fds and lets go of what it shares with other
// pollers (SpinAuto's measurement of W).
func (p *poller) closeFDs() {
	if p.auto != nil {
		releaseWake()
		p.auto = nil
	}
	if p.inline != nil {
		p.inline.close()
	}
	if p.evfd >= 0 {
		unix.Close(p.evfd)
	}
	if p.epfd >= 0 {
		unix.Close(p.epfd)
	}
}

// start runs the loop in its own goroutine.
func (p *poller) start() error {
	var nested *os.File
	if p.nested() {
		// os.NewFile registers a non-blocking fd with the runtime poller.
		if err := unix.SetNonblock(p.epfd, true); err != nil {
			return os.NewSyscallError("fcntl", err)
		}
		nested = os.NewFile(uintptr(p.epfd), "netpoll-epoll")
		if p.inline != nil {
			rc, err := nested.SyscallConn()
			if err != nil {
				return err
			}
			p.inline.rc = rc
		}
	}
	go func() {
		defer close(p.stopped)
		if p.auto != nil && p.inline == nil { // WaitInline's holders release as they leave
			defer p.auto.release()
		}
		switch p.strategy {
		case WaitNested:
			p.runNested(nested)
		case WaitInline:
			p.runInline(nested)
		case WaitBlock:
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p.runBlocking(false)
		case WaitYield:
			p.runBlocking(true)
		}
	}()
	return nil
}

// stop ends the loop, waits for it and closes the epoll fd and eventfd.
func (p *poller) stop() {
	var one = [8]byte{1}
	for {
		_, err := unix.Write(p.evfd, one[:])
		if err != unix.EINTR {
			break
		}
	}
	if p.inline != nil {
		close(p.inline.quit)
	}
	<-p.stopped
	if p.nested() {
		p.epfd = -1 // closed by the os.File in runNested
	}
	p.closeFDs()
}

// nested reports whether the poller's epoll fd waits in the runtime's
// netpoller (WaitNested, WaitInline).
func (p *poller) nested() bool { return p.strategy == WaitNested || p.strategy == WaitInline }

// stats snapshots the poller: its own counters, its closed descriptors' and
// its live ones'.
func (p *poller) stats() PollerStats {
	var s PollerStats
	f := s.counters()
	for c := numDescCounters; c < numCounters; c++ {
		*f[c] = p.st.load(c)
	}
	s.SpinTime = time.Duration(p.st.spinNanos.Load())
	s.BlockCost = time.Duration(p.st.blockCost.Load())
	c, live := p.table.counters()
	c.into(&s)
	s.Descriptors = uint64(live)
	return s
}
