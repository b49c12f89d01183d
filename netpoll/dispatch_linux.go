package netpoll

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// dispatch hands each event to its descriptor's directions.
func (p *poller) dispatch(evs []unix.EpollEvent) (woke int, stop bool) {
	for i := range evs {
		ev := &evs[i]
		fd := int(ev.Fd)
		if fd == p.evfd {
			stop = true
			continue
		}
		if p.inline != nil && fd == p.inline.kickfd {
			continue // a kick: the holder checks its token after the poll
		}
		if p.serve != nil && fd == p.serve.kickfd {
			continue // a kick: the role is held again, which is all it was for
		}
		d := p.table.get(fd)
		if d == nil || d.gen != uint32(ev.Pad) {
			p.st.inc(cStaleEvents)
			continue
		}
		if ev.Events&stickyEvents != 0 {
			if h := testHookSticky.Load(); h != nil && d.hot() {
				(*h)(d)
			}
		}
		woke += d.event(ev.Events)
		if d.mode != edgeTriggered || d.hot() {
			if ev.Events&stickyEvents != 0 {
				d.kickSticky() // after event stored them (readahead_linux.go)
			}
			p.rearmAfterEvent(d)
		}
	}
	return woke, stop
}

// levelGuard stops a levelTriggered poller from spinning on readers that do
// not read: a batch that woke nobody yields the P so they can run, and once
// such batches have gone on for levelRepeatWindow their read interest is
// disarmed until they park again (two EPOLL_CTL_MOD calls, counted).
func (p *poller) levelGuard(evs []unix.EpollEvent, woke int) {
	if len(evs) == 0 || woke > 0 {
		p.repeatSince = time.Time{}
		return
	}
	now := time.Now()
	if p.repeatSince.IsZero() {
		p.repeatSince = now
	}
	if now.Sub(p.repeatSince) < levelRepeatWindow {
		runtime.Gosched()
		return
	}
	p.repeatSince = time.Time{}
	for i := range evs {
		d := p.table.get(int(evs[i].Fd))
		if d == nil || d.gen != uint32(evs[i].Pad) || d.mode != levelTriggered || readWaits(d) {
			continue
		}
		if d.incref() != nil {
			continue // closing; and without a reference its fd may be reused under the MOD
		}
		d.armMu.Lock()
		if a := d.armed.Load(); a&unix.EPOLLIN != 0 && !readWaits(d) && !d.failed() {
			// A failed MOD leaves armed as it was, so the next park would
			// not arm: fail d, lest its registration be gone (fail).
			if err := p.modify(d, a&^readInterest(d)); err != nil {
				p.fail(d, err)
			} else {
				p.st.inc(cLevelDisarms)
			}
		}
		d.armMu.Unlock()
		d.decref()
	}
}
