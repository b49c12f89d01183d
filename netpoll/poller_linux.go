package netpoll

import (
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// The poller: one epoll instance, its counters, starting and stopping
// its loop (loop_linux.go), its dispatch (dispatch_linux.go) and how it
// arms descriptors in each Mode (arm_linux.go).

// pollBatch is how many events one epoll_wait returns at most.
const pollBatch = 128

// levelRepeatWindow is how long a levelTriggered poller keeps getting
// batches that wake nobody (yielding the P after each) before it disarms
// the readers that are not reading. See DESIGN.md, "Registration modes".
const levelRepeatWindow = 10 * time.Millisecond

// poller owns one epoll instance and its event loop.
type poller struct {
	id   int
	epfd int
	evfd int // eventfd registered level-triggered: written once to stop the loop
	mode regMode
	// strategy is how the loop waits: the wait key resolved. waitNested
	// keeps the loop inside one RawConn.Read on the epoll fd from start
	// to stop and never leaves it but to stop: a goroutine that enters
	// RawRead on the fd again resets the runtime's readiness for it
	// (internal/poll's prepareRead), so an edge that came in between
	// would be lost until the next one (runNested).
	strategy waitKind
	// tid is the thread of waitBlock's loop once it has locked it, 0
	// before and under the other waits: tests read its context switches.
	tid     atomic.Int32
	spin    time.Duration // the spin key
	auto    *autoSpin     // adaptive spinning's state, nil otherwise
	inline  *inlineWait   // waitInline's role, nil otherwise
	serve   *serveRole    // waitNested's loop as a role (serverole_linux.go), nil with dispatch=go or hot
	loop    *loopRole     // dispatch=loop: a Server's handlers run on the blocking wait's thread (serveloop_linux.go), nil otherwise
	hot     bool          // dispatch=hot: a Server's connections wait on the runtime's netpoller while busy (hot_linux.go)
	hotRead hotReadKind   // hotread: its Conns' reads wait on the runtime's netpoller while busy (hotread_linux.go)

	shortRead bool // the shortread key resolved: its connections skip after short transfers
	readAhead bool // the readahead key resolved: a hot Server connection reads its input ahead (readahead_linux.go)

	table fdTable
	ctl   ctlFailures // errors of descriptors a failed epoll_ctl lost

	stopped chan struct{} // closed when the loop has returned

	// Owned by the loop goroutine.
	events      []unix.EpollEvent
	lastEvent   time.Time // when a poll last returned events (spinning)
	repeatSince time.Time // start of a run of levelTriggered batches that woke nobody

	st pollerCounters
}

// pollerCounters are written by the poller's loop (and, for ctl counts and
// accepts, by registration and acceptors), and by the operations on its
// connections in stripes, and read by Stats without a lock: every counter
// is atomic and only grows, so a snapshot may be a moment old but never
// counts an event twice.
type pollerCounters struct {
	c          [numCounters - numOpCounters]atomic.Uint64 // the counters from numOpCounters on (stats.go)
	ops        [opStripes]opStripe                        // the counters below numOpCounters
	spinNanos  atomic.Uint64                              // adaptive spinning: time spent in spins (pollerStats.SpinTime)
	blockCost  atomic.Uint64                              // adaptive spinning: median process CPU (ns) of a sampled blocked idle period
	spinBudget atomic.Uint64                              // adaptive spinning: the budget (ns) of its latest idle moment
	spinFar    atomic.Bool                                // adaptive spinning: its typical idle gap is over twice its budget, where it does not even probe (hotread=auto with one P)
}

// opStripes is how many stripes a poller's operation counters are split
// into. Operations on fds that differ in the low bits count in different
// stripes: with up to GOMAXPROCS operations running at once on different
// connections, few write the same line, and a poller pays
// opStripes·(a stripe) bytes however many connections it holds, where a
// counter per descriptor cost every idle connection 72 bytes.
const opStripes = 8

// opStripe is one stripe of operation counters, padded so that no two
// stripes' counters share a cache line wherever the array starts.
type opStripe struct {
	c [numOpCounters]atomic.Uint64
	_ cpu.CacheLinePad
}

// add adds n to counter c, one of the poller's own.
func (pc *pollerCounters) add(c counter, n uint64) { pc.c[c-numOpCounters].Add(n) }

// inc adds one to counter c, one of the poller's own.
func (pc *pollerCounters) inc(c counter) { pc.c[c-numOpCounters].Add(1) }

// op adds one to operation counter c in fd's stripe.
func (pc *pollerCounters) op(fd int, c counter) { pc.ops[uint(fd)%opStripes].c[c].Add(1) }

// load reads counter c, summing the stripes of an operation counter.
func (pc *pollerCounters) load(c counter) uint64 {
	if c >= numOpCounters {
		return pc.c[c-numOpCounters].Load()
	}
	var sum uint64
	for i := range pc.ops {
		sum += pc.ops[i].c[c].Load()
	}
	return sum
}

func newPoller(id int, cfg settings) (_ *poller, err error) {
	p := &poller{id: id, epfd: -1, evfd: -1, mode: cfg.mode, strategy: cfg.wait, spin: cfg.spin,
		shortRead: cfg.shortRead, hot: cfg.hotDispatch, hotRead: cfg.hotRead, readAhead: cfg.readAhead, stopped: make(chan struct{}), events: make([]unix.EpollEvent, pollBatch)}
	defer func() {
		if err != nil {
			p.closeFDs() // p, not the nil result
		}
	}()
	if cfg.autoSpin {
		if err = acquireWake(); err != nil {
			return nil, err
		}
		p.auto = newAutoSpin(wakeCost) // closeFDs releases it
	}
	if p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if cfg.busyPoll != 0 {
		if err = setBusyPoll(p.epfd, cfg.busyPoll); err != nil {
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
	switch {
	case p.strategy == waitInline:
		if p.inline, err = newInlineWait(p); err != nil {
			return nil, err
		}
	case p.strategy == waitBlock && cfg.loopDispatch:
		p.loop = newLoopRole(p)
	case p.strategy == waitNested && !cfg.goDispatch && !cfg.hotDispatch:
		if p.serve, err = newServeRole(p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// closeFDs closes the poller's fds and lets go of what it shares with other
// pollers (adaptive spinning's measurement of W).
func (p *poller) closeFDs() {
	if p.auto != nil {
		// p.auto itself stays: a waitInline holder woken by Group.Close
		// may still be finishing its step (holderStep) when the loop
		// goroutine has stopped.
		releaseWake()
	}
	if p.inline != nil {
		p.inline.close()
	}
	if p.serve != nil {
		p.serve.close()
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
			p.inline.rc, p.inline.file = rc, nested
		}
		if p.serve != nil {
			rc, err := nested.SyscallConn()
			if err != nil {
				return err
			}
			p.serve.rc, p.serve.file = rc, nested
			// The first holder; the role's last holder closes p.stopped
			// and releases the spin slot (serveRole.stop).
			go p.serve.pool.work(p.serve.newWorker(), job{kind: jobHold})
			return nil
		}
	}
	if p.loop != nil {
		p.loop.start() // its last holder closes p.stopped
		return nil
	}
	go func() {
		defer close(p.stopped)
		if p.auto != nil && p.inline == nil { // waitInline's holders release as they leave
			defer p.auto.release()
		}
		switch p.strategy {
		case waitNested:
			p.runNested(nested)
		case waitInline:
			p.runInline()
		case waitBlock:
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			p.tid.Store(int32(unix.Gettid()))
			p.runBlocking()
		}
	}()
	return nil
}

// stop ends the loop, waits for it and closes the epoll fd and eventfd.
func (p *poller) stop() {
	signal(p.evfd)
	if p.inline != nil {
		p.inline.stopWatcher()
	}
	<-p.stopped
	// The watch ports close before E1 does: an arm or disarm still in
	// flight (its CAS came before stop retired the role word) then does
	// nothing, where after E1's close its epoll_ctl would name an fd
	// number the process may have reused.
	if p.serve != nil {
		p.serve.shutdown()
		if p.serve.port != nil {
			p.serve.port.close()
		}
		p.serve.file.Close() // no goroutine enters E1's RawRead once stopped
	}
	if p.inline != nil {
		if p.inline.port != nil {
			p.inline.port.close()
		}
		// Closed only once the loop has returned: the operations that
		// hold the role share the file's RawConn with the loop
		// goroutine, so no one of them owns it.
		p.inline.file.Close()
	}
	if p.nested() {
		p.epfd = -1 // closed by the os.File in runNested, or just above
	}
	p.closeFDs()
}

// nested reports whether the poller's epoll fd waits in the runtime's
// netpoller (waitNested, waitInline).
func (p *poller) nested() bool { return p.strategy == waitNested || p.strategy == waitInline }

// stats snapshots the poller's counters. It takes no lock: a metrics
// scrape never waits for, or holds up, a registration.
func (p *poller) stats() pollerStats {
	var s pollerStats
	f := s.counters()
	for c := range numCounters {
		*f[c] = p.st.load(c)
	}
	s.SpinTime = time.Duration(p.st.spinNanos.Load())
	s.BlockCost = time.Duration(p.st.blockCost.Load())
	s.Descriptors = uint64(p.table.live.Load())
	s.Conns = uint64(p.table.conns.Load())
	return s
}

// newKick makes an eventfd registered edge-triggered in the epoll fd epfd:
// a kick, written (signal) to make whoever polls epfd look again, which
// dispatch skips by its fd number. The caller closes it.
func newKick(epfd int) (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}
	if err := epollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("epoll_ctl", err)
	}
	return fd, nil
}

// signal adds one to the eventfd fd, so that it is readable: the poller's
// stop eventfd and the kicks.
func signal(fd int) {
	var one = [8]byte{1}
	for {
		if _, err := unix.Write(fd, one[:]); err != unix.EINTR {
			return
		}
	}
}
