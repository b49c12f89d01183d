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
//
// The slots come in chunks of fdChunk, made the first time an fd in their
// range registers and kept: growing the table copies only the directory of
// chunks (a pointer per fdChunk fds), never the slots, so it leaves no
// garbage and holds mu for a moment however many connections there are. A
// flat slice, doubled and copied, held 16 bytes per connection at 18,000
// (half of it the copies' garbage until a collection).
//
// Invariant that lets get run without mu: a chunk, once stored in the
// directory, stays there for good, and a grown directory holds the same
// chunk pointers as the one it replaces. So a reader that loaded an older
// directory finds every chunk that existed then, and a slot is only ever
// written through its one chunk. A descriptor is stored in its slot (after
// its chunk is in the directory) before the epoll_ctl that registers it,
// so the poller that gets its first event finds it.
type fdTable struct {
	mu  sync.Mutex                                // serializes insert, clear and growth
	dir atomic.Pointer[[]atomic.Pointer[fdSlots]] // the chunks by fd/fdChunk; replaced whole on growth, under mu
	gen uint32                                    // last generation given out; guarded by mu

	closed bool         // no more set: the group is closing; guarded by mu
	live   atomic.Int64 // descriptors in the table now (Stats), moved under mu
	conns  atomic.Int64 // of those, connections (kindConn), moved under mu
}

// fdChunk is how many consecutive fd numbers one chunk of slots holds.
const fdChunk = 1024

// fdSlots is one chunk of slots.
type fdSlots [fdChunk]atomic.Pointer[desc]

func (t *fdTable) get(fd int) *desc {
	if s := t.slot(fd); s != nil {
		return s.Load()
	}
	return nil
}

// slot returns fd's slot, or nil if its chunk was never made.
func (t *fdTable) slot(fd int) *atomic.Pointer[desc] {
	dir := t.dir.Load()
	if dir == nil || fd < 0 || fd/fdChunk >= len(*dir) {
		return nil
	}
	c := (*dir)[fd/fdChunk].Load()
	if c == nil {
		return nil
	}
	return &c[fd%fdChunk]
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
	s := t.slot(d.fd)
	if s == nil {
		s = t.grow(d.fd)
	}
	s.Store(d)
	if err := add(); err != nil {
		s.Store(nil)
		return err
	}
	t.live.Add(1)
	if d.kind == kindConn {
		t.conns.Add(1)
	}
	return nil
}

// grow makes fd's chunk, and a larger directory if fd is past its end, and
// returns fd's slot. Called with mu held.
func (t *fdTable) grow(fd int) *atomic.Pointer[desc] {
	dir := t.dir.Load()
	i := fd / fdChunk
	if dir == nil || i >= len(*dir) {
		n := 4
		if dir != nil {
			n = len(*dir)
		}
		for n <= i {
			n *= 2
		}
		grown := make([]atomic.Pointer[fdSlots], n)
		if dir != nil {
			for j := range *dir {
				grown[j].Store((*dir)[j].Load())
			}
		}
		dir = &grown
		t.dir.Store(dir)
	}
	c := (*dir)[i].Load()
	if c == nil {
		c = new(fdSlots)
		(*dir)[i].Store(c)
	}
	return &c[fd%fdChunk]
}

// clear removes d if it is still the descriptor under its fd.
func (t *fdTable) clear(d *desc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.slot(d.fd); s != nil && s.CompareAndSwap(d, nil) {
		t.live.Add(-1)
		if d.kind == kindConn {
			t.conns.Add(-1)
		}
	}
}

// closeAll refuses further registrations and returns the descriptors
// registered now, in one step, so none registered concurrently is missed.
func (t *fdTable) closeAll() []*desc {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var ds []*desc
	if dir := t.dir.Load(); dir != nil {
		for i := range *dir {
			c := (*dir)[i].Load()
			if c == nil {
				continue
			}
			for j := range c {
				if d := c[j].Load(); d != nil {
					ds = append(ds, d)
				}
			}
		}
	}
	return ds
}
