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
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// markedEcho is an echo server that honours loadproto's marks as
// echoserver does: it holds a Delay request for delay, and answers a whole
// Memstats request with figures of its own making, a count of its open
// connections times fixed sizes, so that the per-connection figures are
// known exactly.
func markedEcho(delay time.Duration, open *atomic.Int64) func(net.Conn) {
	return func(c net.Conn) {
		open.Add(1)
		defer open.Add(-1)
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				b := buf[:n]
				switch loadproto.MarkOf(b) {
				case loadproto.Delay:
					// The behaviour under test: a server holding a Delay
					// request (echoserver -delay), not a wait for a goroutine.
					time.Sleep(delay)
				case loadproto.Memstats:
					k := uint64(open.Load())
					loadproto.PutStats(b, loadproto.Figures{HeapLive: 1000 * k, HeapObjects: 3 * k, Goroutines: k, Stacks: 2048 * k})
				}
				if _, err := c.Write(b); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
}

// runIdleTest runs loadgen -idle with a watchdog long enough for its
// settling waits (up to 5 s each of six readings, with other tests moving
// the machine's figures).
func runIdleTest(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(args, &out, &errOut) }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("run %q did not return", args)
	}
	return out.String(), err
}

// idleBench runs loadgen -idle -format bench with args, checks that its
// benchmark line is named want with one iteration, and returns its
// figures by unit.
func idleBench(t *testing.T, want string, args ...string) map[string]float64 {
	t.Helper()
	stdout, err := runIdleTest(t, append([]string{"-idle", "-format", "bench"}, args...)...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	name, n, m := parseBench(t, lines[len(lines)-1])
	if name != want || n != 1 {
		t.Errorf("benchmark %s, %d iterations; want %s, 1", name, n, want)
	}
	return m
}

// TestIdle runs the idle experiment against a server that answers the
// Memstats request and one that echoes it: both give the RSS and Slab
// figures; the first also the GC ones, exactly what its figures say per
// connection; the second none of them.
func TestIdle(t *testing.T) {
	const conns = 50
	pid := strconv.Itoa(os.Getpid()) // the servers run in this process
	for _, tt := range []struct {
		name    string
		handle  func(net.Conn)
		answers bool
	}{
		{"memstats", markedEcho(0, new(atomic.Int64)), true},
		{"echo", echo, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := serve(t, tt.handle)
			m := idleBench(t, "BenchmarkIdle/cfg=test/conns=50/size=64", "-addr", addr, "-conns", strconv.Itoa(conns), "-server-pid", pid, "-labels", "cfg=test")
			for _, u := range []string{"rss-bytes/conn", "rss-1conn-bytes", "rss-bytes", "rss-burst-bytes/conn", "rss-burst-bytes", "slab-bytes/conn", "unsettled-readings"} {
				if _, ok := m[u]; !ok {
					t.Errorf("no %s", u)
				}
			}
			if m["rss-1conn-bytes"] <= 0 || m["rss-bytes"] <= 0 || m["rss-burst-bytes"] <= 0 {
				t.Errorf("RSS readings %v, %v, %v: want them all read", m["rss-1conn-bytes"], m["rss-bytes"], m["rss-burst-bytes"])
			}
			gc := map[string]float64{"heap-live-bytes/conn": 1000, "heap-objects/conn": 3, "goroutines/conn": 1, "stack-bytes/conn": 2048,
				"heap-live-burst-bytes/conn": 1000, "heap-objects-burst/conn": 3, "goroutines-burst/conn": 1, "stack-burst-bytes/conn": 2048}
			for u, want := range gc {
				v, ok := m[u]
				if ok != tt.answers || (ok && v != want) {
					t.Errorf("%s: %v (there: %v), want %v there: %v", u, v, ok, want, tt.answers)
				}
			}
			for _, u := range []string{"rss-gc-bytes/conn", "rss-gc-1conn-bytes", "rss-gc-bytes"} {
				if _, ok := m[u]; ok != tt.answers {
					t.Errorf("%s there: %v, want %v", u, ok, tt.answers)
				}
			}
		})
	}
}

// TestIdleJSON: the JSON report carries the readings and, from a server
// that answers, its figures at 1 conn, all and after the burst.
func TestIdleJSON(t *testing.T) {
	addr := serve(t, markedEcho(0, new(atomic.Int64)))
	stdout, err := runIdleTest(t, "-idle", "-addr", addr, "-conns", "3", "-server-pid", strconv.Itoa(os.Getpid()), "-format", "json")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout)
	}
	var r idleResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if r.Conns != 3 || r.RSS1 <= 0 || r.GC == nil || r.GC.One.Goroutines != 1 || r.GC.All.Goroutines != 3 || r.GC.Burst.Goroutines != 3 {
		t.Errorf("report %+v, GC %+v: want 3 conns, the server's 1 then 3 connections counted", r, r.GC)
	}
}

