package netpoll

import "testing"

// TestServeRoleModelCatchesBrokenMachines runs FuzzServeRole's seeds
// against serve roles broken in one transition or step each, and checks
// that the model catches every one, with the invariant named: the fuzz
// target would find such a bug. The roles are broken from fixedServeRole,
// which keeps a batch on the role at GOMAXPROCS=1 so that the windows of a
// batch are reached; first the test checks that it and the real role pass
// every seed. Three of the mutants put back what the role did as first
// written (FuzzServeRole's comment). The seeds run at GOMAXPROCS 1 and 2.
func TestServeRoleModelCatchesBrokenMachines(t *testing.T) {
	for _, base := range []serveRoleMachine{fixedServeRole, realServeRole} {
		for _, s := range serveRoleSeeds {
			for _, procs := range []int{1, 2} {
				if err := runServeRoleModel(base, procs, s); err != nil {
					t.Fatalf("the base the mutants are made from fails: %v", err)
				}
			}
		}
	}
	for _, b := range serveRoleMutants() {
		caught := ""
	seeds:
		for _, s := range serveRoleSeeds {
			for _, procs := range []int{1, 2} {
				if err := runServeRoleModel(b.m, procs, s); err != nil {
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

// A serveRoleMutant is a broken role and what the model must report.
type serveRoleMutant struct {
	m    serveRoleMachine
	want string // in the error the model reports, |-separated alternatives
}

// serveRoleMutants are fixedServeRole broken in one place each.
func serveRoleMutants() []serveRoleMutant {
	with := func(name string, change func(*serveRoleMachine)) serveRoleMachine {
		m := fixedServeRole
		m.name = name
		change(&m)
		return m
	}
	return []serveRoleMutant{
		{with("go out without arming the port", func(m *serveRoleMachine) { m.noArm = true }), "stranded"},
		{with("go out without making a watcher when w had none", func(m *serveRoleMachine) { m.noSummon = true }), "stranded"},
		{with("the come-back CAS compares the out bit only, not the generation", func(m *serveRoleMachine) {
			m.comeBack = func(word, out uint64) (uint64, bool) {
				if word&srOut == 0 {
					return word, false
				}
				return srComeBackNext(word), true
			}
		}), "must fail"},
		{with("the watcher parks without polling the port first", func(m *serveRoleMachine) { m.noPollFirst = true }), "without polling"},
		{with("stay out for the next connection of a batch if a plain load finds the word unchanged (no CAS)", func(m *serveRoleMachine) {
			m.nextInLoop, m.renewByLoad = false, true
		}), "only the holder"},
		{with("stay out for the next connection of a batch by the renewal's CAS (the role as first written)", func(m *serveRoleMachine) {
			m.nextInLoop = false
		}), "only the holder"},
		{with("a batch kept inline without the kick (the role as first written, at GOMAXPROCS=1)", func(m *serveRoleMachine) {
			m.kickMore = false
		}), "stranded"},
		{with("a takeover leaves the queue to the displaced holder", func(m *serveRoleMachine) { m.queueStays = true }), "stranded"},
		{with("a displaced holder keeps polling", func(m *serveRoleMachine) { m.displacedPolls = true }), "only the holder|hold the role"},
		{with("come back without disarming the port", func(m *serveRoleMachine) { m.noDisarm = true }), "armed at rest"},
		{with("a handler's Goexit while out makes no kick", func(m *serveRoleMachine) { m.noKick = true }), "out at rest|stranded"},
		{with("becomeWatcher does not check stopped", func(m *serveRoleMachine) {
			m.watch = func(w uint64) (uint64, bool) {
				if w&srWatching != 0 {
					return w, false
				}
				return w | srWatching, true
			}
		}), "after stop"},
		{with("the watcher takes the role in loop too", func(m *serveRoleMachine) {
			m.fire = func(w uint64) (uint64, bool) { return (w &^ (srOut | srWatching)) + srGenUnit, true }
		}), "only the holder"},
		{with("the watcher wins the takeover's CAS but does not hold the role (watch's took shadowed)", func(m *serveRoleMachine) {
			m.takenNotHeld = true
		}), "stranded"},
	}
}
