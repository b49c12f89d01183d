package main

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"
)

// The spinauto check: GODEBUG=netpollspin=auto spins under back-to-back
// traffic and stops when the traffic stops.
//
// One child, pinned to CPU 0, ping-pongs with an echo child pinned to CPU
// 1 (as the spin check does), then leaves one goroutine parked reading the
// connection and sleeps idleSleeps times: an idle window with a network
// waiter, so that the runtime may spin at every idle moment, but no
// network event. It prints the runtime's counters at the end of the
// traffic and at the end of the window (runtime.ReadMemStats, with
// netpollstats=1). The check asserts:
//
//   - traffic: the spinning P found goroutines (spin-found > 0);
//   - idle window: no session found a goroutine and no blocked period was
//     a hit or had its gap observed (the window held no network event, as
//     designed), there was an idle moment for every sleep (each was a
//     chance to spin), and the sessions started in the window are within
//     the policy's bound: at most missesBelowLow(p) that are not probes, p
//     being the hit rate at the start of the window (every session in the
//     window misses, and nothing in it is a hit, so p only falls; a session
//     that is not a probe needs auto to be spinning, which it stops at the
//     first idle moment with p below 3/8 and does not start again without
//     p reaching 1/2), and at most one probe per autoProbe idle moments at
//     which the typical gap was at most twice the budget, plus one: none
//     at the idle moments the runtime counted as spin-longgap.
//
// The window cannot make the typical gap long: a session that gives up
// moves it towards twice the budget, never past it, and the window has no
// other gap to observe. So the rule that no probe is made while the gap is
// over twice the budget is checked here only through spin-longgap (the
// probes must fit in the idle moments not counted there), not by a window
// whose gap is long.
//   - without the setting, no session, poll, idle moment or timed wakeup.
//
// Whether the runtime has a wakeup cost W to spin with, and how large, is
// decided by the kernel's scheduling of the child's own threads (see
// runtime/netpollspin.go in 002-netpollspin.patch); with a small W the
// traffic phase may find few goroutines. As the shards check does, it
// tries up to three times before it fails for spin-found = 0.

// The constants of netpollspin=auto that the bound is derived from
// (runtime/netpollspin.go; the same as netpoll/spin_linux.go).
const (
	autoLow   = 96 // auto stops spinning at the first idle moment with p < autoLow (3/8 in 1/256 units)
	autoGain  = 8  // an observation moves p 1/autoGain of the way
	autoProbe = 64 // not spinning, one idle moment in autoProbe (with the gap at most 2B) spins
)

// The idle window: idleSleeps sleeps of idleSleep each, about 200ms.
const (
	idleSleeps = 100
	idleSleep  = 2 * time.Millisecond
)

func (c checker) spinAuto() error {
	for _, on := range []bool{false, true} {
		godebug := "netpollstats=1"
		if on {
			godebug = "netpollspin=auto,netpollstats=1"
		}
		var traffic, window map[string]int64
		for try := 0; try < 3; try++ {
			stderr, err := c.pinnedToEcho(godebug, "idle", "-n", strconv.Itoa(c.rounds), "-sleeps", strconv.Itoa(idleSleeps))
			if err != nil {
				return err
			}
			if traffic, window, err = idleSnapshots(stderr); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "spinauto: GODEBUG=%s traffic: rounds=%d spin-sessions=%d spin-probes=%d spin-found=%d spin-gaveup=%d spin-wakes=%d spin-costs=%d spin-w-ns=%d spin-c-ns=%d spin-gap-ns=%d spin-b-ns=%d spin-p=%d spin-on=%d\n",
				godebug, c.rounds, traffic["spin-sessions"], traffic["spin-probes"], traffic["spin-found"], traffic["spin-gaveup"],
				traffic["spin-wakes"], traffic["spin-costs"], traffic["spin-w-ns"], traffic["spin-c-ns"], traffic["spin-gap-ns"],
				traffic["spin-b-ns"], traffic["spin-p"], traffic["spin-on"])
			if !on || traffic["spin-found"] > 0 {
				break
			}
		}
		d := delta(traffic, window)
		fmt.Fprintf(c.out, "spinauto: GODEBUG=%s idle window: sleeps=%d idle-moments=%d spin-longgap=%d spin-sessions=%d spin-probes=%d spin-found=%d spin-gap-ns=%d spin-b-ns=%d (bound: %d sessions not probes, %d probes)\n",
			godebug, idleSleeps, d["spin-idle"], d["spin-longgap"], d["spin-sessions"], d["spin-probes"], d["spin-found"],
			window["spin-gap-ns"], window["spin-b-ns"], missesBelowLow(traffic["spin-p"]), probeBound(d))
		if !on {
			for _, name := range []string{"spin-sessions", "spin-polls", "spin-found", "spin-idle", "spin-wakes"} {
				if window[name] != 0 {
					return fmt.Errorf("spinauto: %s=%d with the setting off, want 0", name, window[name])
				}
			}
			continue
		}
		if traffic["spin-found"] == 0 {
			return fmt.Errorf("spinauto: the spinning P found no goroutine in %d round trips, three times (spin-w-ns=%d, spin-sessions=%d)",
				c.rounds, traffic["spin-w-ns"], traffic["spin-sessions"])
		}
		if err := judgeIdleWindow(traffic, window, idleSleeps); err != nil {
			return err
		}
	}
	fmt.Fprintln(c.out, "spinauto: ok, auto spins under back-to-back traffic and stops when it stops")
	return nil
}

