package netpoll

import (
	"sync"
	"sync/atomic"
)

// fdTable maps a registered fd number to its descriptor for one poller. The
// poller's loop reads it without locks; writers serialize on mu. Each set
// gives the descriptor a new generation, which travels in epoll_event data
// with the fd, so an event for a closed fd whose number was reused is told
// apart and dropped.
type fdTable struct {
	mu    sync.Mutex                             // serializes insert, clear and growth
	slots atomic.Pointer[[]atomic.Pointer[desc]] // replaced whole on growth, under mu
	gen   uint32                                 // last generation given out; guarded by mu

	closed bool         // no more set: the group is closing; guarded by mu
	live   atomic.Int64 // descriptors in the table now (Stats), moved under mu
}

func (t *fdTable) get(fd int) *desc {
	s := t.slots.Load()
	if s == nil || fd < 0 || fd >= len(*s) {
		return nil
	}
	return (*s)[fd].Load()
}

// insert gives d a generation, publishes it under d.fd and runs add (the
// epoll_ctl that registers it), all under mu, so that closeAll sees d
// either not at all or fully registered. The generation is written before
// the pointer is stored, so a reader that loads d sees it. If add fails, d
// is removed again. insert fails once the table is closed.
func (t *fdTable) insert(d *desc, add func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errGroupClosed
	}
	t.gen++
	d.gen = t.gen
	s := t.slots.Load()
	if s == nil || d.fd >= len(*s) {
		n := 64
		if s != nil {
			n = len(*s)
		}
		for n <= d.fd {
			n *= 2
		}
		grown := make([]atomic.Pointer[desc], n)
		if s != nil {
			for i := range *s {
				grown[i].Store((*s)[i].Load())
			}
		}
		s = &grown
		t.slots.Store(s)
	}
	(*s)[d.fd].Store(d)
	if err := add(); err != nil {
		(*s)[d.fd].Store(nil)
		return err
	}
	t.live.Add(1)
	return nil
}

// clear removes d if it is still the descriptor under its fd.
func (t *fdTable) clear(d *desc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.slots.Load(); s != nil && d.fd < len(*s) && (*s)[d.fd].CompareAndSwap(d, nil) {
		t.live.Add(-1)
	}
}

// closeAll refuses further registrations and returns the descriptors
// registered now, in one step, so none registered concurrently is missed.
func (t *fdTable) closeAll() []*desc {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	return t.allLocked()
}

func (t *fdTable) allLocked() []*desc {
	var ds []*desc
	if s := t.slots.Load(); s != nil {
		for i := range *s {
			if d := (*s)[i].Load(); d != nil {
				ds = append(ds, d)
			}
		}
	}
	return ds
}
