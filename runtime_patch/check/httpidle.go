package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"time"
)

// The httpidle check (GODEBUG=httpidlezeroread=1, patch 007, with
// netpollzeroread=1 from 006): a child ("check child httpidle") serves an
// unmodified http.Server (a handler, nothing else: no hook, no wrapper)
// on a loopback TCP listener and on a unix stream socket, opens
// httpIdleConns keep-alive connections to it, sends one GET on each, and
// once every server connection waits for its next request it reports:
//
//   - idlewait: server goroutines parked in IO wait under net/http's
//     (*conn).idleWait, the zero-byte Read without buffers;
//   - peek: server goroutines parked in IO wait under bufio's Peek, the
//     stock wait, which holds the connection's bufio.Reader and
//     bufio.Writer;
//   - events: runtime/metrics'
//     /godebug/non-default-behavior/httpidlezeroread:events, one per
//     zero-byte wait begun;
//   - heap: the live heap per connection (HeapAlloc after two GCs, which
//     empty sync.Pool's caches, with the connections idle, less the same
//     before they were dialed), server and client ends together.
//
// Then a second GET on every connection must be answered (keep-alive
// still works after the wait). The parent runs the child three ways and
// wants: with both settings, every connection in idlewait and as many
// events; with neither, and with httpidlezeroread=1 alone (which has no
// effect), every connection in peek and no event; and with both, a heap
// per connection at least httpIdleSaved bytes below each of the others'
// (the two buffers are 8 KiB). Counts and bytes, never times.
const (
	httpIdleConns = 200
	httpIdleSaved = 6 << 10
)

// httpIdleRun is one network's report from one child.
type httpIdleRun struct {
	network                     string
	conns, idleWait, peek, heap int
	events                      int
}

func (c checker) httpIdle() error {
	runs := []struct{ name, godebug string }{
		{"none", ""},
		{"alone", "httpidlezeroread=1"},
		{"both", "netpollzeroread=1,httpidlezeroread=1"},
	}
	got := map[string][]httpIdleRun{}
	for _, r := range runs {
		stdout, _, err := c.child(r.godebug, nil, nil, "httpidle", "-n", fmt.Sprint(httpIdleConns))
		if err != nil {
			return err
		}
		res, err := parseHTTPIdle(stdout)
		if err != nil {
			return err
		}
		for _, run := range res {
			fmt.Fprintf(c.out, "httpidle: GODEBUG=%q %s conns=%d idlewait=%d peek=%d events=%d heap-per-conn=%d\n",
				r.godebug, run.network, run.conns, run.idleWait, run.peek, run.events, run.heap)
		}
		got[r.name] = res
	}
	if err := judgeHTTPIdle(got["none"], got["alone"], got["both"]); err != nil {
		return err
	}
	fmt.Fprintln(c.out, "httpidle: ok, idle keep-alive connections wait without their buffers under both settings, and with them otherwise")
	return nil
}

// judgeHTTPIdle applies the assertions above to the three children's
// reports, each one run per network in the same order.
func judgeHTTPIdle(none, alone, both []httpIdleRun) error {
	if len(both) == 0 || len(none) != len(both) || len(alone) != len(both) {
		return fmt.Errorf("httpidle: %d, %d and %d networks reported", len(none), len(alone), len(both))
	}
	for i, on := range both {
		if on.idleWait != on.conns || on.peek != 0 || on.events != on.conns {
			return fmt.Errorf("httpidle: both settings, %s: %d of %d connections wait without buffers, %d in Peek, %d events; want all, 0, %d",
				on.network, on.idleWait, on.conns, on.peek, on.events, on.conns)
		}
		for _, off := range []struct {
			name string
			run  httpIdleRun
		}{{"no setting", none[i]}, {"httpidlezeroread=1 alone", alone[i]}} {
			r := off.run
			if r.network != on.network {
				return fmt.Errorf("httpidle: networks %s and %s in the same place", r.network, on.network)
			}
			if r.peek != r.conns || r.idleWait != 0 || r.events != 0 {
				return fmt.Errorf("httpidle: %s, %s: %d of %d connections in Peek, %d without buffers, %d events; want all, 0, 0",
					off.name, r.network, r.peek, r.conns, r.idleWait, r.events)
			}
			if on.heap > r.heap-httpIdleSaved {
				return fmt.Errorf("httpidle: %s: %d heap bytes per idle connection under both settings, %d with %s: want at least %d fewer",
					on.network, on.heap, r.heap, off.name, httpIdleSaved)
			}
		}
	}
	return nil
}

