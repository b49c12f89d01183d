package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// wrkStatus counts the responses that are not 2xx: wrk's own summary
// counts only those above 399.
const wrkStatus = `
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end
function init(args)
  non2xx = 0
end
function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  end
end
function done(summary, latency, requests)
  local n = 0
  for _, thread in ipairs(threads) do
    n = n + thread:get("non2xx")
  end
  io.write(string.format("non2xx %d\n", n))
end
`

// TestWrk drives the server with wrk (the Debian package; CI installs it)
// for a short run on package net and on netpoll's default mode, and checks
// that it answered: requests completed, no socket errors (connect, read,
// write or timeout: any request slower than wrk's 2s) and no status other
// than 2xx.
func TestWrk(t *testing.T) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		testtool.Missing(t, "wrk (apt-get install wrk)", err)
	}
	script := filepath.Join(t.TempDir(), "status.lua")
	if err := os.WriteFile(script, []byte(wrkStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range impls[:2] { // net, netpoll et
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			s := start(t, tt.args...)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, wrk, "-t1", "-c32", "-d2s", "-s", script, "http://"+s.addr+"/plaintext").CombinedOutput()
			if err != nil {
				t.Fatalf("wrk: %v\n%s", err, out)
			}
			r, err := parseWrk(out)
			if err != nil {
				t.Fatalf("%v in wrk's output:\n%s", err, out)
			}
			if r.requests == 0 {
				t.Errorf("wrk completed no request:\n%s", out)
			}
			if r.socketErrors != [4]int{} {
				t.Errorf("wrk socket errors: connect %d, read %d, write %d, timeout %d:\n%s",
					r.socketErrors[0], r.socketErrors[1], r.socketErrors[2], r.socketErrors[3], out)
			}
			if r.non2xx != 0 || r.non2xx3xx != 0 {
				t.Errorf("%d responses were not 2xx:\n%s", r.non2xx, out)
			}
			t.Logf("wrk -t1 -c32 -d2s: %d requests in %s, no socket error, all 2xx", r.requests, r.duration)
			if err := s.stop(t); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
}

// wrkResult is what TestWrk reads from wrk's report.
type wrkResult struct {
	requests     int
	duration     string
	socketErrors [4]int // connect, read, write, timeout
	non2xx3xx    int    // wrk's own count, of statuses above 399
	non2xx       int    // from wrkStatus
}

var (
	wrkRequests  = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([\d.]+\w+),`)
	wrkSocket    = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xx3xx = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)`)
	wrkNon2xx    = regexp.MustCompile(`(?m)^non2xx (\d+)$`)
)

// parseWrk reads wrk's report. The socket-error and non-2xx-or-3xx lines
// appear only when those counts are not zero; the script's non2xx line
// always does.
func parseWrk(out []byte) (wrkResult, error) {
	var r wrkResult
	m := wrkRequests.FindSubmatch(out)
	if m == nil {
		return r, errNoMatch("requests")
	}
	r.requests, _ = strconv.Atoi(string(m[1]))
	r.duration = string(m[2])
	if m := wrkSocket.FindSubmatch(out); m != nil {
		for i := range r.socketErrors {
			r.socketErrors[i], _ = strconv.Atoi(string(m[i+1]))
		}
	}
	if m := wrkNon2xx3xx.FindSubmatch(out); m != nil {
		r.non2xx3xx, _ = strconv.Atoi(string(m[1]))
	}
	m = wrkNon2xx.FindSubmatch(out)
	if m == nil {
		return r, errNoMatch("non2xx (from the Lua script)")
	}
	r.non2xx, _ = strconv.Atoi(string(m[1]))
	return r, nil
}

type errNoMatch string

func (e errNoMatch) Error() string { return "no " + string(e) + " line" }

func TestParseWrk(t *testing.T) {
	out := []byte(`Running 2s test @ http://127.0.0.1:1/plaintext
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.10ms  502.00us   9.00ms   80.00%
    Req/Sec    29.00k     1.00k   31.00k    70.00%
  57712 requests in 2.00s, 7.10MB read
  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 5
Requests/sec:  28856.00
Transfer/sec:      3.55MB
non2xx 6
`)
	r, err := parseWrk(out)
	want := wrkResult{requests: 57712, duration: "2.00s", socketErrors: [4]int{1, 2, 3, 4}, non2xx3xx: 5, non2xx: 6}
	if err != nil || r != want {
		t.Errorf("parseWrk = %+v, %v; want %+v", r, err, want)
	}
	if _, err := parseWrk([]byte("unable to connect to 127.0.0.1:1 Connection refused\n")); err == nil {
		t.Error("parseWrk accepted wrk's connection error")
	}
}
