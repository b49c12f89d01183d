package netpoll

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Test access to internals, as internal/poll does it.

func descOf(c any) *desc {
	switch c := c.(type) {
	case *Conn:
		return c.d
	case *Listener:
		return c.ds[0]
	}
	panic("netpoll test: not a *Conn or *Listener")
}

// HoldWakeMeter keeps the wakeup-cost meter from measuring (and so from
// holding its two pipes open) until release is called: for a test that
// counts the process's fds while another group's refresher may run.
func HoldWakeMeter() (release func()) {
	wakeMeasuring.Lock()
	return wakeMeasuring.Unlock
}

// FD returns the fd of a *Conn or *Listener.
func FD(c any) int { return descOf(c).fd }

// Gen returns the generation of a *Conn or *Listener's registration.
func Gen(c any) uint32 { return descOf(c).gen }

var stateNames = map[uint32]string{stEmpty: "empty", stReady: "ready", stWaiting: "waiting", stServe: "serve"}

// ReadState returns the read direction's state: idle, ready or waiting.
func ReadState(c any) string { return stateNames[descOf(c).rd.state.Load()] }

// WriteState returns the write direction's state.
func WriteState(c any) string { return stateNames[descOf(c).wr.state.Load()] }

// AwaitReadState yields until the read direction of c is in state want or
// stop is closed, and reports whether it got there. A Read of a hot Conn
// (hotread) that waits on the runtime's netpoller, or is about to (its
// wait announced: whatever comes from then on it reads), counts as
// "waiting": the direction's own state is not used while hot. ReadState
// tells the poller's park alone.
func AwaitReadState(c any, want string, stop <-chan struct{}) bool {
	d := descOf(c)
	return yieldUntil(stop, func() bool {
		if want == "waiting" {
			if h := d.hotw.Load(); h != nil && h.sc == nil && h.seq.Load()&1 == 1 {
				return true
			}
		}
		return stateNames[d.rd.state.Load()] == want
	})
}

// AwaitWriteState is AwaitReadState for the write direction.
func AwaitWriteState(c any, want string, stop <-chan struct{}) bool {
	return awaitState(&descOf(c).wr, want, stop)
}

func awaitState(dr *dir, want string, stop <-chan struct{}) bool {
	return yieldUntil(stop, func() bool { return stateNames[dr.state.Load()] == want })
}

// yieldUntil yields until cond holds or stop is closed, and reports whether
// cond held.
func yieldUntil(stop <-chan struct{}, cond func() bool) bool {
	for !cond() {
		select {
		case <-stop:
			return false
		default:
			runtime.Gosched()
		}
	}
	return true
}

var hookMu sync.Mutex

// SetBeforeParkHook installs f to run between EAGAIN and the park of every
// operation, with the fd it is for; the returned func removes it.
func SetBeforeParkHook(f func(fd int)) (restore func()) {
	hookMu.Lock()
	testHookBeforePark = func(d *desc, _ *dir) { f(d.fd) }
	return func() {
		testHookBeforePark = nil
		hookMu.Unlock()
	}
}

// InlineCrowd is the count of waiters from which a WaitInline holder hands
// the role to the poller's goroutine.
const InlineCrowd = inlineCrowd

var roleNames = map[uint64]string{roleLoop: "loop", roleInline: "inline", roleOut: "out", roleVacant: "vacant"}

// AwaitInlineRole yields until the WaitInline role of c's poller is want
// (loop, inline, out or vacant) or stop is closed, and reports whether it
// got there.
func AwaitInlineRole(c any, want string, stop <-chan struct{}) bool {
	iw := descOf(c).p.inline
	return yieldUntil(stop, func() bool { return roleNames[iw.word.Load()&roleMask] == want })
}

// SetInlineParkHook installs f to run as an operation on a WaitInline
// poller commits to its wait, inline or on its channel; the returned func
// removes it.
func SetInlineParkHook(f func(inline bool)) (restore func()) {
	hookMu.Lock()
	testHookInlinePark.Store(&f)
	return func() {
		testHookInlinePark.Store(nil)
		hookMu.Unlock()
	}
}

