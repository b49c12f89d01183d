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

	shortRead bool // Config.ShortRead resolved: its connections skip after short transfers

	table fdTable

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
	waits          atomic.Uint64 // epoll_wait calls
	blockingWaits  atomic.Uint64 // times the loop blocked (epoll_wait(-1) or a park)
	wakeups        atomic.Uint64 // blocking waits that returned
	emptyWakeups   atomic.Uint64 // wakeups whose first poll woke no goroutine
	spinPolls      atomic.Uint64 // epoll_wait(0) calls made while spinning
	spinHits       atomic.Uint64 // spin polls that returned events
	spinDecisions  atomic.Uint64 // SpinAuto: idle periods it chose to spin through
	spinFound      atomic.Uint64 // SpinAuto: of those, spins that found an event
	spinGaveUp     atomic.Uint64 // SpinAuto: of those, spins that used up the budget
	spinNanos      atomic.Uint64 // SpinAuto: time spent in those spins
	blockCost      atomic.Uint64 // SpinAuto: median process CPU (ns) of a sampled blocked idle period
	spinBudget     atomic.Uint64 // SpinAuto: the budget (ns) of its latest idle moment
	events         atomic.Uint64 // events returned
	stale          atomic.Uint64 // events dropped: fd closed or generation reused
	ctlAdd         atomic.Uint64
	ctlDel         atomic.Uint64
	levelDisarms   atomic.Uint64 // LevelTriggered readers disarmed for not reading
	accepts        atomic.Uint64 // connections accepted on this poller
	acceptBackoffs atomic.Uint64 // accept back-offs while out of fds or memory
	rotations      atomic.Uint64 // Exclusive listener registrations re-queued
	handOffs       atomic.Uint64 // accept edges handed to this poller's acceptor
	sendfiles      atomic.Uint64 // sendfile calls (Conn.ReadFrom)
	sendfileBytes  atomic.Uint64 // bytes they sent
	splices        atomic.Uint64 // splice calls, into and out of the pipe (ReadFrom, WriteTo)
	spliceBytes    atomic.Uint64 // bytes spliced out to the destination
}

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
	if err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, p.evfd, &ev); err != nil {
		return nil, os.NewSyscallError("epoll_ctl", err)
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
	if p.strategy == WaitNested {
		// os.NewFile registers a non-blocking fd with the runtime poller.
		if err := unix.SetNonblock(p.epfd, true); err != nil {
			return os.NewSyscallError("fcntl", err)
		}
		nested = os.NewFile(uintptr(p.epfd), "netpoll-epoll")
	}
	go func() {
		defer close(p.stopped)
		if p.auto != nil {
			defer p.auto.release()
		}
		switch p.strategy {
		case WaitNested:
			p.runNested(nested)
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
	<-p.stopped
	if p.strategy == WaitNested {
		p.epfd = -1 // closed by the os.File in runNested
	}
	p.closeFDs()
}

// stats snapshots the poller: its own counters, its closed descriptors' and
// its live ones'.
func (p *poller) stats() PollerStats {
	s := PollerStats{
		EpollWaits:     p.st.waits.Load(),
		BlockingWaits:  p.st.blockingWaits.Load(),
		Wakeups:        p.st.wakeups.Load(),
		EmptyWakeups:   p.st.emptyWakeups.Load(),
		SpinPolls:      p.st.spinPolls.Load(),
		SpinHits:       p.st.spinHits.Load(),
		SpinDecisions:  p.st.spinDecisions.Load(),
		SpinFound:      p.st.spinFound.Load(),
		SpinGaveUp:     p.st.spinGaveUp.Load(),
		SpinTime:       time.Duration(p.st.spinNanos.Load()),
		BlockCost:      time.Duration(p.st.blockCost.Load()),
		Events:         p.st.events.Load(),
		StaleEvents:    p.st.stale.Load(),
		CtlAdd:         p.st.ctlAdd.Load(),
		CtlDel:         p.st.ctlDel.Load(),
		LevelDisarms:   p.st.levelDisarms.Load(),
		Accepts:        p.st.accepts.Load(),
		AcceptBackoffs: p.st.acceptBackoffs.Load(),
		Rotations:      p.st.rotations.Load(),
		HandOffs:       p.st.handOffs.Load(),
		Sendfiles:      p.st.sendfiles.Load(),
		SendfileBytes:  p.st.sendfileBytes.Load(),
		Splices:        p.st.splices.Load(),
		SpliceBytes:    p.st.spliceBytes.Load(),
	}
	c, live := p.table.counters()
	c.into(&s)
	s.Descriptors = uint64(live)
	return s
}
