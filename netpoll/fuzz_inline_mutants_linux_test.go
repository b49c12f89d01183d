package netpoll

import "testing"

// TestInlineRoleModelCatchesBrokenMachines runs FuzzInlineRole's seeds
// against role words broken in one transition each, and checks that the
// model catches every one: the fuzz target would find such a bug.
func TestInlineRoleModelCatchesBrokenMachines(t *testing.T) {
	with := func(name string, change func(*roleMachine)) roleMachine {
		m := realRole
		m.name = name
		change(&m)
		return m
	}
	// leaveWith is leaveNext over a broken moveOutNext.
	leaveWith := func(moveOut func(w, add uint64, lt bool, owe owing) (uint64, bool, bool)) func(uint64, bool, owing) (uint64, bool, bool) {
		return func(w uint64, lt bool, owe owing) (uint64, bool, bool) {
			if w >= waiterUnit || w&lostBit != 0 {
				return moveOut(w, 0, lt, owe)
			}
			return leaveNext(w, lt, owe)
		}
	}
	owesWithoutPassed := func(w, add uint64, lt bool, owe owing) (uint64, bool, bool) {
		if owe == oweWoken && w&armedBit == 0 && w&lostBit == 0 && lt && (w+add)/waiterUnit < inlineCrowd {
			return withRole(w, roleOut, owedBit) + add, false, false
		}
		return moveOutNext(w, add, lt, owe)
	}
	broken := []struct {
		m    roleMachine
		want string // in the error the model reports, |-separated alternatives
	}{
		{with("a holder leaves the arm owed without checking passed (a readied goroutine settled before the owed bit was set)", func(m *roleMachine) {
			m.moveOut, m.leave = owesWithoutPassed, leaveWith(owesWithoutPassed)
		}), "stranded"},
		{with("the settle point clears the owed bit without arming the port", func(m *roleMachine) {
			m.settle = func(w uint64) (uint64, bool) {
				if w&owedBit == 0 {
					return w, false
				}
				return w &^ owedBit, false
			}
		}), "stranded"},
		{with("the settle point leaves the owed arm to someone else", func(m *roleMachine) {
			m.settle = func(w uint64) (uint64, bool) { return w, false }
		}), "stranded"},
		{with("the watcher takes over without moving the generation on", func(m *roleMachine) {
			m.fire = func(w uint64) (uint64, bool, bool) {
				next, took, takeover := fireNext(w)
				if takeover {
					next -= genUnit
				}
				return next, took, takeover
			}
		}), "generation"},
		{with("the watcher takes the role whatever it is (an operation holds it)", func(m *roleMachine) {
			m.fire = func(w uint64) (uint64, bool, bool) {
				if w&roleMask == roleInline {
					return withRole(w, roleLoop, 0) + genUnit, true, true
				}
				return fireNext(w)
			}
		}), "polls E1"},
		{with("the watcher treats a fire with the role out as idle", func(m *roleMachine) {
			m.fire = func(w uint64) (uint64, bool, bool) {
				if w&roleMask == roleOut {
					return w &^ armedBit, false, false
				}
				return fireNext(w)
			}
		}), "stranded"},
		{with("retire keeps an owed arm (it is paid after stop)", func(m *roleMachine) {
			m.retire = func(w uint64) uint64 { return retireNext(w) | w&owedBit }
		}), "after stop"},
		{with("an operation parking with a deadline calls the loop without arming the port", func(m *roleMachine) {
			m.park = func(w uint64, deadline bool) (uint64, parkHow) {
				next, how := parkNext(w, deadline)
				if how == parkCall {
					return withRole(w, roleLoop, 0) + waiterUnit, parkWaiter
				}
				return next, how
			}
		}), "stranded"},
	}
	for _, b := range broken {
		caught := ""
	seeds:
		for _, s := range inlineSeeds {
			for _, lt := range []bool{false, true} {
				if err := runInlineModel(b.m, s, lt); err != nil {
					caught = err.Error()
					break seeds
				}
			}
		}
		switch {
		case caught == "":
			t.Errorf("%s: not caught by any seed", b.m.name)
		case !matchesAny(caught, b.want):
			t.Errorf("%s: caught as %q, want %q", b.m.name, caught, b.want)
		default:
			t.Logf("%s: caught: %s", b.m.name, caught)
		}
	}
}
