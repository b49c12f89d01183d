package servecmd

import "testing"

// TestMemstats: every figure is read from runtime/metrics, none zero in a
// running program that has collected (heap live is the last collection's).
func TestMemstats(t *testing.T) {
	f := Memstats()
	for name, v := range map[string]uint64{"heap live": f.HeapLive, "heap objects": f.HeapObjects, "goroutines": f.Goroutines, "stacks": f.Stacks} {
		if v == 0 {
			t.Errorf("%s = 0, want more", name)
		}
	}
}
