package netpoll

import (
	"errors"
	"fmt"
	"time"
)

// pollerStats is a snapshot of one poller's counters, or their sum over a
// group's pollers; statTable names and describes each field. Every counter
// only grows, except the gauges Descriptors and Conns.
type pollerStats struct {
	EpollWaits, EmptyPolls, BlockingWaits, Wakeups, EmptyWakeups, Woken uint64
	SpinPolls, SpinHits, SpinDecisions, SpinFound, SpinGaveUp           uint64
	SpinRefused, SpinUnpaid                                             uint64
	SpinTime, BlockCost                                                 time.Duration // BlockCost sums as the largest
	Events, StaleEvents                                                 uint64
	InlineWaits, StepAsides, Takeovers, CrowdHandoffs                   uint64
	WatchArms, WatchDisarms, WatchIdleFires, WorkersStarted             uint64
	CtlAdd, CtlMod, CtlDel                                              uint64
	ReadParks, WriteParks, EAGAIN, ReadyTokens, ShortSkips              uint64
	LevelDisarms, Accepts, AcceptEAGAIN, AcceptBackoffs                 uint64
	Rotations, AcceptTurns                                              uint64
	HotEntries, HotExits, HotRefused                                    uint64
	LoopTakeovers, LoopPasses, LoopTicks, LoopReadsAhead                uint64
	Sendfiles, SendfileBytes, Splices, SpliceBytes                      uint64
	Descriptors, Conns                                                  uint64
}

// groupStats is every counter of a group: per poller, summed, and the
// adaptive spinning's group-wide figures.
type groupStats struct {
	Pollers []pollerStats
	Total   pollerStats

	// With adaptive spinning only (zero otherwise): W, the wakeup round
	// trip through the runtime's netpoller as measured in this process
	// now; the largest budget a poller chose at its latest idle moment;
	// the process's CPU limit in CPUs (its cgroup's quota over its
	// period, the tightest on the way to the root), 0 when there is none.
	WakeCost   time.Duration
	SpinBudget time.Duration
	CPULimit   float64
}

// counter names one counter: its slot in a poller's pollerCounters and
// the pollerStats field it fills. This block and pollerStats.counters are
// the one list of counters; the pollerStats fields that are not counters
// (SpinTime, BlockCost, Descriptors, Conns) are filled by poller.stats and summed
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
	cWatchArms
	cWatchDisarms
	cWatchIdleFires
	cWorkersStarted
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
	cHotEntries
	cHotExits
	cHotRefused
	cLoopTakeovers
	cLoopPasses
	cLoopTicks
	cLoopReadsAhead

	numCounters
)

// numOpCounters: the counters below it are counted by operations, striped.
const numOpCounters = cEpollWaits

// counters returns, for each counter, the pollerStats field it fills.
func (s *pollerStats) counters() [numCounters]*uint64 {
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
		cWatchArms:      &s.WatchArms,
		cWatchDisarms:   &s.WatchDisarms,
		cWatchIdleFires: &s.WatchIdleFires,
		cWorkersStarted: &s.WorkersStarted,
		cCtlAdd:         &s.CtlAdd,
		cCtlDel:         &s.CtlDel,
		cLevelDisarms:   &s.LevelDisarms,
		cHotEntries:     &s.HotEntries,
		cHotExits:       &s.HotExits,
		cHotRefused:     &s.HotRefused,
		cLoopTakeovers:  &s.LoopTakeovers,
		cLoopPasses:     &s.LoopPasses,
		cLoopTicks:      &s.LoopTicks,
		cLoopReadsAhead: &s.LoopReadsAhead,
		cAccepts:        &s.Accepts,
		cAcceptEAGAIN:   &s.AcceptEAGAIN,
		cAcceptBackoffs: &s.AcceptBackoffs,
		cRotations:      &s.Rotations,
		cAcceptTurns:    &s.AcceptTurns,
		cSendfiles:      &s.Sendfiles,
		cSendfileBytes:  &s.SendfileBytes,
		cSplices:        &s.Splices,
		cSpliceBytes:    &s.SpliceBytes,
	}
}

