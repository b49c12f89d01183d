// Package cpuquota runs processes under a CPU limit, as a container with a
// CPU quota does: a Group is a cgroup whose members may use frac of one CPU
// in each 100 ms CFS period, and whose throttling counters (Stat) show how
// often the kernel stopped them. It needs root and a writable cgroup cpu
// controller, v1 at /sys/fs/cgroup/cpu or v2 at /sys/fs/cgroup; New reports
// an error wrapping ErrUnavailable where there is none.
//
// A Group's methods may be called from several goroutines.
package cpuquota

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrUnavailable is wrapped, with the reason, by New's error when no group
// can be made here: not root, no cpu controller, a read-only cgroupfs.
var ErrUnavailable = errors.New("cpuquota: no writable cgroup cpu controller")

// Stat is the group's throttling counters, cumulative since it was made.
type Stat struct {
	Periods       int64         // CFS periods in which a member was runnable
	Throttled     int64         // of those, periods in which the quota ran out
	ThrottledTime time.Duration // total time members were held back
}

// Sub returns s - t: the counters over the window from t to s.
func (s Stat) Sub(t Stat) Stat {
	return Stat{s.Periods - t.Periods, s.Throttled - t.Throttled, s.ThrottledTime - t.ThrottledTime}
}

// periodUS is the CFS period every group uses, in microseconds.
const periodUS = 100_000

// quotaUS returns the quota for frac of one CPU per period, in microseconds.
// The kernel takes no quota under 1 ms; the upper bound keeps the product
// far from overflow.
func quotaUS(frac float64) (int64, error) {
	if !(frac >= 0.01 && frac <= 1e6) { // also false for NaN
		return 0, fmt.Errorf("cpuquota: bad fraction %v: want 0.01 to 1e6 CPUs (the kernel's minimum quota is 1 ms per 100 ms)", frac)
	}
	return int64(math.Round(frac * periodUS)), nil
}
