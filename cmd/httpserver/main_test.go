package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
	"github.com/edgepoll/edgepoll/netpoll"
)

// impls are the listener implementations every behaviour is checked on.
var impls = []struct {
	name string
	args []string
}{
	{"impl=net", []string{"-impl", "net"}},
	{"impl=netpoll/mode=et", []string{"-impl", "netpoll", "-mode", "et"}},
	{"impl=netpoll/mode=oneshot", []string{"-impl", "netpoll", "-mode", "oneshot"}},
	{"impl=netpoll/mode=lt", []string{"-impl", "netpoll", "-mode", "lt"}},
}

func TestServe(t *testing.T) {
	const requests = 20
	for _, tt := range impls {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			s := start(t, tt.args...)
			c := newClient(t, nil, false)
			base := "http://" + s.addr
			for range requests {
				c.expect(t, base+"/plaintext", http.StatusOK, "text/plain", helloWorld)
				c.expect(t, base+"/json", http.StatusOK, "application/json", `{"message":"Hello, World!"}`)
			}
			if n := c.newConns.Load(); n != 1 {
				t.Errorf("%d requests opened %d connections, want 1 kept alive", 2*requests, n)
			}
			// The debug endpoints are only on -debug.
			c.expect(t, base+"/stats", http.StatusNotFound, "", "")
			c.expect(t, base+"/debug/pprof/", http.StatusNotFound, "", "")
			resp, err := c.Post(base+"/plaintext", "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST /plaintext: status %d, want %d", resp.StatusCode, http.StatusMethodNotAllowed)
			}
			c.CloseIdleConnections()
			if err := s.stop(t); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
}

// TestMemstats: GET loadproto.MemstatsPath on the served listener answers
// the process's figures after a collection as JSON, every one of them
// read (a running server has a live heap, objects, goroutines, stacks);
// other methods are refused.
func TestMemstats(t *testing.T) {
	for _, tt := range impls {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			s := start(t, tt.args...)
			c := newClient(t, nil, false)
			url := "http://" + s.addr + loadproto.MemstatsPath
			resp := c.expect(t, url, http.StatusOK, "application/json", "")
			var f loadproto.Figures
			if err := json.Unmarshal(resp.body, &f); err != nil {
				t.Fatalf("GET %s: %v in %q", loadproto.MemstatsPath, err, resp.body)
			}
			if f.HeapLive == 0 || f.HeapObjects == 0 || f.Goroutines == 0 || f.Stacks == 0 {
				t.Errorf("GET %s: %+v, want every figure read", loadproto.MemstatsPath, f)
			}
			post, err := c.Post(url, "text/plain", nil)
			if err != nil {
				t.Fatal(err)
			}
			post.Body.Close()
			if post.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST %s: status %d, want %d", loadproto.MemstatsPath, post.StatusCode, http.StatusMethodNotAllowed)
			}
			c.CloseIdleConnections()
			if err := s.stop(t); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
}

func TestTLS(t *testing.T) {
	for _, impl := range []string{"net", "netpoll"} {
		for _, tt := range []struct {
			name      string
			offerH2   bool // the client offers h2 and http/1.1, or only http/1.1
			wantMajor int
		}{
			{"alpn=h2", true, 2},
			{"alpn=http1.1", false, 1},
		} {
			t.Run("impl="+impl+"/"+tt.name, func(t *testing.T) {
				checkLeaks(t)
				certFile := filepath.Join(t.TempDir(), "cert.pem")
				s := start(t, "-impl", impl, "-tls", "-certout", certFile)
				certPEM, err := os.ReadFile(certFile)
				if err != nil {
					t.Fatal(err)
				}
				roots := x509.NewCertPool()
				if !roots.AppendCertsFromPEM(certPEM) {
					t.Fatalf("-certout %s holds no certificate:\n%s", certFile, certPEM)
				}
				c := newClient(t, &tls.Config{RootCAs: roots}, tt.offerH2)
				for range 5 {
					resp := c.expect(t, "https://"+s.addr+"/plaintext", http.StatusOK, "text/plain", helloWorld)
					if resp.ProtoMajor != tt.wantMajor {
						t.Fatalf("got %s (ALPN %q), want HTTP/%d", resp.Proto, resp.TLS.NegotiatedProtocol, tt.wantMajor)
					}
				}
				if n := c.newConns.Load(); n != 1 {
					t.Errorf("5 requests opened %d connections, want 1", n)
				}
				c.CloseIdleConnections()
				if err := s.stop(t); err != nil {
					t.Errorf("serve: %v", err)
				}
			})
		}
	}
}

func TestSelfSigned(t *testing.T) {
	cert, certPEM, err := selfSigned(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if pub, ok := cert.Leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", cert.Leaf.PublicKey)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(certPEM) {
		t.Fatalf("no certificate in the PEM:\n%s", certPEM)
	}
	for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: roots}); err == nil {
		t.Error("verified for example.com")
	}
}