func (s *pollerStats) add(o *pollerStats) {
	to, from := s.counters(), o.counters()
	for c := range numCounters {
		*to[c] += *from[c]
	}
	s.SpinTime += o.SpinTime
	s.BlockCost = max(s.BlockCost, o.BlockCost)
	s.Descriptors += o.Descriptors
	s.Conns += o.Conns
}

// Stats is what a user watches of a group: a few counters. ReadStats reads
// the rest by name.
type Stats struct {
	Conns   uint64 // connections open now, accepted and dialed
	Accepts uint64 // connections accepted since the group was created
	Parks   uint64 // operations that waited for readiness: reads and accepts, writes and connects
	Wakeups uint64 // times a blocked poller was woken
}

// A Sample is one named statistic: ReadStats fills Value for each Name.
type Sample struct {
	Name  string
	Value uint64
}

// StatDescription describes one statistic ReadStats can read, in the
// style of runtime/metrics: the name ends in its unit, after a colon.
type StatDescription struct {
	Name        string // such as "/netpoll/epoll/waits:calls"
	Description string
	Cumulative  bool // only grows; false for a value now (a gauge)
	Server      bool // a Server's (read by Server.ReadStats), not a Group's
}

// stat is one row of statTable: its description and how to read it from a
// snapshot.
type stat struct {
	StatDescription
	read func(*statSource) uint64
}

// statSource is what a ReadStats call reads from: a group's counters, or a
// server's.
type statSource struct {
	g *groupStats
	p *pollerStats // the poller read (ReadPollerStats) or the group's Total
	s *serverCounters
}

