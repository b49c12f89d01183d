package netpoll

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDescModelCatchesBrokenMachines runs the seed corpus of
// FuzzDescStateMachine against state machines broken in one way each, and
// checks that the model catches every one: the fuzz target would find such
// a bug.
func TestDescModelCatchesBrokenMachines(t *testing.T) {
	seeds := descSeeds(t)
	closeWithoutNudge := func(d *desc) error {
		for {
			v := d.ref.Load()
			if v&refClosing != 0 {
				<-d.done
				return net.ErrClosed
			}
			if d.ref.CompareAndSwap(v, v|refClosing) {
				break
			}
		}
		d.decref()
		<-d.done
		return nil
	}
	storeDeadline := func(dr *dir, t time.Time) {
		ns := int64(0)
		if !t.IsZero() {
			ns = t.UnixNano()
		}
		dr.deadline.Store(ns)
	}
	broken := []descMachine{
		{name: "notify sends a second token for one park", notify: func(dr *dir) bool {
			if dr.state.Swap(stReady) == stIdle {
				return false
			}
			dr.send()
			return true
		}},
		{name: "notify forgets the token", notify: func(dr *dir) bool {
			return dr.state.Swap(stReady) == stWaiting
		}},
		{name: "notify drops an edge nobody waits for", notify: func(dr *dir) bool {
			if dr.state.CompareAndSwap(stWaiting, stReady) {
				dr.send()
				return true
			}
			return false
		}},
		{name: "setDeadline does not wake the park", setDeadline: storeDeadline},
		{name: "setDeadline wakes with an invented edge", setDeadline: func(dr *dir, t time.Time) {
			storeDeadline(dr, t)
			if dr.state.CompareAndSwap(stWaiting, stReady) {
				dr.send()
			}
		}},
		{name: "setDeadline sends a token without a park", setDeadline: func(dr *dir, t time.Time) {
			storeDeadline(dr, t)
			dr.state.Store(stIdle)
			select {
			case dr.wake <- struct{}{}:
			default:
			}
		}},
		{name: "close does not wake the parked", close: closeWithoutNudge},
	}
	for _, m := range broken {
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