// TestBlocked: with -blocked 1, the first connection's requests are
// marked Delay and held by the server; they are counted apart, and the
// figures are the other connection's, which the server does not hold.
func TestBlocked(t *testing.T) {
	const delay = 20 * time.Millisecond
	addr := serve(t, markedEcho(delay, new(atomic.Int64)))
	window := 300 * time.Millisecond
	stdout, _, err := runLoadgen(t, "-addr", addr, "-conns", "2", "-blocked", "1", "-duration", window.String(), "-warmup", "100ms", "-format", "json")
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stdout)
	}
	var r result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if r.Name != "BenchmarkEcho/conns=2/size=64/blocked=1" || r.BlockedConns != 1 || r.Errors != 0 || r.Requests == 0 || r.Verified != r.Requests {
		t.Errorf("%s: blocked conns %d, requests %d (%d verified), errors %d", r.Name, r.BlockedConns, r.Requests, r.Verified, r.Errors)
	}
	// Each held request takes at least delay: the window holds no more.
	if max := int64(window/delay) + 1; r.Blocked < 1 || r.Blocked > max {
		t.Errorf("%d blocked requests in the window, want 1 to %d", r.Blocked, max)
	}
	stdout, _, err = runLoadgen(t, "-addr", addr, "-conns", "2", "-blocked", "1", "-duration", "100ms", "-warmup", "0s", "-format", "bench")
	if err != nil || !strings.Contains(stdout, " blocked-requests\t") {
		t.Errorf("bench format: %v, no blocked-requests in\n%s", err, stdout)
	}
}

// TestIdleTooMany: more connections than this process may open, or than
// there are ephemeral ports, is refused before any is dialled.
func TestIdleTooMany(t *testing.T) {
	addr := serve(t, echo)
	_, err := runIdleTest(t, "-idle", "-addr", addr, "-conns", "1000000", "-server-pid", strconv.Itoa(os.Getpid()))
	if err == nil || !(strings.Contains(err.Error(), "RLIMIT_NOFILE") || strings.Contains(err.Error(), "ephemeral ports")) {
		t.Errorf("a million connections: %v, want a refusal naming the descriptor limit or the ports", err)
	}
}

// TestIdleHTTP runs the idle experiment over HTTP (-idle -proto http)
// against an in-process net/http server: one that answers GET
// loadproto.MemstatsPath, as cmd/httpserver does, with figures of its
// own making (its open connections times fixed sizes), and one that does
// not (404). Each of the connections is one the server accepted and kept
// (none redialled), made one GET before the burst and one in it; the RSS
// and Slab figures are read from both servers, the GC figures from the
// first alone, exactly what its figures say per connection.
func TestIdleHTTP(t *testing.T) {
	const conns = 20
	for _, tt := range []struct {
		name    string
		answers bool
	}{
		{"memstats", true},
		{"404", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var open, accepted, gets atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("GET /plaintext", func(w http.ResponseWriter, _ *http.Request) {
				gets.Add(1)
				io.WriteString(w, "Hello, World!")
			})
			if tt.answers {
				mux.HandleFunc("GET "+loadproto.MemstatsPath, func(w http.ResponseWriter, _ *http.Request) {
					k := uint64(open.Load())
					json.NewEncoder(w).Encode(loadproto.Figures{HeapLive: 1000 * k, HeapObjects: 3 * k, Goroutines: k, Stacks: 2048 * k})
				})
			}
			srv := httptest.NewUnstartedServer(mux)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				switch s {
				case http.StateNew:
					accepted.Add(1)
					open.Add(1)
				case http.StateClosed, http.StateHijacked:
					open.Add(-1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			m := idleBench(t, "BenchmarkIdle/cfg=test/proto=http/conns=20", "-proto", "http", "-addr", srv.Listener.Addr().String(),
				"-conns", strconv.Itoa(conns), "-server-pid", strconv.Itoa(os.Getpid()), "-labels", "cfg=test/proto=http")
			if a, g := accepted.Load(), gets.Load(); a != conns || g != 2*conns {
				t.Errorf("the server accepted %d connections and served %d GETs; want %d and %d (one each, then the burst)", a, g, conns, 2*conns)
			}
			if m["rss-1conn-bytes"] <= 0 || m["rss-bytes"] <= 0 || m["rss-burst-bytes"] <= 0 {
				t.Errorf("RSS readings %v, %v, %v: want them all read", m["rss-1conn-bytes"], m["rss-bytes"], m["rss-burst-bytes"])
			}
			for u, want := range map[string]float64{"heap-live-bytes/conn": 1000, "heap-objects/conn": 3, "goroutines/conn": 1, "stack-bytes/conn": 2048,
				"goroutines-burst/conn": 1} {
				v, ok := m[u]
				if ok != tt.answers || (ok && v != want) {
					t.Errorf("%s: %v (there: %v), want %v there: %v", u, v, ok, want, tt.answers)
				}
			}
			if _, ok := m["rss-gc-bytes/conn"]; ok != tt.answers {
				t.Errorf("rss-gc-bytes/conn there: %v, want %v", ok, tt.answers)
			}
		})
	}
}
