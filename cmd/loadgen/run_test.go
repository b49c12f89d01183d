package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// serve runs a goroutine-per-connection server on 127.0.0.1:0 until the
// test ends, and returns its address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards conns
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func echo(c net.Conn) { io.Copy(c, c) }

// corruptEcho echoes, flipping byte 20 of the stream: the body of the
// first message.
func corruptEcho(c net.Conn) {
	buf := make([]byte, 32<<10)
	var off int
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if i := 20 - off; 0 <= i && i < n {
				buf[i] ^= 0x01
			}
			off += n
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func serveHTTP(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/plaintext", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "Hello, World!")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// runLoadgen runs the command with a watchdog that fails the test rather
// than let it hang.
func runLoadgen(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(args, &out, &errOut) }()
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("run %q did not return", args)
	}
	return out.String(), errOut.String(), err
}

// short is a run that takes 400ms.
var short = []string{"-conns", "4", "-duration", "300ms", "-warmup", "100ms"}

func TestRun(t *testing.T) {
	echoAddr := serve(t, echo)
	httpAddr := serveHTTP(t)
	pid := strconv.Itoa(os.Getpid()) // the servers run in this process
	tests := []struct {
		name string
		args []string
	}{
		{"echo closed", []string{"-addr", echoAddr, "-server-pid", pid}},
		{"echo pipelined", []string{"-addr", echoAddr, "-pipeline", "4", "-size", "1024"}},
		{"echo open", []string{"-addr", echoAddr, "-rate", "2000", "-size", "16"}},
		{"http closed", []string{"-addr", httpAddr, "-proto", "http", "-pipeline", "2"}},
		{"http open", []string{"-addr", httpAddr, "-proto", "http", "-rate", "2000", "-server-pid", pid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runLoadgen(t, append(append(tt.args, short...), "-format", "json")...)
			if err != nil {
				t.Fatalf("run: %v\nstderr:\n%s", err, stderr)
			}
			var r result
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, stdout)
			}
			if r.Requests == 0 || r.Errors != 0 || r.Verified != r.Requests {
				t.Errorf("requests %d, verified %d, errors %d (%s); want requests > 0, all verified, no errors",
					r.Requests, r.Verified, r.Errors, r.FirstError)
			}
			if r.Latency.P50 <= 0 || r.Latency.P9999 < r.Latency.P999 || r.Latency.Max < r.Latency.P9999 || r.ClientCPUNsPerOp == nil {
				t.Errorf("latency %+v, client cpu %v: incomplete report", r.Latency, r.ClientCPUNsPerOp)
			}
			if (r.Server != nil) != strings.Contains(strings.Join(tt.args, " "), "-server-pid") {
				t.Errorf("server figures %+v, want them with -server-pid only", r.Server)
			}
		})
	}
}

func TestRunBench(t *testing.T) {
	addr := serve(t, echo)
	args := append([]string{"-addr", addr, "-format", "bench", "-labels", "impl=std/mode=test", "-server-pid", strconv.Itoa(os.Getpid())}, short...)
	stdout, _, err := runLoadgen(t, args...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for _, prefix := range []string{"goos: ", "goarch: ", "pkg: "} {
		if !strings.HasPrefix(stdout, prefix) && !strings.Contains(stdout, "\n"+prefix) {
			t.Errorf("no %q line in\n%s", prefix, stdout)
		}
	}
	name, n, metrics := parseBench(t, lines[len(lines)-1])
	if want := "BenchmarkEcho/impl=std/mode=test/conns=4/size=64"; name != want {
		t.Errorf("name %q, want %q", name, want)
	}
	if n <= 0 {
		t.Errorf("%d requests, want some", n)
	}
	for _, unit := range []string{"ns/op", "p50-ns", "p90-ns", "p99-ns", "p99.9-ns", "p99.99-ns", "max-ns", "client-cpu-ns/op", "server-cpu-ns/op", "ctxsw/op", "errors"} {
		if _, ok := metrics[unit]; !ok {
			t.Errorf("no %s in %q", unit, lines[len(lines)-1])
		}
	}
	if metrics["errors"] != 0 {
		t.Errorf("%v errors", metrics["errors"])
	}
}

// parseBench splits a benchmark line as benchstat does.
func parseBench(t *testing.T, line string) (name string, n int64, metrics map[string]float64) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
		t.Fatalf("not a benchmark line: %q", line)
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("iterations in %q: %v", line, err)
	}
	metrics = make(map[string]float64)
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			t.Fatalf("value of %s in %q: %v", f[i+1], line, err)
		}
		metrics[f[i+1]] = v
	}
	return f[0], n, metrics
}