func TestDebug(t *testing.T) {
	for _, tt := range impls[:2] {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			s := start(t, append(tt.args, "-debug", "127.0.0.1:0")...)
			c := newClient(t, nil, false)
			c.expect(t, "http://"+s.addr+"/plaintext", http.StatusOK, "text/plain", helloWorld)

			resp := c.expect(t, "http://"+s.debugAddr+"/stats", http.StatusOK, "application/json", "")
			var report statsReport
			if err := json.Unmarshal(resp.body, &report); err != nil {
				t.Fatalf("/stats: %v in %s", err, resp.body)
			}
			wantImpl := strings.TrimPrefix(strings.Split(tt.name, "/")[0], "impl=")
			if report.Impl != wantImpl {
				t.Errorf("/stats impl %q, want %q", report.Impl, wantImpl)
			}
			if wantImpl == "netpoll" {
				const accepts = "/netpoll/accepts:conns"
				if report.Stats[accepts] == 0 || len(report.Pollers) != netpoll.DefaultPollers || report.Pollers[0][accepts] != report.Stats[accepts] {
					t.Errorf("/stats: %d accepts with %d pollers, want > 0 with %d, the same on poller 0, in %s",
						report.Stats[accepts], len(report.Pollers), netpoll.DefaultPollers, resp.body)
				}
				if n := len(report.Stats); n != len(netpoll.AllStats())-serverStats() {
					t.Errorf("/stats: %d statistics, want every group one (%d)", n, len(netpoll.AllStats())-serverStats())
				}
				if !strings.Contains(report.Config, "mode=et") {
					t.Errorf("/stats config %q, want mode=et", report.Config)
				}
			} else if report.Pollers != nil || report.Stats != nil || report.Config != "" {
				t.Errorf("/stats for impl=net has netpoll counters: %s", resp.body)
			}
			if p := report.Process; p.CPUNanos <= 0 || p.CtxSwitches <= 0 {
				t.Errorf("/stats process %+v, want CPU time and context switches", p)
			}

			c.expect(t, "http://"+s.debugAddr+"/debug/pprof/", http.StatusOK, "text/html; charset=utf-8", "")
			c.expect(t, "http://"+s.debugAddr+"/debug/pprof/cmdline", http.StatusOK, "text/plain; charset=utf-8", "")
			c.CloseIdleConnections()
			if err := s.stop(t); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
}

func TestLifetime(t *testing.T) {
	checkLeaks(t)
	s := start(t, "-lifetime", "10ms", "-debug", "127.0.0.1:0")
	if err := s.wait(t); err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestFiles serves a directory with -files, with and without zero copy,
// and checks a 4 MiB file arrives whole.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range impls {
		for _, zc := range []string{"-zerocopy=true", "-zerocopy=false"} {
			t.Run(tt.name+"/"+zc, func(t *testing.T) {
				checkLeaks(t)
				s := start(t, append(tt.args, "-files", dir, zc)...)
				c := newClient(t, nil, false)
				for range 2 {
					c.expect(t, "http://"+s.addr+"/files/f.bin", http.StatusOK, "application/octet-stream", string(data))
				}
				c.expect(t, "http://"+s.addr+"/files/none", http.StatusNotFound, "", "")
				c.CloseIdleConnections()
				if err := s.stop(t); err != nil {
					t.Errorf("serve: %v", err)
				}
			})
		}
	}
}

func TestBadFlags(t *testing.T) {
	checkLeaks(t)
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"impl", []string{"-impl", "x"}, `-impl "x"`},
		{"mode", []string{"-mode", "bad"}, `mode "bad"`},
		{"spin", []string{"-spin", "bad"}, `spin "bad"`},
		{"undefined", []string{"-nosuch"}, "-nosuch"},
		{"arguments", []string{"extra"}, `"extra"`},
		{"certout without tls", []string{"-certout", "c.pem"}, `-certout "c.pem"`},
		{"certout unwritable", []string{"-tls", "-certout", filepath.Join(dir, "none", "c.pem")}, "-certout"},
		{"debug", []string{"-debug", "127.0.0.1:bad"}, `-debug "127.0.0.1:bad"`},
		{"files", []string{"-files", filepath.Join(dir, "none")}, "-files"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := serve(t.Context(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("wrote %q to stdout", stdout.String())
			}
		})
	}
}

// server is a serve call running in the background.
type server struct {
	addr       string // the announced address
	debugAddr  string // the debug listener's, with -debug
	cancel     context.CancelFunc
	done       chan error    // serve's result
	stdoutDone chan struct{} // closed when stdout is read to its end
}

