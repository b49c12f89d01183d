package netpoll

import "time"

// PollerStats counts one poller's work since its group was created. Every
// counter only grows, except Descriptors.
type PollerStats struct {
	EpollWaits    uint64        // epoll_wait calls
	EmptyPolls    uint64        // epoll_wait calls that returned no event
	BlockingWaits uint64        // times the poller blocked: epoll_wait(-1), or parked (WaitNested; under WaitInline, the holder parked too)
	Wakeups       uint64        // blocking waits that returned
	EmptyWakeups  uint64        // wakeups whose first poll woke no goroutine
	Woken         uint64        // parked operations (reads, writes, accepts) the poller's events woke
	SpinPolls     uint64        // epoll_wait(0) calls made without blocking: spins, and SpinAuto's poll after events
	SpinHits      uint64        // spin polls that returned events
	SpinDecisions uint64        // SpinAuto: idle periods the poller chose to spin through
	SpinFound     uint64        // SpinAuto: spins that found an event within the budget
	SpinGaveUp    uint64        // SpinAuto: spins that used up the budget and blocked
	SpinTime      time.Duration // SpinAuto: time spent in those spins
	SpinRefused   uint64        // SpinAuto: idle periods it would have spun through but blocked, refused by the CPU quota gate (doc.go, "Spinning")
	SpinUnpaid    uint64        // SpinAuto: idle periods its spins' hit rate asked to spin through but blocked, the spins costing more CPU per event found than 2 blocks (doc.go, "Spinning")
	BlockCost     time.Duration // SpinAuto: process CPU time a blocked idle period costs, the median of clean samples (Total: the largest)
	Events        uint64        // events returned by epoll_wait
	StaleEvents   uint64        // events for a closed fd or an old generation, dropped

	// WaitInline (inline_linux.go).
	InlineWaits   uint64 // parks that waited on the epoll fd themselves (took the poller's role)
	StepAsides    uint64 // of those, the ones that woke others before their own event came and went on waiting on their channel
	Takeovers     uint64 // times the role, left out with operations parked, went to the poller's goroutine: by the timer, or for an operation with a deadline
	CrowdHandoffs uint64 // times a holder gave the role to the poller's goroutine because inlineCrowd operations or more were parked

	CtlAdd uint64 // EPOLL_CTL_ADD calls
	CtlMod uint64 // EPOLL_CTL_MOD calls (OneShot re-arms, LevelTriggered EPOLLOUT)
	CtlDel uint64 // EPOLL_CTL_DEL calls

	ReadParks   uint64 // reads and accepts that parked
	WriteParks  uint64 // writes and connects that parked
	EAGAIN      uint64 // syscalls that returned EAGAIN
	ReadyTokens uint64 // edges consumed after EAGAIN without parking
	ShortSkips  uint64 // reads and writes that went to wait without a syscall after a short one (Config.ShortRead)

	LevelDisarms   uint64 // LevelTriggered readers disarmed for not reading
	Accepts        uint64 // connections accepted on this poller
	AcceptEAGAIN   uint64 // accept4 calls on this poller that found no connection (EAGAIN): a woken acceptor another took the connection from
	AcceptBackoffs uint64 // accept back-offs while out of fds or memory
	Rotations      uint64 // Exclusive listener registrations re-queued for balance
	HandOffs       uint64 // accept turns passed to this poller by balancing (an edge handed over)

	// Zero copy (Conn.ReadFrom, Conn.WriteTo), counted on the poller of
	// the Conn whose method ran.
	Sendfiles     uint64 // sendfile calls
	SendfileBytes uint64 // bytes they sent
	Splices       uint64 // splice calls, into and out of the pipe
	SpliceBytes   uint64 // bytes spliced to the destination

	Descriptors uint64 // conns and listener registrations on this poller now
}

// Stats is a snapshot of a group's counters, per poller and summed.
type Stats struct {
	Pollers []PollerStats
	Total   PollerStats

	// SpinAuto only (zero otherwise): W, the wakeup round trip through the
	// runtime's netpoller as measured in this process now, and the largest
	// budget a poller chose at its latest idle moment. See doc.go,
	// "Spinning".
	WakeCost   time.Duration
	SpinBudget time.Duration

	// CPULimit is the process's CPU limit in CPUs (its cgroup's quota over
	// its period, the tightest on the way to the root), as SpinAuto reads
	// it; 0 when there is none or no SpinAuto poller runs. See doc.go,
	// "Spinning".
	CPULimit float64
}

