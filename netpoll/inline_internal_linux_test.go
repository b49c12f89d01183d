package netpoll

import (
	"testing"
	"time"
)

// The takeover timer's delay under wait=inline (inlineWait.takeover): it
// doubles, up to inlineHandoffMax, each time the timer finds the role
// taken back since it was armed, and goes back to inlineHandoff when the
// role had stayed out and the timer gives it to the loop goroutine. Driven
// by calling the timer's function by hand on a role word set up for each
// step.
func TestInlineHandoffAdapts(t *testing.T) {
	iw := &inlineWait{p: &poller{}, baton: make(chan struct{}, 1)}
	iw.timer = time.AfterFunc(time.Hour, func() {}) // takeover is called by hand below
	defer iw.timer.Stop()
	iw.handoff.Store(int64(inlineHandoff))
	handoff := func() time.Duration { return time.Duration(iw.handoff.Load()) }

	// The role held again (a holder came back): doubled each time, capped.
	want := inlineHandoff
	for range 6 {
		iw.word.Store(roleInline + waiterUnit)
		iw.armed.Store(true)
		iw.takeover()
		want = min(2*want, inlineHandoffMax)
		if handoff() != want || iw.armed.Load() {
			t.Fatalf("role held: handoff %v, armed %v; want %v, disarmed", handoff(), iw.armed.Load(), want)
		}
	}
	// Out, but moved out again since the timer was armed (holders come
	// and go): re-armed, still at the cap, no takeover.
	iw.word.Store(roleOut + waiterUnit)
	iw.armed.Store(true)
	iw.outSeq.Store(2)
	iw.seenSeq.Store(1)
	iw.takeover()
	if handoff() != inlineHandoffMax || iw.word.Load()&roleMask != roleOut || iw.seenSeq.Load() != 2 {
		t.Fatalf("out and moved: handoff %v, role %d, seen %d; want %v, out, 2", handoff(), iw.word.Load()&roleMask, iw.seenSeq.Load(), inlineHandoffMax)
	}
	// Out since armed: the loop goroutine takes it, the bound goes back.
	iw.takeover()
	if iw.word.Load()&roleMask != roleLoop || handoff() != inlineHandoff || iw.armed.Load() {
		t.Fatalf("out since armed: role %d, handoff %v, armed %v; want loop, %v, disarmed", iw.word.Load()&roleMask, handoff(), iw.armed.Load(), inlineHandoff)
	}
	select {
	case <-iw.baton:
	default:
		t.Fatal("takeover gave the role to the loop goroutine without waking it (no baton)")
	}
	if n := iw.p.st.load(cTakeovers); n != 1 {
		t.Errorf("%d takeovers counted, want 1", n)
	}
}