// start runs serve with args and returns once it has announced its
// address (and the debug address, with -debug).
func start(t *testing.T, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdoutR, stdoutW := io.Pipe()
	stderr := new(lockedBuffer)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr)
		}
	})
	s := &server{cancel: cancel, done: make(chan error, 1), stdoutDone: make(chan struct{})}
	t.Cleanup(cancel) // in case start fails
	go func() {
		err := serve(ctx, args, stdoutW, stderr)
		stdoutW.Close()
		s.done <- err
	}()
	announced := 1
	if slices.Contains(args, "-debug") {
		announced++
	}
	// lines holds the announcements; later lines are dropped.
	lines := make(chan string, announced)
	go func() {
		defer close(s.stdoutDone)
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, stdoutR) // after a line too long for the scanner
	}()

	watchdog := time.NewTimer(watchdogDelay(t))
	defer watchdog.Stop()
	readAddr := func(what string) string {
		select {
		case line := <-lines:
			addr, ok := strings.CutPrefix(line, what+" listening on ")
			if !ok {
				t.Fatalf("stdout line %q, want %q listening on ...", line, what)
			}
			addr, _, _ = strings.Cut(addr, " ")
			return addr
		case err := <-s.done:
			t.Fatalf("serve returned %v before announcing %s", err, what)
		case <-watchdog.C:
			t.Fatalf("no %s address announced", what)
		}
		return ""
	}
	s.addr = readAddr("httpserver")
	if announced > 1 {
		s.debugAddr = readAddr("debug")
	}
	return s
}

// stop cancels serve's context and returns its result.
func (s *server) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	return s.wait(t)
}

// wait returns serve's result, once it has returned and its stdout is read.
func (s *server) wait(t *testing.T) error {
	t.Helper()
	defer s.cancel()
	watchdog := time.NewTimer(watchdogDelay(t))
	defer watchdog.Stop()
	select {
	case err := <-s.done:
		<-s.stdoutDone
		return err
	case <-watchdog.C:
		t.Fatal("serve did not return")
		return nil
	}
}

// client is an HTTP client that counts the connections it opens. It offers
// HTTP/2 over TLS only if asked to.
type client struct {
	*http.Client
	tr       *http.Transport
	newConns atomic.Int64
}

func newClient(t *testing.T, tlsConfig *tls.Config, offerH2 bool) *client {
	c := &client{tr: &http.Transport{TLSClientConfig: tlsConfig, ForceAttemptHTTP2: offerH2}}
	c.Client = &http.Client{Transport: c.tr, Timeout: watchdogDelay(t)}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func (c *client) CloseIdleConnections() { c.tr.CloseIdleConnections() }

// response is an HTTP response with its body read.
type response struct {
	*http.Response
	body []byte
}

// expect GETs url and checks the status, the Server and Date headers and,
// unless empty, the content type and the body.
func (c *client) expect(t *testing.T, url string, status int, contentType, body string) response {
	t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			c.newConns.Add(1)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != status {
		t.Fatalf("GET %s: status %d, want %d", url, resp.StatusCode, status)
	}
	if contentType != "" && resp.Header.Get("Content-Type") != contentType {
		t.Errorf("GET %s: Content-Type %q, want %q", url, resp.Header.Get("Content-Type"), contentType)
	}
	if body != "" && string(b) != body {
		t.Errorf("GET %s: body %q, want %q", url, b, body)
	}
	if resp.Header.Get("Date") == "" {
		t.Errorf("GET %s: no Date header", url)
	}
	if strings.HasSuffix(url, "/plaintext") || strings.HasSuffix(url, "/json") {
		if got := resp.Header.Get("Server"); got != serverName {
			t.Errorf("GET %s: Server %q, want %q", url, got, serverName)
		}
	}
	return response{resp, b}
}

var warmUp sync.Once

// checkLeaks records the open fds and goroutines now and, when t ends,
// fails it if more are left. The first call runs the server once so that
// what the runtime opens on first use (its epoll instance) is counted.
func checkLeaks(t *testing.T) {
	t.Helper()
	warmUp.Do(func() {
		s := start(t, "-tls", "-debug", "127.0.0.1:0")
		if err := s.stop(t); err != nil {
			t.Fatalf("warm-up run: %v", err)
		}
	})
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	t.Cleanup(func() {
		// A goroutine that has been joined may still be on its way out.
		watchdog := time.NewTimer(watchdogDelay(t))
		defer watchdog.Stop()
		for runtime.NumGoroutine() > goroutines {
			select {
			case <-watchdog.C:
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
			default:
				runtime.Gosched()
			}
		}
		if now := openFDs(t); now != fds {
			t.Errorf("%d open fds left, %d before", now, fds)
		}
	})
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open fds: %v", err)
	}
	return len(ents)
}

// watchdogDelay is how long a test waits for what should happen at once
// before it fails instead of hanging.
func watchdogDelay(t *testing.T) time.Duration {
	d := 10 * time.Second
	if deadline, ok := t.Deadline(); ok {
		d = min(d, time.Until(deadline)*9/10)
	}
	return d
}

// lockedBuffer is a bytes.Buffer safe for concurrent use: the servers'
// error logs write to it from their connections' goroutines.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var _ io.Writer = (*lockedBuffer)(nil)

// serverStats counts the statistics netpoll.AllStats marks Server.
func serverStats() int {
	n := 0
	for _, d := range netpoll.AllStats() {
		if d.Server {
			n++
		}
	}
	return n
}
