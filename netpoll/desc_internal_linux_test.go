package netpoll

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestDescSize holds the descriptor, which every connection pays for
// (idle ones served on demand hold little else), to its size class: it
// allocates descriptors and reads what the heap grew by per descriptor.
// A counter or a pointer more puts it in the next class (176 bytes).
func TestDescSize(t *testing.T) {
	const n, want = 10000, 160
	keep := make([]*desc, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = newDesc(i, kindConn)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per != want {
		t.Errorf("a descriptor allocates %d bytes, want %d", per, want)
	}
	runtime.KeepAlive(keep)
}

// TestConnSize holds a Conn, the other record every TCP connection pays
// for, to 48 bytes: its local address is shared (localAddrs).
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(Conn{}); n > 48 {
		t.Errorf("a Conn is %d bytes, want at most 48", n)
	}
}