// InjectReadEvent hands the poller of c an EPOLLIN event for fd and gen, as
// if epoll_wait had returned it, and reports how many waiters it woke.
func InjectReadEvent(c any, fd int, gen uint32) int {
	d := descOf(c)
	woke, _ := d.p.dispatch([]unix.EpollEvent{{Events: unix.EPOLLIN, Fd: int32(fd), Pad: int32(gen)}})
	return woke
}

// AdoptFD registers a connected stream fd on g as a *Conn.
func AdoptFD(g *Group, fd int) (*Conn, error) {
	return g.newConn(fd, "unix", tcpAddr{}, nil, g.pick(), nil, false)
}

// ResetDefault forgets the default group so the next Listen or Dial reads
// NETPOLL again. The old group, if any, is closed.
func ResetDefault() {
	defaultGroup.mu.Lock()
	defer defaultGroup.mu.Unlock()
	if defaultGroup.g != nil {
		defaultGroup.g.Close()
	}
	defaultGroup.g, defaultGroup.cfgErr, defaultGroup.read = nil, nil, false
}

// PollerOf returns the index of the poller a *Conn is registered on.
func PollerOf(c any) int { return descOf(c).p.id }

// BusyPollParams returns poller i's EPIOCGPARAMS busy-poll settings.
func BusyPollParams(g *Group, i int) (usecs uint32, budget uint16, err error) {
	return busyPollParams(g.pollers[i].epfd)
}

// SetSpinCosts makes SpinAuto groups take w as the measured wakeup cost W
// and c as the CPU a blocked idle period costs (budget at most 2c and
// autoSpinMax); the returned func restores the measurements.
func SetSpinCosts(w, c time.Duration) (restore func()) {
	wakeCostOverride.Store(int64(w))
	blockCostOverride.Store(int64(c))
	return func() {
		wakeCostOverride.Store(0)
		blockCostOverride.Store(0)
	}
}

// AutoSpinMax is the cap on SpinAuto's budget.
const AutoSpinMax = autoSpinMax

// Sticky returns the sticky bits a *Conn has kept: event bits, and
// StickyRaw once user code had its fd. Any bit turns short-read skipping off.
func Sticky(c any) uint32 { return descOf(c).sticky.Load() }

// StickyRaw is the bit Sticky reports for a fd handed to user code.
const StickyRaw = stickyRaw

// Spinners is the number of SpinAuto spinning slots taken, process-wide.
func Spinners() int32 { return spinners.Load() }

// SetHandOffHook makes every on-demand hand-off call f with the
// connection at its two windows: "before-serve" (the socket was found
// empty) and "in-serve" (the read direction has entered serve, Close and
// the deadline not yet checked). f runs on the handing-off goroutine,
// which holds the read direction's lock and a reference: a Close there
// must come from another goroutine.
func SetHandOffHook(f func(c net.Conn, at string)) (restore func()) {
	hookMu.Lock()
	h := func(sc *serverConn, at handOffPoint) {
		f(sc.c, [...]string{hookBeforeServe: "before-serve", hookInServe: "in-serve"}[at])
	}
	testHookHandOff.Store(&h)
	return func() {
		testHookHandOff.Store(nil)
		hookMu.Unlock()
	}
}

