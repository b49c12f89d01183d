package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// maxInflight bounds the bytes of echo requests one connection has
// outstanding. A connection's goroutine writes before it reads, so the
// requests and their echoes must fit in the socket buffers on both sides
// (several hundred KiB on Linux loopback), or client and server would both
// block in write.
const maxInflight = 64 << 10

type config struct {
	addr      string
	proto     string // "echo" or "http"
	path      string // HTTP request target
	conns     int
	size      int // echo message size
	duration  time.Duration
	warmup    time.Duration
	rate      float64 // total requests/s; 0 runs a closed loop
	pipeline  int     // requests in flight per connection, closed loop
	blocked   int     // closed loop, echo: the first blocked connections mark their requests loadproto.Delay
	idle      bool    // the idle experiment instead of a load (idle.go)
	serverPID int     // 0: no server statistics
	format    string  // "text", "bench" or "json"
	name      string  // benchmark name before the key=value parts
	labels    string  // key=value parts joined by '/'
}

func parseConfig(args []string, stderr io.Writer) (*config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "", "server `host:port` (required)")
	fs.StringVar(&c.proto, "proto", "echo", "protocol: echo or http (HTTP/1.1 keep-alive GET)")
	fs.StringVar(&c.path, "path", "/plaintext", "HTTP request `path`")
	fs.IntVar(&c.conns, "conns", 50, "number of connections")
	fs.IntVar(&c.size, "size", 64, fmt.Sprintf("echo message size in `bytes`, at least %d", loadproto.HeaderLen))
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measured time")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "time before the measurement whose results are discarded")
	fs.Float64Var(&c.rate, "rate", 0, "open loop: total `requests/s` spread over the connections; 0 runs a closed loop")
	fs.IntVar(&c.pipeline, "pipeline", 1, "closed loop: requests in flight per connection")
	fs.IntVar(&c.blocked, "blocked", 0, "closed loop, echo: the first `n` connections mark their requests for the server to hold before it echoes them "+
		"(loadproto.Delay; echoserver -delay), a handler blocked outside the server's poller; the figures are the other connections', "+
		"and blocked-requests counts the held ones")
	fs.BoolVar(&c.idle, "idle", false, "instead of a load, hold -conns connections open and quiet, each after one echo (with -proto http, one "+
		"keep-alive GET -path), and report the memory per connection of the server -server-pid: its VmRSS with one connection and with all, "+
		"after a burst, the kernel's Slab, and, if it answers loadproto's Memstats request (echoserver) or GET "+loadproto.MemstatsPath+
		" (httpserver), the same after its collections with its heap and goroutines")
	fs.IntVar(&c.serverPID, "server-pid", 0, "`pid` of the server, to report its CPU time and context switches per request")
	fs.StringVar(&c.format, "format", "text", "output: text, bench (go test benchmark lines) or json")
	fs.StringVar(&c.name, "name", "", "benchmark name before the key=value parts (default BenchmarkEcho, BenchmarkHTTP or, with -idle, BenchmarkIdle)")
	fs.StringVar(&c.labels, "labels", "", "extra key=value parts of the benchmark name, joined by '/', e.g. impl=netpoll/mode=et")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *config) validate() error {
	if c.addr == "" {
		return errors.New("-addr is required")
	}
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		return fmt.Errorf("-addr: %v", err)
	}
	switch c.proto {
	case "echo":
		if c.size < loadproto.HeaderLen {
			return fmt.Errorf("-size %d is below the %d-byte header", c.size, loadproto.HeaderLen)
		}
		if c.size*c.pipeline > maxInflight {
			return fmt.Errorf("-size × -pipeline = %d bytes in flight per connection; at most %d", c.size*c.pipeline, maxInflight)
		}
	case "http":
		if !strings.HasPrefix(c.path, "/") || strings.ContainsAny(c.path, " \r\n") {
			return fmt.Errorf("-path %q: want an absolute path without spaces", c.path)
		}
	default:
		return fmt.Errorf("-proto %q: want echo or http", c.proto)
	}
	switch {
	case c.conns < 1:
		return fmt.Errorf("-conns %d: want at least 1", c.conns)
	case c.duration <= 0:
		return fmt.Errorf("-duration %v: want more than 0", c.duration)
	case c.warmup < 0:
		return fmt.Errorf("-warmup %v: want 0 or more", c.warmup)
	case c.rate < 0:
		return fmt.Errorf("-rate %v: want 0 (closed loop) or more", c.rate)
	case c.pipeline < 1:
		return fmt.Errorf("-pipeline %d: want at least 1", c.pipeline)
	case c.rate > 0 && c.pipeline > 1:
		return errors.New("-pipeline applies to the closed loop only; the open loop sends one request at a time per connection")
	case c.serverPID < 0:
		return fmt.Errorf("-server-pid %d: want a process id", c.serverPID)
	case c.blocked < 0:
		return fmt.Errorf("-blocked %d: want 0 or more", c.blocked)
	case c.blocked > 0 && (c.proto != "echo" || c.rate > 0):
		return errors.New("-blocked marks echo requests in the closed loop: not with -proto http or -rate")
	case c.blocked > 0 && c.blocked >= c.conns:
		return fmt.Errorf("-blocked %d of -conns %d: want at least one connection whose figures are reported", c.blocked, c.conns)
	}
	if c.idle {
		switch {
		case c.rate > 0 || c.pipeline > 1 || c.blocked > 0:
			return errors.New("-idle holds connections quiet after one request each: not with -rate, -pipeline or -blocked")
		case c.serverPID == 0:
			return errors.New("-idle measures the server's memory: it needs -server-pid")
		case c.conns < 2:
			return fmt.Errorf("-idle -conns %d: want at least 2, the growth from one to all is measured", c.conns)
		case c.proto == "echo" && c.size < loadproto.HeaderLen+loadproto.StatsLen:
			return fmt.Errorf("-idle -size %d: want at least %d, room for the server's memstats answer", c.size, loadproto.HeaderLen+loadproto.StatsLen)
		}
	}
	switch c.format {
	case "text", "bench", "json":
	default:
		return fmt.Errorf("-format %q: want text, bench or json", c.format)
	}
	if c.name != "" && (!strings.HasPrefix(c.name, "Benchmark") || strings.ContainsAny(c.name, " \t\n")) {
		return fmt.Errorf("-name %q: want Benchmark followed by no spaces", c.name)
	}
	if c.labels != "" {
		for part := range strings.SplitSeq(c.labels, "/") {
			k, v, ok := strings.Cut(part, "=")
			if !ok || k == "" || v == "" || strings.ContainsAny(part, " \t\n") {
				return fmt.Errorf("-labels: %q is not key=value", part)
			}
		}
	}
	return nil
}

// benchName is the benchmark line name: -name or the protocol's default, the
// -labels, then the configuration as key=value parts.
func (c *config) benchName() string {
	parts := []string{c.name}
	switch {
	case c.name != "":
	case c.idle:
		parts[0] = "BenchmarkIdle"
	default:
		parts[0] = map[string]string{"echo": "BenchmarkEcho", "http": "BenchmarkHTTP"}[c.proto]
	}
	if c.labels != "" {
		parts = append(parts, c.labels)
	}
	parts = append(parts, "conns="+strconv.Itoa(c.conns))
	if c.proto == "echo" {
		parts = append(parts, "size="+strconv.Itoa(c.size))
	}
	if c.pipeline > 1 {
		parts = append(parts, "pipeline="+strconv.Itoa(c.pipeline))
	}
	if c.blocked > 0 {
		parts = append(parts, "blocked="+strconv.Itoa(c.blocked))
	}
	if c.rate > 0 {
		parts = append(parts, "rate="+strconv.FormatFloat(c.rate, 'f', -1, 64))
	}
	return strings.Join(parts, "/")
}
