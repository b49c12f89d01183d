package netpoll

import "time"

// PollerStats counts one poller's work since its group was created. Every
// counter only grows, except Descriptors.
type PollerStats struct {
	EpollWaits    uint64        // epoll_wait calls
	BlockingWaits uint64        // times the poller blocked: epoll_wait(-1), or parked (WaitNested)
	Wakeups       uint64        // blocking waits that returned
	EmptyWakeups  uint64        // wakeups whose first poll woke no goroutine
	SpinPolls     uint64        // epoll_wait(0) calls made without blocking: spins, and SpinAuto's poll after events
	SpinHits      uint64        // spin polls that returned events
	SpinDecisions uint64        // SpinAuto: idle periods the poller chose to spin through
	SpinFound     uint64        // SpinAuto: spins that found an event within the budget
	SpinGaveUp    uint64        // SpinAuto: spins that used up the budget and blocked
	SpinTime      time.Duration // SpinAuto: time spent in those spins
	BlockCost     time.Duration // SpinAuto: median process CPU time a blocked idle period cost (Total: the largest)
	Events        uint64        // events returned by epoll_wait
	StaleEvents   uint64        // events for a closed fd or an old generation, dropped

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
	AcceptBackoffs uint64 // accept back-offs while out of fds or memory
	Rotations      uint64 // Exclusive listener registrations re-queued for balance
	HandOffs       uint64 // accept edges handed to this poller for balance

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
}

func (s *PollerStats) add(o *PollerStats) {
	s.EpollWaits += o.EpollWaits
	s.BlockingWaits += o.BlockingWaits
	s.Wakeups += o.Wakeups
	s.SpinPolls += o.SpinPolls
	s.SpinHits += o.SpinHits
	s.SpinDecisions += o.SpinDecisions
	s.SpinFound += o.SpinFound
	s.SpinGaveUp += o.SpinGaveUp
	s.SpinTime += o.SpinTime
	s.BlockCost = max(s.BlockCost, o.BlockCost)
	s.Events += o.Events
	s.EmptyWakeups += o.EmptyWakeups
	s.StaleEvents += o.StaleEvents
	s.CtlAdd += o.CtlAdd
	s.CtlMod += o.CtlMod
	s.CtlDel += o.CtlDel
	s.ReadParks += o.ReadParks
	s.WriteParks += o.WriteParks
	s.EAGAIN += o.EAGAIN
	s.ReadyTokens += o.ReadyTokens
	s.ShortSkips += o.ShortSkips
	s.LevelDisarms += o.LevelDisarms
	s.Accepts += o.Accepts
	s.AcceptBackoffs += o.AcceptBackoffs
	s.Rotations += o.Rotations
	s.HandOffs += o.HandOffs
	s.Sendfiles += o.Sendfiles
	s.SendfileBytes += o.SendfileBytes
	s.Splices += o.Splices
	s.SpliceBytes += o.SpliceBytes
	s.Descriptors += o.Descriptors
}

// descCounters are the per-I/O counters a descriptor keeps for itself, so
// that no counter shared between connections is touched per operation.
type descCounters struct {
	readParks, writeParks, eagain, tokens, skips, ctlMod uint64
}

func (c *descCounters) add(o *descCounters) {
	c.readParks += o.readParks
	c.writeParks += o.writeParks
	c.eagain += o.eagain
	c.tokens += o.tokens
	c.skips += o.skips
	c.ctlMod += o.ctlMod
}

func (c *descCounters) into(s *PollerStats) {
	s.ReadParks += c.readParks
	s.WriteParks += c.writeParks
	s.EAGAIN += c.eagain
	s.ReadyTokens += c.tokens
	s.ShortSkips += c.skips
	s.CtlMod += c.ctlMod
}
