package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"time"
)

func writeResult(w io.Writer, format string, r *result) error {
	switch format {
	case "bench":
		return writeBench(w, r)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return writeText(w, r)
}

func writeText(w io.Writer, r *result) error {
	bw := bufio.NewWriter(w)
	loop := "closed loop"
	if r.Rate > 0 {
		loop = fmt.Sprintf("open loop at %g req/s", r.Rate)
	}
	fmt.Fprintf(bw, "%s %s, %s, %d conns, pipeline %d", r.Proto, r.Addr, loop, r.Conns, r.Pipeline)
	if r.Proto == "echo" {
		fmt.Fprintf(bw, ", size %d B", r.Size)
	} else {
		fmt.Fprintf(bw, ", GET %s", r.Path)
	}
	fmt.Fprintf(bw, "; %v measured after %v warmup\n", time.Duration(r.WindowNs), time.Duration(r.WarmupNs))
	fmt.Fprintf(bw, "requests    %d (%.0f/s), %d verified\n", r.Requests, r.RPS, r.Verified)
	if r.BlockedConns > 0 {
		fmt.Fprintf(bw, "blocked     %d requests held by the server on %d connections, in none of the figures\n", r.Blocked, r.BlockedConns)
	}
	l := r.Latency
	fmt.Fprintf(bw, "latency     p50 %v  p90 %v  p99 %v  p99.9 %v  p99.99 %v  max %v  mean %v\n",
		round3(l.P50), round3(l.P90), round3(l.P99), round3(l.P999), round3(l.P9999), round3(l.Max), round3(l.Mean))
	if w := r.WakeLag; w != nil {
		fmt.Fprintf(bw, "wake lag    p50 %v  p99 %v  max %v  (%d sleeps; part of the latency)\n", round3(w.P50), round3(w.P99), round3(w.Max), w.Count)
	}
	if r.ClientCPUNsPerOp != nil {
		fmt.Fprintf(bw, "client cpu  %v/op\n", round3(int64(*r.ClientCPUNsPerOp)))
	}
	if s := r.Server; s != nil {
		fmt.Fprintf(bw, "server cpu  %v/op (%s), %.3f ctxsw/op, pid %d\n", round3(int64(s.CPUNsPerOp)), s.CPUSource, s.CtxswPerOp, s.PID)
	}
	fmt.Fprintf(bw, "errors      %d", r.Errors)
	if r.Errors > 0 {
		fmt.Fprintf(bw, " (%s); first: %s", r.errorKinds(), r.FirstError)
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

// round3 rounds ns to 3 significant digits for display.
func round3(ns int64) time.Duration {
	d := time.Duration(ns)
	for p := time.Duration(1); ; p *= 10 {
		if d < 1000*p {
			return d.Round(p)
		}
	}
}

// writeBench writes r as go test does a benchmark, so that benchstat reads
// it: the configuration lines, then one line whose iterations are the
// requests and whose extra metrics are the latency percentiles and maximum, the CPU
// per request, and the failures, in total and by kind when there are some.
func writeBench(w io.Writer, r *result) error {
	bw := bufio.NewWriter(w)
	writeBenchHeader(bw)
	l := r.Latency
	fmt.Fprintf(bw, "%s\t%d\t%.1f ns/op\t%d p50-ns\t%d p90-ns\t%d p99-ns\t%d p99.9-ns\t%d p99.99-ns\t%d max-ns",
		r.Name, r.Requests, r.NsPerOp, l.P50, l.P90, l.P99, l.P999, l.P9999, l.Max)
	if r.ClientCPUNsPerOp != nil {
		fmt.Fprintf(bw, "\t%.0f client-cpu-ns/op", *r.ClientCPUNsPerOp)
	}
	if s := r.Server; s != nil {
		fmt.Fprintf(bw, "\t%.0f server-cpu-ns/op\t%.3f ctxsw/op", s.CPUNsPerOp, s.CtxswPerOp)
	}
	if r.BlockedConns > 0 {
		fmt.Fprintf(bw, "\t%d blocked-requests", r.Blocked)
	}
	fmt.Fprintf(bw, "\t%d errors", r.Errors)
	for _, name := range kindNames {
		if n := r.ErrorKinds[name]; n > 0 {
			fmt.Fprintf(bw, "\t%d %s-errors", n, name)
		}
	}
	fmt.Fprintln(bw)
	return bw.Flush()
}

// writeBenchHeader writes the configuration lines go test prints before
// benchmark lines.
func writeBenchHeader(w io.Writer) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/edgepoll/edgepoll/cmd/loadgen\n", runtime.GOOS, runtime.GOARCH)
	if cpu := cpuModel(); cpu != "" {
		fmt.Fprintf(w, "cpu: %s\n", cpu)
	}
}

// formatValue formats a figure of a benchmark line: whole numbers from
// 100 up, three decimals below.
func formatValue(v float64) string {
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}
