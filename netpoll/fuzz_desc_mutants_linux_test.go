package netpoll

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDescModelCatchesBrokenMachines runs the seed corpus of
// FuzzDescStateMachine against state machines broken in one way each, and
// checks that the model catches every one: the fuzz target would find such
// a bug.
func TestDescModelCatchesBrokenMachines(t *testing.T) {
	seeds := descSeeds(t)
	// A mutant's failed run leaves its inline poller running; it must
	// still give back its share of adaptive spinning's wakeup measurement, whose
	// refresher would otherwise open pipes each second for the rest of
	// the process (TestSoak counted them as leaked fds).
	wakeMeter.mu.Lock()
	users := wakeMeter.users
	wakeMeter.mu.Unlock()
	defer func() {
		wakeMeter.mu.Lock()
		defer wakeMeter.mu.Unlock()
		if wakeMeter.users != users {
			t.Errorf("%d adaptive-spinning users of the wakeup measurement after the mutants ran, %d before", wakeMeter.users, users)
		}
	}()
	// closeWaking is desc.close with wake in place of its nudges.
	closeWaking := func(d *desc, wake func(*desc, *dir)) error {
		d.makeDone()
		for {
			v := d.ref.Load()
			if v&refClosing != 0 {
				<-*d.done.Load()
				return net.ErrClosed
			}
			if d.ref.CompareAndSwap(v, v|refClosing) {
				break
			}
		}
		wake(d, &d.rd)
		wake(d, &d.wr)
		d.decref()
		<-*d.done.Load()
		return nil
	}
	closeWithoutNudge := func(d *desc) error { return closeWaking(d, func(*desc, *dir) {}) }
	storeDeadline := func(_ *desc, dr *dir, t time.Time) {
		ns := int64(0)
		if !t.IsZero() {
			ns = t.UnixNano()
		}
		dr.deadline.Store(ns)
	}
	broken := []descMachine{
		{name: "notify sends a second token for one park", notify: func(d *desc, dr *dir) bool {
			if dr.state.Swap(stReady) == stEmpty {
				return false
			}
			d.send(dr)
			return true
		}},
		{name: "notify forgets the token", notify: func(d *desc, dr *dir) bool {
			return dr.state.Swap(stReady) == stWaiting
		}},
		{name: "notify drops an edge nobody waits for", notify: func(d *desc, dr *dir) bool {
			if dr.state.CompareAndSwap(stWaiting, stReady) {
				d.send(dr)
				return true
			}
			return false
		}},
		{name: "setDeadline does not wake the park", setDeadline: storeDeadline},
		{name: "setDeadline wakes with an invented edge", setDeadline: func(d *desc, dr *dir, t time.Time) {
			storeDeadline(d, dr, t)
			if dr.state.CompareAndSwap(stWaiting, stReady) {
				d.send(dr)
			}
		}},
		{name: "setDeadline sends a token without a park", setDeadline: func(d *desc, dr *dir, t time.Time) {
			storeDeadline(d, dr, t)
			dr.state.Store(stEmpty)
			select {
			case dr.token <- struct{}{}:
			default:
			}
		}},
		{name: "close does not wake the parked", close: closeWithoutNudge},

		// Short reads.
		{name: "skips after a short read that stopped with something pending", transfer: brokenIO(ignoreSticky)},
		{name: "a sticky bit is cleared when the edge is consumed", transfer: brokenIO(clearStickyOnConsume)},
		{name: "the edge is consumed after the read instead of before it", transfer: brokenIO(consumeAfter)},
		{name: "a full read leaves the skip armed", transfer: brokenIO(keepDrained)},
		{name: "the poller drops sticky bits", stick: func(*desc, uint32) {}},

		// wait=inline: a token for an operation waiting on the epoll fd
		// itself reaches it only with a kick through the epoll instance.
		{name: "inline: an edge's token comes without a kick", inline: true, notify: func(d *desc, dr *dir) bool {
			if dr.state.Swap(stReady) != stWaiting {
				return false
			}
			dr.token <- struct{}{} // dir.send without kickIfHolder
			return true
		}},
		{name: "inline: close wakes the parked without a kick", inline: true, close: func(d *desc) error {
			return closeWaking(d, func(d *desc, dr *dir) {
				if dr.state.CompareAndSwap(stWaiting, stEmpty) {
					dr.token <- struct{}{} // dir.nudge without kickIfHolder
				}
			})
		}},
	}
	for _, m := range broken {
		m.skip = true
		if m.transfer == nil {
			m.transfer = realMachine.transfer
		}
		if m.stick == nil {
			m.stick = realMachine.stick
		}
		if m.notify == nil {
			m.notify = realMachine.notify
		}
		if m.setDeadline == nil {
			m.setDeadline = realMachine.setDeadline
		}
		if m.close == nil {
			m.close = realMachine.close
		}
		t.Run(m.name, func(t *testing.T) {
			for _, s := range seeds {
				if err := runDescModel(m, s, 100*time.Millisecond); err != nil {
					t.Logf("caught by seed %q: %v", s, err)
					return
				}
			}
			t.Errorf("no seed of %d caught it", len(seeds))
		})
	}
}

// descSeeds reads the committed seed corpus of FuzzDescStateMachine.
func descSeeds(t *testing.T) []string {
	t.Helper()
	dir := "testdata/fuzz/FuzzDescStateMachine"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var seeds []string
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		var s string
		if _, err := fmt.Sscanf(strings.TrimPrefix(string(b), "go test fuzz v1\n"), "string(%q)", &s); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		seeds = append(seeds, s)
	}
	if len(seeds) < 10 {
		t.Fatalf("%d seeds in %s, want the committed corpus", len(seeds), dir)
	}
	return seeds
}

// ioBug is one way brokenIO breaks short-read skipping.
type ioBug int

const (
	ignoreSticky ioBug = iota
	clearStickyOnConsume
	consumeAfter
	keepDrained
)

// brokenIO returns desc.transfer for stream operations with one bug: the real
// one's steps (skip when drained, consume, syscall, mark drained), one of
// them done wrong.
func brokenIO(bug ioBug) func(d *desc, dr *dir, size int, op func() (int, error)) (int, error) {
	return func(d *desc, dr *dir, size int, op func() (int, error)) (int, error) {
		if dr.drained {
			if bug != keepDrained {
				dr.drained = false
			}
			if d.sticky.Load() == 0 || bug == ignoreSticky {
				if _, err := d.awaitReady(dr); err != nil {
					return 0, err
				}
			}
		}
		for {
			if bug != consumeAfter {
				dr.consume()
			}
			if bug == clearStickyOnConsume {
				d.sticky.Store(0)
			}
			n, err := op()
			if bug == consumeAfter {
				dr.consume()
			}
			switch err {
			case nil:
				if n > 0 && n < size {
					dr.drained = true
				} else if bug != keepDrained {
					dr.drained = false
				}
				return n, nil
			case unix.EAGAIN:
				if _, err := d.awaitReady(dr); err != nil {
					return 0, err
				}
			default:
				return n, err
			}
		}
	}
}
