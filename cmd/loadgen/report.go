package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// sample is the CPU and context switch counters at one edge of the
// measured window.
type sample struct {
	client    time.Duration
	clientErr error
	server    procSample
	serverErr error // also set when there is no server to sample
}

var errNoServer = errors.New("no -server-pid")

func takeSample(serverPID int) sample {
	var s sample
	s.client, s.clientErr = selfCPU()
	s.serverErr = errNoServer
	if serverPID != 0 {
		s.server, s.serverErr = sampleProc(serverPID)
	}
	return s
}

// result is the report of a run: the figures of the measured window, and
// the failures of the whole run, warmup included.
type result struct {
	Name     string  `json:"name"` // benchmark name
	Proto    string  `json:"proto"`
	Addr     string  `json:"addr"`
	Path     string  `json:"path,omitempty"` // http
	Size     int     `json:"size,omitempty"` // echo
	Conns    int     `json:"conns"`
	Pipeline int     `json:"pipeline"`
	Rate     float64 `json:"rate"` // requests/s due; 0 for the closed loop
	WarmupNs int64   `json:"warmup_ns"`
	WindowNs int64   `json:"window_ns"`

	Requests int64 `json:"requests"` // complete responses in the window
	Verified int64 `json:"verified"` // of which passed the checks
	// BlockedConns are -blocked's, whose requests the server held:
	// Blocked counts their complete responses in the window, which are in
	// none of the other figures.
	BlockedConns int       `json:"blocked_conns,omitempty"`
	Blocked      int64     `json:"blocked_requests,omitempty"`
	RPS          float64   `json:"requests_per_sec"`
	NsPerOp      float64   `json:"ns_per_op"` // window / requests
	Latency      latencyNs `json:"latency_ns"`
	// WakeLag is, in the open loop, how late the client woke for the
	// requests it was idle for: a part of their latency that is the
	// client's own. The count is how many such wakes there were.
	WakeLag *latencyNs `json:"wake_lag_ns,omitempty"`

	ClientCPUNsPerOp *float64 `json:"client_cpu_ns_per_op,omitempty"`
	Server           *server  `json:"server,omitempty"`

	Errors     int64            `json:"errors"`
	ErrorKinds map[string]int64 `json:"error_kinds"`
	FirstError string           `json:"first_error,omitempty"` // of the lowest-numbered connection that failed
}

type latencyNs struct {
	P50   int64 `json:"p50"`
	P90   int64 `json:"p90"`
	P99   int64 `json:"p99"`
	P999  int64 `json:"p99.9"`
	P9999 int64 `json:"p99.99"`
	Max   int64 `json:"max"`
	Mean  int64 `json:"mean"`
	Count int64 `json:"count"`
}

func summary(l *latency) latencyNs {
	return latencyNs{
		P50:   int64(l.percentile(50)),
		P90:   int64(l.percentile(90)),
		P99:   int64(l.percentile(99)),
		P999:  int64(l.percentile(99.9)),
		P9999: int64(l.percentile(99.99)),
		Max:   int64(l.max()),
		Mean:  int64(l.mean()),
		Count: l.count(),
	}
}

type server struct {
	PID        int     `json:"pid"`
	CPUNsPerOp float64 `json:"cpu_ns_per_op"`
	CPUSource  string  `json:"cpu_source"` // cpuclock (ns) or stat (10ms ticks)
	CtxswPerOp float64 `json:"ctxsw_per_op"`
}

func summarize(cfg *config, tallies []*tally, before, after sample) *result {
	r := &result{
		Name:         cfg.benchName(),
		Proto:        cfg.proto,
		Addr:         cfg.addr,
		Conns:        cfg.conns,
		Pipeline:     cfg.pipeline,
		Rate:         cfg.rate,
		WarmupNs:     int64(cfg.warmup),
		WindowNs:     int64(cfg.duration),
		ErrorKinds:   make(map[string]int64, numKinds),
		BlockedConns: cfg.blocked,
	}
	if cfg.proto == "echo" {
		r.Size = cfg.size
	} else {
		r.Path = cfg.path
	}
	lat, wake := newLatency(), newLatency()
	var errs [numKinds]int64
	for i, t := range tallies {
		for k := range errs {
			errs[k] += t.errs[k].Load()
		}
		if r.FirstError == "" && t.err != nil {
			r.FirstError = t.err.Error()
		}
		if i < cfg.blocked {
			// Held by the server on purpose: counted apart, and their
			// checks failed if they are not all verified.
			r.Blocked += t.completed
			continue
		}
		r.Requests += t.completed
		r.Verified += t.verified
		lat.merge(t.lat)
		wake.merge(t.wake)
	}
	for k, n := range errs {
		r.ErrorKinds[errKind(k).String()] = n
		r.Errors += n
	}
	r.Latency = summary(lat)
	if cfg.rate > 0 {
		w := summary(wake)
		r.WakeLag = &w
	}
	r.RPS = float64(r.Requests) / cfg.duration.Seconds()
	r.NsPerOp = perOp(float64(cfg.duration), r.Requests)
	if before.clientErr == nil && after.clientErr == nil {
		v := perOp(float64(after.client-before.client), r.Requests)
		r.ClientCPUNsPerOp = &v
	}
	if before.serverErr == nil && after.serverErr == nil {
		r.Server = &server{
			PID:        cfg.serverPID,
			CPUNsPerOp: perOp(float64(after.server.cpu-before.server.cpu), r.Requests),
			CPUSource:  after.server.cpuSource,
			CtxswPerOp: perOp(float64(after.server.ctxsw-before.server.ctxsw), r.Requests),
		}
	}
	return r
}

func perOp(total float64, requests int64) float64 {
	if requests == 0 {
		return 0
	}
	return total / float64(requests)
}

// err returns what made the run fail, if anything did.
func (r *result) err() error {
	switch {
	case r.Errors > 0:
		return fmt.Errorf("%d failed requests (%s); first: %s", r.Errors, r.errorKinds(), r.FirstError)
	case r.Requests == 0:
		return errors.New("no response in the measured window")
	case r.Verified != r.Requests:
		// Unverified responses are failures, counted above.
		panic("loadgen: unverified responses without a failure")
	}
	return nil
}

// errorKinds lists the failures by kind, "corrupt 2, short 1", or "none".
func (r *result) errorKinds() string {
	var parts []string
	for _, name := range kindNames {
		if n := r.ErrorKinds[name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
	}
	if parts == nil {
		return "none"
	}
	return strings.Join(parts, ", ")
}