// judgeIdleWindow checks the counters at the start (before) and the end
// (after) of an idle window of sleeps sleeps against the policy.
func judgeIdleWindow(before, after map[string]int64, sleeps int) error {
	d := delta(before, after)
	switch {
	case before["spin-w-ns"] == 0:
		return errors.New("spinauto: no wakeup timed during the traffic (spin-w-ns=0), so auto never decides")
	case d["spin-found"] != 0 || d["spin-blocked-hits"] != 0 || d["spin-blocked-gaps"] != 0:
		return fmt.Errorf("spinauto: %d sessions and %d blocked periods (%d observed as hits) found a goroutine in the idle window, which has no network event",
			d["spin-found"], d["spin-blocked-gaps"], d["spin-blocked-hits"])
	case d["spin-idle"] < int64(sleeps):
		return fmt.Errorf("spinauto: %d idle moments in a window of %d sleeps, want one or more per sleep", d["spin-idle"], sleeps)
	}
	if k, n := missesBelowLow(before["spin-p"]), d["spin-sessions"]-d["spin-probes"]; n > int64(k) {
		return fmt.Errorf("spinauto: %d sessions that were not probes in the idle window, want at most %d (misses from p=%d to below 3/8)",
			n, k, before["spin-p"])
	}
	if most := probeBound(d); d["spin-probes"] > most {
		return fmt.Errorf("spinauto: %d probes in %d idle moments (%d of them with the typical gap over twice the budget), want at most %d",
			d["spin-probes"], d["spin-idle"], d["spin-longgap"], most)
	}
	return nil
}

// probeBound returns the most probes the policy may make in a window with
// the counter deltas d: one per autoProbe idle moments at which the
// typical gap was at most twice the budget, plus one (the probe count runs
// on from before the window).
func probeBound(d map[string]int64) int64 {
	return max(0, d["spin-idle"]-d["spin-longgap"])/autoProbe + 1
}

// missesBelowLow returns how many misses in a row take the hit rate p
// (1/256 units) below 3/8, by the runtime's integer update
// p += (0 - p) / autoGain: the most sessions that are not probes a window
// of misses can have, auto spinning at most until the idle moment at which
// it sees p below 3/8.
func missesBelowLow(p int64) int {
	n := 0
	for ; p >= autoLow; n++ {
		p += (0 - p) / autoGain
	}
	return n
}

// idleSnapshots returns the counters printed at the end of the traffic
// and at the end of the idle window: the first two of the idle child's
// three edgepoll lines (the third is printed when main returns).
func idleSnapshots(stderr []byte) (traffic, window map[string]int64, err error) {
	lines := statLines(stderr)
	if len(lines) != 3 {
		return nil, nil, fmt.Errorf("spinauto: %d edgepoll lines from the idle child, want 3 (is netpollstats=1 honoured at ReadMemStats?):\n%s", len(lines), stderr)
	}
	if traffic, err = counters(lines[0]); err != nil {
		return nil, nil, err
	}
	if window, err = counters(lines[1]); err != nil {
		return nil, nil, err
	}
	return traffic, window, nil
}

// counters parses the integer key=value fields of an edgepoll line.
func counters(line string) (map[string]int64, error) {
	kv := map[string]int64{}
	for _, name := range []string{"spin-sessions", "spin-polls", "spin-found", "spin-gaveup", "spin-probes",
		"spin-idle", "spin-blocked-hits", "spin-wakes", "spin-longgap", "spin-blocked-gaps", "spin-costs",
		"spin-w-ns", "spin-c-ns", "spin-gap-ns", "spin-b-ns", "spin-p", "spin-on"} {
		v, err := statIn(line, name)
		if err != nil {
			return nil, err
		}
		kv[name] = int64(v)
	}
	return kv, nil
}

// delta returns after minus before, counter by counter.
func delta(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		d[k] = v - before[k]
	}
	return d
}

// idleAfterPingPong is the spinauto child: rounds round trips with the
// echo server at peer, then an idle window of sleeps sleeps of idleSleep,
// with one goroutine parked reading the connection (a network waiter, so
// that each sleep is an idle moment at which the runtime may spin) and no
// network event. runtime.ReadMemStats before and after the window makes
// the runtime print its counters (netpollstats=1) around it.
func idleAfterPingPong(rounds, sleeps int, peer string) error {
	c, err := net.Dial("tcp", peer)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ping(c, rounds); err != nil {
		return err
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for range sleeps {
		time.Sleep(idleSleep)
	}
	runtime.ReadMemStats(&ms)
	c.Close()
	if err := <-read; !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("idle reader: %v, want the connection closed under it", err)
	}
	return nil
}