// counter names one counter: its slot in a poller's pollerCounters and
// the PollerStats field it fills. This block and PollerStats.counters are
// the one list of counters; the PollerStats fields that are not counters
// (SpinTime, BlockCost, Descriptors) are filled by poller.stats and summed
// by add by hand.
type counter uint8

const (
	// Counted by operations on the poller's connections, in one of the
	// poller's opStripes stripes chosen by fd (opCounters), so that
	// operations on different connections seldom write the same cache
	// line, and no descriptor carries a counter.
	cReadParks counter = iota
	cWriteParks
	cEAGAIN
	cReadyTokens
	cShortSkips
	cCtlMod

	// Kept per poller (pollerCounters).
	cEpollWaits
	cEmptyPolls
	cBlockingWaits
	cWakeups
	cEmptyWakeups
	cWoken
	cSpinPolls
	cSpinHits
	cSpinDecisions
	cSpinFound
	cSpinGaveUp
	cSpinRefused
	cSpinUnpaid
	cEvents
	cStaleEvents
	cInlineWaits
	cStepAsides
	cTakeovers
	cCrowdHandoffs
	cCtlAdd
	cCtlDel
	cLevelDisarms
	cAccepts
	cAcceptEAGAIN
	cAcceptBackoffs
	cRotations
	cAcceptTurns
	cSendfiles
	cSendfileBytes
	cSplices
	cSpliceBytes

	numCounters
)

// numOpCounters: the counters below it are counted by operations, striped.
const numOpCounters = cEpollWaits

// counters returns, for each counter, the PollerStats field it fills.
func (s *PollerStats) counters() [numCounters]*uint64 {
	return [numCounters]*uint64{
		cReadParks:      &s.ReadParks,
		cWriteParks:     &s.WriteParks,
		cEAGAIN:         &s.EAGAIN,
		cReadyTokens:    &s.ReadyTokens,
		cShortSkips:     &s.ShortSkips,
		cCtlMod:         &s.CtlMod,
		cEpollWaits:     &s.EpollWaits,
		cEmptyPolls:     &s.EmptyPolls,
		cBlockingWaits:  &s.BlockingWaits,
		cWakeups:        &s.Wakeups,
		cEmptyWakeups:   &s.EmptyWakeups,
		cWoken:          &s.Woken,
		cSpinPolls:      &s.SpinPolls,
		cSpinHits:       &s.SpinHits,
		cSpinDecisions:  &s.SpinDecisions,
		cSpinFound:      &s.SpinFound,
		cSpinGaveUp:     &s.SpinGaveUp,
		cSpinRefused:    &s.SpinRefused,
		cSpinUnpaid:     &s.SpinUnpaid,
		cEvents:         &s.Events,
		cStaleEvents:    &s.StaleEvents,
		cInlineWaits:    &s.InlineWaits,
		cStepAsides:     &s.StepAsides,
		cTakeovers:      &s.Takeovers,
		cCrowdHandoffs:  &s.CrowdHandoffs,
		cCtlAdd:         &s.CtlAdd,
		cCtlDel:         &s.CtlDel,
		cLevelDisarms:   &s.LevelDisarms,
		cAccepts:        &s.Accepts,
		cAcceptEAGAIN:   &s.AcceptEAGAIN,
		cAcceptBackoffs: &s.AcceptBackoffs,
		cRotations:      &s.Rotations,
		cAcceptTurns:    &s.HandOffs,
		cSendfiles:      &s.Sendfiles,
		cSendfileBytes:  &s.SendfileBytes,
		cSplices:        &s.Splices,
		cSpliceBytes:    &s.SpliceBytes,
	}
}

func (s *PollerStats) add(o *PollerStats) {
	to, from := s.counters(), o.counters()
	for c := range numCounters {
		*to[c] += *from[c]
	}
	s.SpinTime += o.SpinTime
	s.BlockCost = max(s.BlockCost, o.BlockCost)
	s.Descriptors += o.Descriptors
}