// IdleDeadline returns when the wait for work of an idle *Conn served on
// demand ends (Server.IdleTimeout), or the zero time if it has none.
func IdleDeadline(c net.Conn) time.Time {
	if it := descOf(c).srv.Load().timer.Load(); it != nil {
		if ns := it.idle.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

// StopIdleTimer stops the idle timer of a *Conn served on demand and
// reports whether it was running.
func StopIdleTimer(c net.Conn) bool {
	it := descOf(c).srv.Load().timer.Load()
	if it == nil {
		return false
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.t != nil && it.t.Stop()
}

// SetExpireHook makes the idle timer's function of every connection served
// on demand call f, on the timer's goroutine, once it found a deadline due
// and before it tries to take the connection.
func SetExpireHook(f func(c net.Conn)) (restore func()) {
	hookMu.Lock()
	h := func(sc *serverConn) { f(sc.c) }
	testHookExpire.Store(&h)
	return func() {
		testHookExpire.Store(nil)
		hookMu.Unlock()
	}
}

// Closing reports whether Close has begun on a *Conn.
func Closing(c any) bool { return descOf(c).closing() }

// PollerFD returns poller i's epoll fd.
func PollerFD(g *Group, i int) int { return g.pollers[i].epfd }

// PollerThread returns the thread of poller i's loop under wait=block, 0
// until it has locked one (and under the other waits).
func PollerThread(g *Group, i int) int { return int(g.pollers[i].tid.Load()) }

// ListenerFDs returns the socket of each of a *Listener's registrations, in
// the order of the pollers they are registered on: one for Single, the
// shared socket once per poller for Exclusive and WakeAll, a socket per
// poller for ReusePort.
func ListenerFDs(l *Listener) []int {
	fds := make([]int, len(l.ds))
	for i, d := range l.ds {
		fds[i] = d.fd
	}
	return fds
}

// ListenerPollers returns the index of the poller each of a *Listener's
// registrations is on, in the order of ListenerFDs.
func ListenerPollers(l *Listener) []int {
	ids := make([]int, len(l.ds))
	for i, d := range l.ds {
		ids[i] = d.p.id
	}
	return ids
}

// SetCtlFault makes every epoll_ctl of the package ask f first, with the
// epoll fd, the operation (unix.EPOLL_CTL_ADD, MOD or DEL), the fd and the
// events asked for (0 for DEL): a non-zero errno is returned in place of
// the call. f runs on whichever goroutine calls epoll_ctl. The returned
// func removes it.
func SetCtlFault(f func(epfd, op, fd int, events uint32) unix.Errno) (restore func()) {
	hookMu.Lock()
	h := func(epfd, op, fd int, ev *unix.EpollEvent) error {
		var events uint32
		if ev != nil {
			events = ev.Events
		}
		if errno := f(epfd, op, fd, events); errno != 0 {
			return errno
		}
		return unix.EpollCtl(epfd, op, fd, ev)
	}
	ctlHook.Store(&h)
	return func() {
		ctlHook.Store(nil)
		hookMu.Unlock()
	}
}

// PollerStats is a snapshot of one poller's counters (or their sum).
type PollerStats = pollerStats

// GroupStats is every counter of a group.
type GroupStats = groupStats

// Counters returns every counter of g, per poller and summed: what
// ReadStats reads by name, as a struct for tests.
func Counters(g *Group) GroupStats { return g.counters() }

// InlineGen returns the generation in the WaitInline role word of c's
// poller: how many times the watcher took the role out.
func InlineGen(c any) uint64 { return descOf(c).p.inline.word.Load() & genMask / genUnit }

// WatchPortFD returns the fd of the watch port of c's poller (wait=inline).
func WatchPortFD(c any) int { return descOf(c).p.inline.port.fd }

// InlineWatchLost returns the epoll_ctl error that made c's poller give up
// its watch port (inlineWait.lose), nil while it has not.
func InlineWatchLost(c any) error {
	if err := descOf(c).p.inline.lostErr.Load(); err != nil {
		return *err
	}
	return nil
}

// SetServeClock makes demotion (serverole_linux.go) read f as its clock;
// the returned func restores the monotonic clock.
func SetServeClock(f func() time.Duration) (restore func()) {
	testHookServeClock.Store(&f)
	return func() { testHookServeClock.Store(nil) }
}

// SetServePollHook makes the inline role's holder call f before each of
// its polls; the returned func removes it.
func SetServePollHook(f func()) (restore func()) {
	testHookServePoll.Store(&f)
	return func() { testHookServePoll.Store(nil) }
}

// ServeRole describes the inline role word of poller i of g: "loop" or
// "out", with "+watching" when a goroutine is the watcher; "none" when
// the poller has no role.
func ServeRole(g *Group, i int) string {
	if g.pollers[i].serve == nil {
		return "none" // dispatch=go or hot, or a wait other than nested
	}
	w := g.pollers[i].serve.word.Load()
	s := "loop"
	if w&srOut != 0 {
		s = "out"
	}
	if w&srWatching != 0 {
		s += "+watching"
	}
	return s
}

// ServePortFD returns the fd of poller i's watch port (inline dispatch).
func ServePortFD(g *Group, i int) int { return g.pollers[i].serve.port.fd }

// ServeWatchLost returns the epoll_ctl error that made poller i of g give
// up inline dispatch (serveRole.lose), nil while it has not.
func ServeWatchLost(g *Group, i int) error {
	if err := g.pollers[i].serve.lostErr.Load(); err != nil {
		return *err
	}
	return nil
}

// DemoteRuns and DemoteAfter are demotion's constants.
const (
	DemoteRuns  = demoteRuns
	DemoteAfter = demoteAfter
)

// SweepHot runs s's sweep of its hot connections (dispatch=hot) now, as
// its timer would: two in a row make every connection waiting through both
// go cold.
func SweepHot(s *Server) { s.hot.sweep() }

// HotConns is how many of s's connections are hot now.
func HotConns(s *Server) int {
	s.hot.mu.Lock()
	defer s.hot.mu.Unlock()
	return len(s.hot.list)
}

// SetHotTick sets the sweep period of dispatch=hot and hotread, and what
// counts as busy: a sweeper that is not running reads it as it starts.
func SetHotTick(d time.Duration) (restore func()) {
	old := hotTickNs.Load()
	hotTickNs.Store(int64(d))
	return func() { hotTickNs.Store(old) }
}

// HotPoint names a window of a hot wait for SetHotHook.
type HotPoint = hotPoint

const (
	HookHotBefore    = hookHotBefore
	HookHotAnnounced = hookHotAnnounced
	HookHotWoken     = hookHotWoken
	HookHotChecked   = hookHotChecked
)

// SetHotHook runs f, with the served connection, at each window of every
// hot wait until restored.
func SetHotHook(f func(c net.Conn, at HotPoint)) (restore func()) {
	h := func(sc *serverConn, at hotPoint) { f(sc.c, at) }
	testHookHot.Store(&h)
	return func() { testHookHot.Store(nil) }
}

// HotWaiting is how many of s's hot connections wait now (or are about
// to: their wait announced).
func HotWaiting(s *Server) int {
	s.hot.mu.Lock()
	defer s.hot.mu.Unlock()
	n := 0
	for _, h := range s.hot.list {
		if h.seq.Load()&1 == 1 {
			n++
		}
	}
	return n
}

// SweepConnsHot runs the sweep of every group's hot Conns (hotread) now,
// as its timer would: two in a row make every Conn that read nothing
// through both go cold.
func SweepConnsHot() { connsHot.sweep() }

// ConnsHot is how many Conns of any group are hot now (hotread).
func ConnsHot() int {
	connsHot.mu.Lock()
	defer connsHot.mu.Unlock()
	return len(connsHot.list)
}

// ConnHot reports whether c is hot: its reads go to the runtime's
// netpoller; waiting, whether a Read of it waits there (or is about to).
func ConnHot(c *Conn) (hot, waiting bool) {
	h := c.d.hotw.Load()
	return h != nil, h != nil && h.seq.Load()&1 == 1
}

// ForgetProcs makes hotread=auto read GOMAXPROCS again at its next look,
// for a test that has just changed it, and hot readers see it now.
func ForgetProcs() {
	hotProcs.at.Store(0)
	hotProcs.n.Store(int32(runtime.GOMAXPROCS(0)))
}

// SetHotParkBudget makes d every poller's spin budget as hot readers time
// their parks against it (hotread=auto with one P), until restored.
func SetHotParkBudget(d time.Duration) (restore func()) {
	hotParkBudget.Store(int64(d))
	return func() { hotParkBudget.Store(0) }
}

// HotParks is what c's hot reader has timed since the sweeper's last look
// (hotread=auto with one P): its parks, and those within twice the spin
// budget; 0, 0 while c is cold.
func HotParks(c *Conn) (parks, shorts uint32) {
	h := c.d.hotw.Load()
	if h == nil {
		return 0, 0
	}
	return parksOf(h.timedParks.Load())
}

// HotTimed times one park of dur on a hot wait of its own whose poller's
// spin budget is budget (hotWait.timed), and returns what it counted.
func HotTimed(budget, dur time.Duration) (parks, shorts uint32) {
	p := &poller{}
	p.st.spinBudget.Store(uint64(budget))
	h := &hotWait{d: &desc{p: p}}
	h.timed(dur)
	return parksOf(h.timedParks.Load())
}

// SetSpinFar says, for every poller, whether its typical idle gap is over
// twice its spin budget (hotread=auto with one P), until restored.
func SetSpinFar(far bool) (restore func()) {
	v := int32(-1)
	if far {
		v = 1
	}
	testSpinFar.Store(v)
	return func() { testSpinFar.Store(0) }
}

// HotReadSetting is what hotread c resolves to: off, auto or on.
func HotReadSetting(c Config) string {
	s, err := c.settings()
	if err != nil {
		return err.Error()
	}
	return s.hotRead.String()
}

// SweepConnStaged is one sweep of connsHot for c's hot wait, cut where a
// sweeper can be preempted: it loads the wait's sequence word now, as
// hotSet.sweep does first, and the returned func does the rest of that
// sweep for c (hotWait.sweepConn with the word it loaded, then coldIdle),
// as the sweeper would once it runs again. c must be hot.
func SweepConnStaged(c *Conn) (finish func()) {
	h := c.d.hotw.Load()
	connsHot.mu.Lock()
	seq := h.seq.Load()
	connsHot.mu.Unlock()
	return func() {
		connsHot.mu.Lock()
		idle := h.sweepConn(seq, false)
		h.seen = seq
		connsHot.mu.Unlock()
		if idle {
			h.coldIdle()
		}
	}
}

// ReadAhead reports how many bytes of input a hot wait read ahead for c's
// handler that no Read has taken yet, and whether it holds an error
// instead (readahead_linux.go).
func ReadAhead(c net.Conn) (n int, err bool) {
	s := c.(*Conn).d.aheadOf()
	if s == nil {
		return 0, false
	}
	a := s.Load()
	if a == nil {
		return 0, false
	}
	return a.hi - a.lo, a.err != nil
}

// ReadAheadSetting is whether readahead c resolves to on.
func ReadAheadSetting(c Config) bool {
	s, err := c.settings()
	return err == nil && s.readAhead
}

// SetStickyHook runs f on the poller, with the served connection, before
// it stores the sticky bits of each event for a hot connection, until
// restored.
func SetStickyHook(f func(c net.Conn)) (restore func()) {
	h := func(d *desc) {
		if sc := d.srv.Load(); sc != nil {
			f(sc.c)
		}
	}
	testHookSticky.Store(&h)
	return func() { testHookSticky.Store(nil) }
}

// StaleReadEdge hands c's read direction an edge, as the poller's dispatch
// does for an event that reports input (edge): on a hot connection that
// waits, it is the edge of input that came as the connection went hot,
// which its first read ahead then took (readahead review).
func StaleReadEdge(c net.Conn) { d := descOf(c); d.notify(&d.rd) }

// SetLoopTick makes the loop's watchdog (dispatch=loop) of groups made
// from now on tick at each value sent on ch instead of every loopTick; the
// returned func restores the timer for groups made after it.
func SetLoopTick(ch chan time.Time) (restore func()) {
	testHookLoopTick.Store(&ch)
	return func() { testHookLoopTick.Store(nil) }
}

// LoopState describes the loop of poller i of g (dispatch=loop): "poll"
// while its holder polls or moves between connections, "run" while it
// runs one; "none" when the poller has no loop.
func LoopState(g *Group, i int) string {
	lp := g.pollers[i].loop
	if lp == nil {
		return "none"
	}
	if lp.word.Load()&1 == 1 {
		return "run"
	}
	return "poll"
}

// SetNoInq makes the connections that go hot from now on behave as on a
// kernel that refuses TCP_INQ (testNoInq): their watch takes EPOLLPRI.
func SetNoInq() (restore func()) {
	testNoInq.Store(true)
	return func() { testNoInq.Store(false) }
}

// ReadAheadSize is the read ahead's buffer size (readAheadSize).
const ReadAheadSize = readAheadSize

// PollerWoken returns the operations c's poller has woken, which it
// counts after the batch that woke them: a woken Read may return first.
func PollerWoken(c any) uint64 { return descOf(c).p.stats().Woken }

// SpinFarRuns runs one simulated adaptive spinning policy
// (spin_internal_linux_test.go) through each run of gaps in turn, one
// poller's counters throughout, and returns its spinFar after each.
func SpinFarRuns(t *testing.T, runs ...[]time.Duration) []bool {
	t.Helper()
	a := newSimPolicy(t)
	var st pollerCounters
	far := make([]bool, len(runs))
	for i, gaps := range runs {
		simulateOn(t, a, &st, gaps)
		far[i] = st.spinFar.Load()
	}
	return far
}
