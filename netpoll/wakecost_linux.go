package netpoll

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The wakeup-cost meter: W, the runtime's own wakeup round trip, for
// adaptive spinning's budget (spin_linux.go says how the policy uses it). One
// goroutine per process refreshes it while any adaptively spinning poller runs.

// wakeRefresh is how often W is measured again while a adaptively spinning poller
// runs: the host's speed changes under a virtual machine within seconds
// (a wakeup round trip was seen to go from 11 to 44µs in one run), and a
// budget measured once would stop fitting the gaps it must catch.
const wakeRefresh = time.Second

// wakeMeter keeps W current for adaptively spinning pollers: measured when the first one
// starts, then every wakeRefresh by one goroutine while any runs.
var wakeMeter struct {
	mu    sync.Mutex    // guards users, stop and done; the lock order is mu, then nothing
	users int           // adaptively spinning pollers running
	stop  chan struct{} // closed to stop the refresher
	done  chan struct{} // closed by the refresher when it returns
	w     atomic.Int64  // W in nanoseconds; written under mu or by the refresher
}

// wakeTraffic is set by a adaptively spinning poller whose idle period an event ends,
// and cleared by the refresher at each tick, so that W is measured only
// while there is traffic. Pollers only read it until they must set it: one
// write per tick, not one per event, on a line all pollers share.
var wakeTraffic atomic.Bool

// wakeMeasuring is held through each measurement of W, outside which its
// two pipes are never open: a test that counts the process's fds holds it
// so as not to count them (HoldWakeMeter). It is taken under
// wakeMeter.mu (acquireWake), never the other way round.
var wakeMeasuring sync.Mutex

// wakeCostOverride and blockCostOverride, set by tests, replace the
// measured W and C.
var wakeCostOverride, blockCostOverride atomic.Int64

// acquireWake measures W if no adaptively spinning poller runs yet and starts the
// refresher; releaseWake undoes one acquireWake.
func acquireWake() error {
	wakeMeter.mu.Lock()
	defer wakeMeter.mu.Unlock()
	if wakeMeter.users == 0 {
		w, err := measureWakeRoundTrip(8, 32)
		if err != nil {
			return err
		}
		wakeMeter.w.Store(int64(w))
		refreshQuota()
		wakeMeter.stop, wakeMeter.done = make(chan struct{}), make(chan struct{})
		go refreshWake(wakeMeter.stop, wakeMeter.done)
	}
	wakeMeter.users++
	return nil
}

func releaseWake() {
	wakeMeter.mu.Lock()
	defer wakeMeter.mu.Unlock()
	if wakeMeter.users--; wakeMeter.users == 0 {
		close(wakeMeter.stop)
		<-wakeMeter.done
	}
}

// refreshWake measures W again every wakeRefresh until stop is closed,
// except when no adaptively spinning poller has seen an event since the last tick, and
// while one spins: with GOMAXPROCS=1 the spinner stays
// runnable, so the runtime's own netpoller runs only from sysmon and the
// round trip measures that instead. A failed measurement (out of fds, say)
// keeps the last W.
func refreshWake(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(wakeRefresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if !wakeTraffic.Swap(false) {
				continue // no traffic: nothing to spin for, and an idle server stays idle
			}
			refreshQuota() // a container's limit can change while it runs
			if spinners.Load() > 0 {
				continue // a spinning poller holds up the round trip: measured 100-240µs
			}
			if w, err := measureWakeRoundTrip(2, 8); err == nil {
				wakeMeter.w.Store(int64(w))
			}
		}
	}
}

// wakeCost returns the current W.
func wakeCost() time.Duration {
	if d := wakeCostOverride.Load(); d != 0 {
		return time.Duration(d)
	}
	return time.Duration(wakeMeter.w.Load())
}

// measureWakeRoundTrip times rounds round trips (after warm ones) of a byte
// sent over one pipe and echoed back over another by a second goroutine,
// and returns the lower quartile: what a round trip costs with little in
// its way, so that goroutines queued ahead on a busy P inflate it less.
// Both ends park in the runtime's netpoller, so a round trip is two
// blocks and two wakeups as the scheduler delivers them
// here: through the kernel when another P sleeps (GOMAXPROCS > 1), through
// the scheduler's own poll when the only P switches goroutines.
func measureWakeRoundTrip(warm, rounds int) (time.Duration, error) {
	wakeMeasuring.Lock()
	defer wakeMeasuring.Unlock() // last: after the pipes' deferred closes
	r1, w1, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("netpoll: measuring the wakeup cost for adaptive spinning: %w", err)
	}
	defer r1.Close()
	r2, w2, err := os.Pipe()
	if err != nil {
		w1.Close()
		return 0, fmt.Errorf("netpoll: measuring the wakeup cost for adaptive spinning: %w", err)
	}
	defer r2.Close()
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		defer w2.Close()
		var b [1]byte
		for {
			if _, err := r1.Read(b[:]); err != nil {
				return // EOF: w1 closed
			}
			if _, err := w2.Write(b[:]); err != nil {
				return
			}
		}
	}()
	trips := make([]time.Duration, 0, rounds)
	var b [1]byte
	for i := range warm + rounds {
		start := time.Now()
		if _, err = w1.Write(b[:]); err == nil {
			_, err = r2.Read(b[:])
		}
		if err != nil {
			break
		}
		if i >= warm {
			trips = append(trips, time.Since(start))
		}
	}
	w1.Close()
	<-echoed
	if err != nil {
		return 0, fmt.Errorf("netpoll: measuring the wakeup cost for adaptive spinning: %w", err)
	}
	slices.Sort(trips)
	return trips[len(trips)/4], nil
}
