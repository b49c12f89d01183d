package netpoll

import (
	"strings"
	"testing"
	"time"
)

// TestServeModelCatchesBrokenMachines runs FuzzServeHandOff's seeds
// against hand-offs broken in one way each, and checks that the model
// catches every one: the fuzz target would find such a bug.
func TestServeModelCatchesBrokenMachines(t *testing.T) {
	// closeWith is desc.close with wake in place of the read direction's
	// nudge.
	closeWith := func(wake func(*desc, *dir)) func(*desc) error {
		return func(d *desc) error {
			d.makeDone()
			for {
				v := d.ref.Load()
				if v&refClosing != 0 {
					<-*d.done.Load()
					return nil
				}
				if d.ref.CompareAndSwap(v, v|refClosing) {
					break
				}
			}
			wake(d, &d.rd)
			d.nudge(&d.wr)
			d.decref()
			<-*d.done.Load()
			return nil
		}
	}
	broken := []struct {
		m    serveMachine
		want string // in the error the model reports, |-separated alternatives
	}{
		{serveMachine{name: "a hand-off that drops a ready edge (stores serve over it)", skip: true,
			notify: (*desc).notify, close: (*desc).close, check: realServe.check,
			window: func(dr *dir, at string) {
				if at == "before-serve" {
					dr.state.CompareAndSwap(stReady, stEmpty)
				}
			}}, "stranded"},
		{serveMachine{name: "a hand-off that skips the socket check", skip: false,
			notify: (*desc).notify, close: (*desc).close, check: func(int) bool { return false }}, "stranded"},
		{serveMachine{name: "a Close that starts the handler whatever the state (a readiness and a Close both start one)", skip: true,
			notify: (*desc).notify, check: realServe.check,
			close: closeWith(func(d *desc, dr *dir) {
				if dr.state.Swap(stEmpty) != stWaiting {
					d.srv.Load().start(false)
				} else {
					d.send(dr)
				}
			})}, "StateClosed reported 2 times|two owners"},
		{serveMachine{name: "a start by an edge that calls the handler without asking the socket (it parks on a stale edge)", skip: true,
			close: (*desc).close, check: realServe.check,
			notify: func(d *desc, dr *dir) bool {
				switch dr.state.Swap(stReady) {
				case stWaiting:
					d.send(dr)
					return true
				case stServe:
					d.srv.Load().start(false)
					return true
				}
				return false
			}}, "goroutine held while idle"},
		{serveMachine{name: "a Close that ends the idle wait without starting anyone (the connection leaks)", skip: true,
			notify: (*desc).notify, check: realServe.check,
			close: closeWith(func(d *desc, dr *dir) {
				if !dr.state.CompareAndSwap(stServe, stEmpty) {
					d.nudge(dr)
				}
			})}, "Close never finished"},
		{serveMachine{name: "an idle timer that closes the connection it takes without asking again, as its owner, whether the wait is over (a fire for an old wait closes one that just went idle)", skip: true,
			notify: (*desc).notify, close: (*desc).close, check: realServe.check,
			fire: func(sc *serverConn) {
				if sc.desc().rd.state.CompareAndSwap(stServe, stEmpty) {
					sc.s.stats.idleTimeouts.Add(1)
					sc.finish()
				}
			}}, "wait not over"},
		{serveMachine{name: "an idle timer that closes an idle connection without taking it out of serve (Close's nudge starts a second owner)", skip: true,
			notify: (*desc).notify, close: (*desc).close, check: realServe.check,
			fire: func(sc *serverConn) {
				if sc.due() == dueIdle && sc.desc().rd.state.Load() == stServe {
					sc.s.stats.idleTimeouts.Add(1)
					sc.finish()
					return
				}
				sc.fire()
			}}, "StateClosed reported 2 times|two owners|finished twice"},
		{serveMachine{name: "an idle timer that takes the connection for an old wait and does not give it back (it is lost)", skip: true,
			notify: (*desc).notify, close: (*desc).close, check: realServe.check,
			fire: func(sc *serverConn) {
				if sc.desc().rd.state.CompareAndSwap(stServe, stEmpty) && sc.due() == dueIdle {
					sc.s.stats.idleTimeouts.Add(1)
					sc.finish()
				}
			}}, "never rested|rests in read state|Close never finished"},
	}
	for _, b := range broken {
		caught := ""
		for _, s := range serveSeeds {
			if err := runServeModel(b.m, s, time.Second); err != nil {
				caught = err.Error()
				break
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

// matchesAny reports whether s contains one of the |-separated wants.
func matchesAny(s, wants string) bool {
	for w := range strings.SplitSeq(wants, "|") {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
