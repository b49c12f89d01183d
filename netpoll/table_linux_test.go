package netpoll

import (
	"errors"
	"slices"
	"testing"
)

// TestFDTable registers descriptors on both sides of chunk boundaries and
// far past the directory's first size, and checks lookups, generations,
// the live count, a failed add, clear and closeAll.
func TestFDTable(t *testing.T) {
	var tb fdTable
	fds := []int{0, fdChunk - 1, fdChunk, 3*fdChunk + 7, 70000, 5}
	ds := make(map[int]*desc)
	for _, fd := range fds {
		d := newDesc(fd, kindConn)
		if err := tb.insert(d, func() error { return nil }); err != nil {
			t.Fatalf("insert fd %d: %v", fd, err)
		}
		ds[fd] = d
	}
	gens := make(map[uint32]bool)
	for fd, d := range ds {
		if got := tb.get(fd); got != d {
			t.Errorf("get(%d) = %p, want %p", fd, got, d)
		}
		if gens[d.gen] {
			t.Errorf("generation %d given twice", d.gen)
		}
		gens[d.gen] = true
	}
	for _, fd := range []int{-1, 1, fdChunk + 1, 2 * fdChunk, 69999, 1 << 30} {
		if d := tb.get(fd); d != nil {
			t.Errorf("get(%d) = %p for an fd never registered", fd, d)
		}
	}
	if n := tb.live.Load(); n != int64(len(fds)) {
		t.Errorf("live = %d, want %d", n, len(fds))
	}

	failed := newDesc(fdChunk+1, kindConn)
	errAdd := errors.New("add failed")
	if err := tb.insert(failed, func() error { return errAdd }); err != errAdd {
		t.Errorf("insert with a failing add = %v, want %v", err, errAdd)
	}
	if d := tb.get(fdChunk + 1); d != nil {
		t.Errorf("a descriptor whose add failed is still in the table")
	}

	tb.clear(ds[fdChunk])
	tb.clear(ds[fdChunk]) // a second clear finds nothing to remove
	stale := newDesc(70000, kindConn)
	tb.clear(stale) // not the descriptor under its fd: kept
	if d := tb.get(fdChunk); d != nil {
		t.Errorf("get after clear = %p, want nil", d)
	}
	if tb.get(70000) != ds[70000] {
		t.Errorf("clear of another descriptor with the same fd removed the registered one")
	}
	if n := tb.live.Load(); n != int64(len(fds)-1) {
		t.Errorf("live = %d after one clear, want %d", n, len(fds)-1)
	}

	all := tb.closeAll()
	var got []int
	for _, d := range all {
		got = append(got, d.fd)
	}
	slices.Sort(got)
	if want := []int{0, 5, fdChunk - 1, 3*fdChunk + 7, 70000}; !slices.Equal(got, want) {
		t.Errorf("closeAll returned fds %v, want %v", got, want)
	}
	if err := tb.insert(newDesc(9, kindConn), func() error { return nil }); err != errGroupClosed {
		t.Errorf("insert after closeAll = %v, want errGroupClosed", err)
	}
}
