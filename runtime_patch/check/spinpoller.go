package main

import (
	"fmt"
	"strconv"
)

// The spinpoller check: a spinning M holds the poller role, so no other M
// blocks in netpoll while a session of netpollspin runs.
//
// An M blocked in epoll_wait on the epoll fd that the spinner polls is
// woken by the kernel for every event all the same (ep_poll_callback):
// a cross-CPU wakeup per event that the spin exists to save. The runtime
// now starts a session only while no M is blocked in netpoll, and holds
// sched.lastpoll at 0 for the session, as a blocked poller does, so that
// other Ms stop instead of blocking there. It counts the Ms that enter a
// blocking netpoll while a session runs (spin-beside-poller; before the
// fix it also counted the sessions started while an M was blocked) and
// the idle moments not spun because one was (spin-poller-busy).
//
// The child runs spinPollerPairs concurrent in-process ping-pongs of
// spinPollerRounds times -n round trips each, with
// GOMAXPROCS=spinPollerProcs and netpollspin=50, where several Ms go idle
// at once. The check asserts spin-beside-poller=0 and that sessions ran
// (tried up to three times if none did, as the other spin checks do).
// Before the fix the same run counted thousands (4,550 of 7,740 sessions
// in one run).
//
// The rounds are many because the next fault the check found was narrow:
// while a session claimed netpollSpinner before it took the poller role,
// an M that won the role in that moment counted a session that never
// started. With -n rounds alone (2,000) one run in eight to thirty counted
// it; with ten times as many, 7 runs in 30 (runtime_patch/README.md, 002).
// The run takes about half a second.

const (
	spinPollerProcs  = 4
	spinPollerPairs  = 4
	spinPollerRounds = 10 // times -n
)

func (c checker) spinPoller() error {
	env := []string{"GOMAXPROCS=" + strconv.Itoa(spinPollerProcs)}
	godebug := "netpollspin=50,netpollstats=1"
	names := []string{"spin-sessions", "spin-found", "spin-beside-poller", "spin-poller-busy"}
	for try := 1; ; try++ {
		_, stderr, err := c.child(godebug, env, nil, "pingpong", "-n", strconv.Itoa(spinPollerRounds*c.rounds), "-pairs", strconv.Itoa(spinPollerPairs))
		if err != nil {
			return err
		}
		st, err := namedCounters(stderr, names)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "spinpoller: GODEBUG=%s GOMAXPROCS=%d pairs=%d rounds=%d", godebug, spinPollerProcs, spinPollerPairs, spinPollerRounds*c.rounds)
		for _, name := range names {
			fmt.Fprintf(c.out, " %s=%d", name, st[name])
		}
		fmt.Fprintln(c.out)
		if st["spin-beside-poller"] != 0 {
			return fmt.Errorf("spinpoller: %d Ms blocked in netpoll beside a spin session, want 0: the spinner must hold the poller role", st["spin-beside-poller"])
		}
		if st["spin-sessions"] > 0 {
			break
		}
		if try == 3 {
			return fmt.Errorf("spinpoller: no spin session in three runs: the check tested nothing")
		}
	}
	fmt.Fprintln(c.out, "spinpoller: ok, no M blocked in netpoll while one spun")
	return nil
}
