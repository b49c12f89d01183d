package servecmd

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// memstatsNames are the runtime/metrics Memstats reads, in the order of
// loadproto.Figures' fields.
var memstatsNames = []string{
	"/gc/heap/live:bytes",
	"/gc/heap/objects:objects",
	"/sched/goroutines:goroutines",
	"/memory/classes/heap/stacks:bytes",
}

// Memstats collects garbage (runtime.GC, then debug.FreeOSMemory) and
// returns the process's figures as runtime/metrics sees them then: what
// cmd/echoserver answers loadproto's Memstats request with, and
// cmd/httpserver GET loadproto.MemstatsPath, for the idle experiment. A
// metric this runtime lacks reads 0.
func Memstats() loadproto.Figures {
	runtime.GC()
	debug.FreeOSMemory()
	samples := make([]metrics.Sample, len(memstatsNames))
	for i, name := range memstatsNames {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var v [4]uint64
	for i, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	return loadproto.Figures{HeapLive: v[0], HeapObjects: v[1], Goroutines: v[2], Stacks: v[3]}
}
