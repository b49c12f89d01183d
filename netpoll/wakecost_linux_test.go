package netpoll

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// The measurement: a positive median, and no goroutine or fd left.
func TestMeasureWakeRoundTrip(t *testing.T) {
	fds := func() int {
		wakeMeasuring.Lock() // not another group's refresher's pipes (HoldWakeMeter)
		defer wakeMeasuring.Unlock()
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	goroutines, before := runtime.NumGoroutine(), fds()
	w, err := measureWakeRoundTrip(2, 16)
	if err != nil || w <= 0 {
		t.Fatalf("measureWakeRoundTrip = %v, %v", w, err)
	}
	if after := fds(); after != before {
		t.Errorf("%d fds open after the measurement, %d before", after, before)
	}
	// Other tests' groups may still be winding down, so fewer is fine; the
	// echo goroutine left behind would make one more. It has closed its
	// done channel but may not have returned yet: give it until a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after the measurement, %d before", n, goroutines)
	}
}