func TestRunText(t *testing.T) {
	addr := serve(t, echo)
	stdout, _, err := runLoadgen(t, append([]string{"-addr", addr}, short...)...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout)
	}
	for _, want := range []string{"closed loop, 4 conns", "requests ", "latency     p50 ", "client cpu ", "errors      0\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in\n%s", want, stdout)
		}
	}
}

// TestRunCorrupt runs against a server that damages one byte per connection:
// the report counts the corrupt echoes, and run fails after printing it.
func TestRunCorrupt(t *testing.T) {
	addr := serve(t, corruptEcho)
	stdout, _, err := runLoadgen(t, append([]string{"-addr", addr, "-format", "json"}, short...)...)
	if err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("run returned %v, want a corrupt echo error", err)
	}
	var r result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	// Each connection stops at its first echo, which is corrupt.
	if n := r.ErrorKinds["corrupt"]; n < 1 || n > 4 || r.Errors != n {
		t.Errorf("errors %d by kind %v, want 1 to 4, all corrupt", r.Errors, r.ErrorKinds)
	}
}

func TestRunRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, _, err := runLoadgen(t, "-addr", addr, "-conns", "1", "-duration", "10ms", "-warmup", "0s"); err == nil {
		t.Error("run succeeded with no server")
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // benchmark name, or "" if the arguments are rejected
	}{
		{"defaults", []string{"-addr", "h:1"}, "BenchmarkEcho/conns=50/size=64"},
		{"labels", []string{"-addr", "h:1", "-labels", "impl=netpoll/mode=et"}, "BenchmarkEcho/impl=netpoll/mode=et/conns=50/size=64"},
		{"http open", []string{"-addr", "h:1", "-proto", "http", "-rate", "1e5", "-conns", "8"}, "BenchmarkHTTP/conns=8/rate=100000"},
		{"name", []string{"-addr", "h:1", "-name", "BenchmarkPing", "-pipeline", "4"}, "BenchmarkPing/conns=50/size=64/pipeline=4"},
		{"no addr", nil, ""},
		{"bad addr", []string{"-addr", "nowhere"}, ""},
		{"small size", []string{"-addr", "h:1", "-size", "15"}, ""},
		{"too much in flight", []string{"-addr", "h:1", "-size", "65536", "-pipeline", "2"}, ""},
		{"pipelined open loop", []string{"-addr", "h:1", "-rate", "100", "-pipeline", "2"}, ""},
		{"no conns", []string{"-addr", "h:1", "-conns", "0"}, ""},
		{"format", []string{"-addr", "h:1", "-format", "csv"}, ""},
		{"proto", []string{"-addr", "h:1", "-proto", "udp"}, ""},
		{"path", []string{"-addr", "h:1", "-proto", "http", "-path", "a b"}, ""},
		{"label", []string{"-addr", "h:1", "-labels", "impl"}, ""},
		{"bench name", []string{"-addr", "h:1", "-name", "Echo"}, ""},
		{"argument", []string{"-addr", "h:1", "extra"}, ""},
		{"blocked", []string{"-addr", "h:1", "-conns", "2", "-blocked", "1"}, "BenchmarkEcho/conns=2/size=64/blocked=1"},
		{"all blocked", []string{"-addr", "h:1", "-conns", "2", "-blocked", "2"}, ""},
		{"negative blocked", []string{"-addr", "h:1", "-blocked", "-1"}, ""},
		{"blocked open loop", []string{"-addr", "h:1", "-blocked", "1", "-rate", "100"}, ""},
		{"blocked http", []string{"-addr", "h:1", "-blocked", "1", "-proto", "http"}, ""},
		{"idle", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-conns", "18000", "-labels", "cfg=net"}, "BenchmarkIdle/cfg=net/conns=18000/size=64"},
		{"idle without pid", []string{"-addr", "h:1", "-idle"}, ""},
		{"idle one conn", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-conns", "1"}, ""},
		{"idle small", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-size", "47"}, ""},
		{"idle http", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-proto", "http", "-conns", "18000", "-labels", "cfg=net/proto=http"},
			"BenchmarkIdle/cfg=net/proto=http/conns=18000"},
		{"idle http small", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-proto", "http", "-size", "16"}, "BenchmarkIdle/conns=50"},
		{"idle http pipeline", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-proto", "http", "-pipeline", "2"}, ""},
		{"idle open loop", []string{"-addr", "h:1", "-idle", "-server-pid", "1", "-rate", "100"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseConfig(tt.args, io.Discard)
			switch {
			case tt.want == "" && err == nil:
				t.Errorf("accepted, benchmark %s", cfg.benchName())
			case tt.want != "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tt.want != "" && cfg.benchName() != tt.want:
				t.Errorf("benchmark %s, want %s", cfg.benchName(), tt.want)
			}
		})
	}
}