// statTable lists every statistic, in the order AllStats returns them.
var statTable = func() []stat {
	var t []stat
	counter := func(name, desc string, c counter) {
		t = append(t, stat{StatDescription{name, desc, true, false}, func(s *statSource) uint64 { return *s.p.counters()[c] }})
	}
	gauge := func(name, desc string, cumulative bool, read func(*statSource) uint64) {
		t = append(t, stat{StatDescription{name, desc, cumulative, false}, read})
	}
	server := func(name, desc string, cumulative bool, read func(*serverCounters) uint64) {
		t = append(t, stat{StatDescription{name, desc, cumulative, true}, func(s *statSource) uint64 { return read(s.s) }})
	}
	gauge("/netpoll/pollers:pollers", "Pollers the figures cover: the group's (ReadPollerStats numbers them from 0), or 1 for one poller's.", false, func(s *statSource) uint64 {
		if s.p != &s.g.Total {
			return 1
		}
		return uint64(len(s.g.Pollers))
	})
	gauge("/netpoll/conns:conns", "Connections open now, accepted and dialed.", false, func(s *statSource) uint64 { return s.p.Conns })
	gauge("/netpoll/descriptors:descriptors", "Descriptors registered now: connections and listener registrations.", false, func(s *statSource) uint64 { return s.p.Descriptors })
	counter("/netpoll/accepts:conns", "Connections accepted.", cAccepts)
	counter("/netpoll/parks/read:operations", "Reads and accepts that parked to wait for readiness.", cReadParks)
	counter("/netpoll/parks/write:operations", "Writes and connects that parked to wait for readiness.", cWriteParks)
	counter("/netpoll/eagain:calls", "Syscalls that returned EAGAIN.", cEAGAIN)
	counter("/netpoll/ready-tokens:edges", "Edges consumed after EAGAIN without parking.", cReadyTokens)
	counter("/netpoll/short-skips:operations", "Reads and writes that waited without a syscall after a short one (shortread=on).", cShortSkips)
	counter("/netpoll/epoll/waits:calls", "epoll_wait calls.", cEpollWaits)
	counter("/netpoll/epoll/empty-waits:calls", "epoll_wait calls that returned no event.", cEmptyPolls)
	counter("/netpoll/epoll/events:events", "Events epoll_wait returned.", cEvents)
	counter("/netpoll/epoll/stale-events:events", "Events for a closed descriptor or an old registration, dropped.", cStaleEvents)
	counter("/netpoll/epoll/ctl-add:calls", "EPOLL_CTL_ADD calls.", cCtlAdd)
	counter("/netpoll/epoll/ctl-mod:calls", "EPOLL_CTL_MOD calls (mode=oneshot re-arms, mode=lt write interest).", cCtlMod)
	counter("/netpoll/epoll/ctl-del:calls", "EPOLL_CTL_DEL calls.", cCtlDel)
	counter("/netpoll/poller/blocks:calls", "Times a poller blocked: in epoll_wait(-1), or parked in the runtime's netpoller.", cBlockingWaits)
	counter("/netpoll/poller/wakeups:calls", "Blocks that returned.", cWakeups)
	counter("/netpoll/poller/empty-wakeups:calls", "Wakeups whose first poll woke no operation.", cEmptyWakeups)
	counter("/netpoll/poller/woken:operations", "Parked operations the pollers' events woke.", cWoken)
	counter("/netpoll/spin/polls:calls", "epoll_wait(0) calls made without blocking: spins, and the poll after events.", cSpinPolls)
	counter("/netpoll/spin/hits:calls", "Spin polls that returned events.", cSpinHits)
	counter("/netpoll/spin/decisions:periods", "Adaptive spinning: idle periods a poller chose to spin through.", cSpinDecisions)
	counter("/netpoll/spin/found:periods", "Adaptive spinning: spins that found an event within the budget.", cSpinFound)
	counter("/netpoll/spin/gave-up:periods", "Adaptive spinning: spins that used up the budget and blocked.", cSpinGaveUp)
	counter("/netpoll/spin/refused:periods", "Adaptive spinning: idle periods it would have spun through, refused by the CPU quota.", cSpinRefused)
	counter("/netpoll/spin/unpaid:periods", "Adaptive spinning: idle periods not spun through because spins cost more CPU per event found than blocks.", cSpinUnpaid)
	gauge("/netpoll/spin/time:nanoseconds", "Adaptive spinning: time spent in spins.", true, func(s *statSource) uint64 { return uint64(s.p.SpinTime) })
	gauge("/netpoll/spin/block-cost:nanoseconds", "Adaptive spinning: process CPU time a blocked idle period costs (the largest over pollers).", false, func(s *statSource) uint64 { return uint64(s.p.BlockCost) })
	gauge("/netpoll/spin/wake-cost:nanoseconds", "Adaptive spinning: the wakeup round trip through the runtime's netpoller, measured in this process now.", false, func(s *statSource) uint64 { return uint64(s.g.WakeCost) })
	gauge("/netpoll/spin/budget:nanoseconds", "Adaptive spinning: the largest budget a poller chose at its latest idle moment.", false, func(s *statSource) uint64 { return uint64(s.g.SpinBudget) })
	gauge("/netpoll/spin/cpu-limit:millicpus", "Adaptive spinning: the process's cgroup CPU limit, 0 for none.", false, func(s *statSource) uint64 { return uint64(s.g.CPULimit*1000 + 0.5) })
	counter("/netpoll/inline/waits:operations", "wait=inline: parks that waited on the epoll fd themselves.", cInlineWaits)
	counter("/netpoll/inline/step-asides:operations", "wait=inline: of those, the ones that woke others before their own event came.", cStepAsides)
	counter("/netpoll/inline/takeovers:calls", "wait=inline: times the role went to the poller's goroutine with operations parked: at the first event while a holder ran other code (the watch port's fire), or called by an operation with a deadline.", cTakeovers)
	counter("/netpoll/inline/crowd-handoffs:calls", "wait=inline: times a holder gave the role up because a crowd was parked.", cCrowdHandoffs)
	counter("/netpoll/watch/arms:calls", "wait=inline: times the watch port was armed (EPOLL_CTL_MOD), so that the first event wakes the poller's goroutine.", cWatchArms)
	counter("/netpoll/watch/disarms:calls", "wait=inline: times the watch port was disarmed (EPOLL_CTL_MOD).", cWatchDisarms)
	counter("/netpoll/serve/workers-started:goroutines", "Goroutines a poller that runs handlers inline started: the watcher, and workers for calls off the inline path (kept idle up to 32).", cWorkersStarted)
	counter("/netpoll/watch/idle-fires:calls", "wait=inline: watch port fires that found the role no longer out (the poller's goroutine went back to wait).", cWatchIdleFires)
	counter("/netpoll/level-disarms:operations", "mode=lt: readers disarmed for not reading.", cLevelDisarms)
	counter("/netpoll/hot/entries:conns", "hotread: times a connection's reads went to the runtime's netpoller, through a dup of its fd, as it became busy.", cHotEntries)
	counter("/netpoll/hot/exits:conns", "hotread: times a connection's reads came back to the poller (a sweep found it idle, GOMAXPROCS fell to 1 under auto) or it closed hot.", cHotExits)
	counter("/netpoll/hot/refused:conns", "hotread: times a busy connection stayed on the poller: the process's hot connections at their bound, or the dup or epoll_ctl failed.", cHotRefused)
	counter("/netpoll/loop/takeovers:calls", "dispatch=loop: runs the watchdog took from the loop after they lasted through a whole tick (2 ms), a handler blocked; a new goroutine runs the loop.", cLoopTakeovers)
	counter("/netpoll/loop/passes:calls", "dispatch=loop: times the loop passed to a new goroutine because its handler parked in a Read of its own connection, or ended its goroutine.", cLoopPasses)
	counter("/netpoll/loop/ticks:calls", "dispatch=loop: the watchdog's wakeups, one per tick (2 ms) while the loop runs connections.", cLoopTicks)
	counter("/netpoll/loop/reads-ahead:calls", "dispatch=loop: runs whose input the loop read ahead for the handler, with no poll(2) before the call.", cLoopReadsAhead)
	counter("/netpoll/accept/eagain:calls", "accept4 calls that found no connection: a woken acceptor another beat to it.", cAcceptEAGAIN)
	counter("/netpoll/accept/backoffs:calls", "Accept back-offs while out of descriptors or memory.", cAcceptBackoffs)
	counter("/netpoll/accept/rotations:calls", "Exclusive listener registrations re-queued for balance.", cRotations)
	counter("/netpoll/accept/turns-passed:calls", "Accept turns passed to a poller by balancing.", cAcceptTurns)
	counter("/netpoll/zerocopy/sendfiles:calls", "sendfile calls (Conn.ReadFrom from a file).", cSendfiles)
	counter("/netpoll/zerocopy/sendfile:bytes", "Bytes sendfile sent.", cSendfileBytes)
	counter("/netpoll/zerocopy/splices:calls", "splice calls, into and out of the pipe (Conn.ReadFrom, Conn.WriteTo).", cSplices)
	counter("/netpoll/zerocopy/splice:bytes", "Bytes spliced to the destination.", cSpliceBytes)

	server("/server/conns:conns", "Connections open now.", false, func(c *serverCounters) uint64 { return uint64(max(c.conns.Load(), 0)) })
	server("/server/idle:conns", "Connections waiting for work now.", false, func(c *serverCounters) uint64 { return uint64(max(c.idle.Load(), 0)) })
	server("/server/running:handlers", "Handlers running now.", false, func(c *serverCounters) uint64 { return uint64(max(c.running.Load(), 0)) })
	server("/server/handler-runs:calls", "Handler calls.", true, func(c *serverCounters) uint64 { return c.starts.Load() })
	server("/server/panics:calls", "Handlers that panicked (their connections were closed).", true, func(c *serverCounters) uint64 { return c.panic.Load() })
	server("/server/idle-timeouts:conns", "Connections closed for having waited IdleTimeout for work.", true, func(c *serverCounters) uint64 { return c.idleTimeouts.Load() })
	server("/server/hand-offs:calls", "Times a connection went idle with no goroutine.", true, func(c *serverCounters) uint64 { return c.handOffs.Load() })
	server("/server/hand-off-checks:calls", "Socket checks (poll) a hand-off made: the last Read had not proved the socket drained.", true, func(c *serverCounters) uint64 { return c.checks.Load() })
	server("/server/hand-off-skips:calls", "Hand-offs that needed no check: the last Read was short and no edge had come since.", true, func(c *serverCounters) uint64 { return c.skips.Load() })
	server("/server/hand-off-found:calls", "Hand-off checks that found input already queued: the handler ran again with no wakeup.", true, func(c *serverCounters) uint64 { return c.found.Load() })
	server("/server/inline-calls:calls", "Handler calls run on the goroutine that polled (wait=nested, dispatch=inline) or on the loop (wait=block, dispatch=loop), with no goroutine started and no channel.", true, func(c *serverCounters) uint64 { return c.inlineCalls.Load() })
	server("/server/worker-calls:calls", "Handler calls run on a goroutine of their own, where handlers run inline otherwise: demoted connections, a batch spread, Close, deadlines.", true, func(c *serverCounters) uint64 { return c.workerCalls.Load() })
	server("/server/demotions:conns", "Times a connection was moved to calls on a goroutine of its own, its handler having blocked.", true, func(c *serverCounters) uint64 { return c.demotions.Load() })
	server("/server/promotions:conns", "Times a demoted connection ran inline again, its handler having returned quickly several calls in a row.", true, func(c *serverCounters) uint64 { return c.promotions.Load() })
	server("/server/hot-entries:conns", "Times a connection was made hot (dispatch=hot): its goroutine kept it, waiting on the runtime's netpoller.", true, func(c *serverCounters) uint64 { return c.hotEntries.Load() })
	server("/server/hot-exits:conns", "Times a hot connection went cold: idle for a sweep, closed, a deadline, Shutdown.", true, func(c *serverCounters) uint64 { return c.hotExits.Load() })
	server("/server/hot-calls:calls", "Handler calls made by a hot connection's goroutine, whose wait on the runtime's netpoller found input (dispatch=hot); counted when the connection goes cold.", true, func(c *serverCounters) uint64 { return c.hotCalls.Load() })
	server("/server/hot-reads-ahead:calls", "Reads a hot connection's goroutine made into a pooled buffer that found input, the end of input or an error for its handler's Read, in place of a poll(2): counted when the connection goes cold.", true, func(c *serverCounters) uint64 { return c.readAheads.Load() })
	server("/server/hot-skips:calls", "Waits a hot connection's goroutine began with no syscall, its last read having drained the socket (short-read skipping): counted when the connection goes cold.", true, func(c *serverCounters) uint64 { return c.hotSkips.Load() })
	server("/server/hot-refused:conns", "Times a connection was served cold where it would have been made hot: the Server's bound of hot connections, or a failed dup or epoll_ctl.", true, func(c *serverCounters) uint64 { return c.hotRefused.Load() })
	server("/server/batch-spread:calls", "Connections of a poll's batch run on workers: all of them above one P, all but the first with one.", true, func(c *serverCounters) uint64 { return c.spread.Load() })
	return t
}()

// statIndex finds a statTable row by name.
var statIndex = func() map[string]int {
	m := make(map[string]int, len(statTable))
	for i, st := range statTable {
		m[st.Name] = i
	}
	return m
}()

// AllStats describes every statistic ReadStats can read.
func AllStats() []StatDescription {
	d := make([]StatDescription, len(statTable))
	for i, st := range statTable {
		d[i] = st.StatDescription
	}
	return d
}

// ErrUnknownStat is wrapped by ReadStats's error for a name it cannot read.
var ErrUnknownStat = errors.New("netpoll: unknown statistic")

// readStats fills samples from src, server statistics or not. A name that is
// not one of them leaves its Value 0 and is reported in the error, which
// names the first such; the others are still read.
func readStats(samples []Sample, src *statSource, server bool) error {
	var err error
	for i := range samples {
		j, ok := statIndex[samples[i].Name]
		if !ok || statTable[j].Server != server {
			samples[i].Value = 0
			if err == nil {
				err = fmt.Errorf("%w %q", ErrUnknownStat, samples[i].Name)
			}
			continue
		}
		samples[i].Value = statTable[j].read(src)
	}
	return err
}