// parseHTTPIdle reads the child's lines, one per network:
// "network=tcp conns=200 idlewait=200 peek=0 events=200 heap=1234".
func parseHTTPIdle(stdout []byte) ([]httpIdleRun, error) {
	var runs []httpIdleRun
	for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
		network, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(network, "network=") {
			return nil, fmt.Errorf("httpidle: unexpected line %q", line)
		}
		kv, err := fields(rest, "conns", "idlewait", "peek", "events", "heap")
		if err != nil {
			return nil, err
		}
		runs = append(runs, httpIdleRun{
			network: strings.TrimPrefix(network, "network="),
			conns:   kv["conns"], idleWait: kv["idlewait"], peek: kv["peek"], events: kv["events"], heap: kv["heap"],
		})
	}
	return runs, nil
}

// httpIdleChild serves and measures as described above, over TCP and a
// unix stream socket, and prints a line per network.
func httpIdleChild(conns int, stdout io.Writer) error {
	for _, network := range []string{"tcp", "unix"} {
		line, err := httpIdleNetwork(network, conns)
		if err != nil {
			return fmt.Errorf("httpidle %s: %w", network, err)
		}
		fmt.Fprintln(stdout, line)
	}
	return nil
}

func httpIdleNetwork(network string, n int) (string, error) {
	addr := "127.0.0.1:0"
	if network == "unix" {
		dir, err := os.MkdirTemp("", "edgepoll-httpidle")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		addr = filepath.Join(dir, "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-served
	}()

	before := liveHeap()
	events0, err := idleEvents()
	if err != nil {
		return "", err
	}
	clients := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial(network, ln.Addr().String())
		if err != nil {
			return "", err
		}
		clients = append(clients, c)
		c.SetDeadline(time.Now().Add(httpIdleWatchdog))
		if err := httpIdleGet(c); err != nil {
			return "", err
		}
	}
	idle, peek, err := httpIdleWaiters(n)
	if err != nil {
		return "", err
	}
	heap := (liveHeap() - before) / int64(n)
	events, err := idleEvents()
	if err != nil {
		return "", err
	}
	events -= events0
	for i, c := range clients {
		if err := httpIdleGet(c); err != nil {
			return "", fmt.Errorf("second request on connection %d: %w", i, err)
		}
	}
	return fmt.Sprintf("network=%s conns=%d idlewait=%d peek=%d events=%d heap=%d", network, n, idle, peek, events, heap), nil
}

// httpIdleWatchdog bounds the child's waits: it fails instead of hanging.
const httpIdleWatchdog = 30 * time.Second

// httpIdleGet sends a GET on c and reads its response, with a reader of
// its own that it drops, so that the client side holds no buffer.
func httpIdleGet(c net.Conn) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("response %d %q", res.StatusCode, body)
	}
	return nil
}

// httpIdleWaiters waits until n server goroutines are parked in IO wait
// for their next request, and returns how many of them wait in
// (*conn).idleWait (no buffers) and how many in bufio's Peek.
func httpIdleWaiters(n int) (idle, peek int, err error) {
	deadline := time.Now().Add(httpIdleWatchdog)
	buf := make([]byte, 1<<22)
	for {
		stacks := buf[:runtime.Stack(buf, true)]
		idle, peek = 0, 0
		for g := range bytes.SplitSeq(stacks, []byte("\n\n")) {
			if !bytes.Contains(g, []byte("[IO wait")) || !bytes.Contains(g, []byte("net/http.(*conn).serve")) {
				continue
			}
			switch {
			case bytes.Contains(g, []byte("net/http.(*conn).idleWait")):
				idle++
			case bytes.Contains(g, []byte("bufio.(*Reader).Peek")):
				peek++
			}
		}
		if idle+peek >= n {
			return idle, peek, nil
		}
		if time.Now().After(deadline) {
			return idle, peek, fmt.Errorf("only %d of %d server connections waiting for a request (%d without buffers, %d in Peek)", idle+peek, n, idle, peek)
		}
		runtime.Gosched()
	}
}

// liveHeap returns the heap's live bytes, after two GCs: the first moves
// sync.Pool's objects to its victim cache, the second frees them.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// idleEvents returns the httpidlezeroread count of runtime/metrics: the
// zero-byte waits net/http began.
func idleEvents() (int, error) {
	s := []metrics.Sample{{Name: "/godebug/non-default-behavior/httpidlezeroread:events"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, errors.New("runtime/metrics has no httpidlezeroread counter: a toolchain without patch 007")
	}
	return int(s[0].Value.Uint64()), nil
}
