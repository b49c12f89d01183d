package main

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/edgepoll/edgepoll/internal/servecmd"
	"github.com/edgepoll/edgepoll/netpoll"
)

// statsReport is what GET /stats returns: which implementation serves, the
// netpoll group's statistics by name (netpoll.AllStats), summed and per
// poller, and the process's resource usage.
type statsReport struct {
	Impl    string              `json:"impl"`              // net or netpoll
	Config  string              `json:"config,omitempty"`  // the group's Config in the NETPOLL syntax
	Stats   map[string]uint64   `json:"stats,omitempty"`   // nil for -impl net
	Pollers []map[string]uint64 `json:"pollers,omitempty"` // nil for -impl net
	Process processUsage        `json:"process"`
}

// processUsage is getrusage(RUSAGE_SELF): every thread of the process,
// exited ones included.
type processUsage struct {
	CtxSwitches            int64 `json:"ctxsw"`             // VoluntaryCtxSwitches + InvoluntaryCtxSwitches
	VoluntaryCtxSwitches   int64 `json:"ctxsw_voluntary"`   // ru_nvcsw
	InvoluntaryCtxSwitches int64 `json:"ctxsw_involuntary"` // ru_nivcsw
	CPUNanos               int64 `json:"cpu_ns"`            // UserNanos + SystemNanos
	UserNanos              int64 `json:"user_ns"`           // ru_utime
	SystemNanos            int64 `json:"system_ns"`         // ru_stime
}

// newDebugHandler serves the pprof handlers and GET /stats for g (nil for
// -impl net). It uses a mux of its own: importing net/http/pprof also
// registers the handlers on http.DefaultServeMux, which nothing here serves.
func newDebugHandler(g *netpoll.Group) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		report := statsReport{Impl: "net"}
		var err error
		if g != nil {
			report.Impl, report.Config = "netpoll", g.Config().String()
			report.Stats, err = servecmd.ReadStats(false, g.ReadStats)
			for i := 0; err == nil && uint64(i) < report.Stats["/netpoll/pollers:pollers"]; i++ {
				var p map[string]uint64
				p, err = servecmd.ReadStats(false, func(s []netpoll.Sample) error { return g.ReadPollerStats(i, s) })
				report.Pollers = append(report.Pollers, p)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		if report.Process, err = selfUsage(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		b, err := json.Marshal(report)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	return mux
}

// memstatsJSON answers GET loadproto.MemstatsPath: it collects garbage and
// returns freed memory to the OS, then writes the process's live heap,
// heap objects, goroutines and stack bytes (servecmd.Memstats) as a JSON
// loadproto.Figures, as echoserver answers loadproto's Memstats request.
func memstatsJSON(w http.ResponseWriter, _ *http.Request) {
	b, err := json.Marshal(servecmd.Memstats())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
