package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// The idle experiment (-idle) asks what a server keeps for a connection
// that is open and quiet, the cost that decides how many connections a
// machine can hold. Against the server -server-pid it does, in this order:
//
//   - reads the Slab line of /proc/meminfo, opens one connection, echoes
//     one message on it and reads the server's VmRSS once it settles (RSS
//     1 conn);
//   - sends a Memstats request (loadproto): a server that knows it
//     (echoserver) collects garbage and returns freed memory to the OS,
//     then answers with its live heap, heap objects, goroutines and stack
//     bytes, and VmRSS is read again once it settles (RSS 1 conn after
//     GC); a server that echoes the request has none of the GC figures.
//     This comes after the 1-conn reading so as not to change it, but it
//     changes what the next one holds: a process's first collection costs
//     memory of its own (some 0.6 MiB of anonymous memory in a fresh
//     echoserver, the collector's workers and metadata), and RSS all then
//     holds it. A server that is not asked collects anyway once its heap
//     reaches 4 MiB, live and garbage: on demand's 443 live bytes a
//     connection alone come to that at some 9,500 connections, the other
//     echoserver configurations' far sooner, so at 10,000 connections and
//     above the as-is figure holds what it held before the request; at a
//     few hundred it does not (200 connections: on demand's as-is went
//     from about 1.1 to about 5 KiB/conn). The same cost is why after GC
//     is measured from RSS 1 conn after GC, not from the as-is RSS 1 conn;
//   - opens the other connections, each of which echoes one message too,
//     so the server has set up all it sets up per connection (goroutine,
//     buffers, registration), reads Slab again and then the settled VmRSS
//     (RSS all). "as-is", the verdict's figure, is (RSS all - RSS 1 conn)
//     / (conns - 1), and "kernel" is the growth of Slab over conns;
//   - a Memstats request again and the settled VmRSS: "after GC" is the
//     growth of RSS after GC from 1 conn to all, over conns - 1, and heap
//     live and objects the growth of the figures likewise;
//   - a burst: every connection sends one message, all of them before any
//     echo is read, then every echo is read; after the settled VmRSS,
//     "after burst" is its growth over RSS 1 conn, per connection added
//     (an echoserver's after the collections above, a peer's without). A
//     goroutine-per-connection server keeps what it has (a goroutine's g
//     is never freed, its stack may have grown); a server on demand runs
//     a handler goroutine for each readable connection, as many at once as
//     the burst makes readable, and may keep their stacks and gs;
//   - a Memstats request once more, for the heap and stack figures after
//     the burst.
//
// With -proto http each connection's exchange is one keep-alive GET -path
// (the server's plaintext handler) whose whole response is read, the
// burst is one more on every connection, and the memstats request is GET
// loadproto.MemstatsPath on the first connection: cmd/httpserver collects
// and answers the same figures as JSON; a server answering another status
// (404 without the path) has none of the GC figures, like a server that
// echoes the Memstats request.
//
// VmRSS is the server's user-space memory as the kernel sees it, the Go
// runtime's retained heap included; the kernel's own socket and epoll
// memory is not in it. Slab is, with the rest of the kernel's: it is
// system-wide and holds both ends of every loopback connection (loadgen's
// socket too), and anything else the machine does moves it, so the kernel
// figure is rough. The connections close with a reset, so that no
// TIME_WAIT socket is left in Slab for the next server's kernel figure.

const (
	idleDialers = 32               // connections dialled at once, far below the listen backlog
	idleWait    = 10 * time.Second // bound on one connection's dial, and on one exchange
	rssPoll     = 100 * time.Millisecond
	rssWindow   = 5               // consecutive readings that must agree for a figure to have settled
	rssSlack    = 64 << 10        // how far they may differ (bytes), or 0.5% of the figure if more
	rssBound    = 5 * time.Second // the longest wait for a figure to settle
)

// idleResult is what the idle experiment measured, in bytes and counts.
type idleResult struct {
	Name       string   `json:"name"`
	Addr       string   `json:"addr"`
	Proto      string   `json:"proto"`
	Path       string   `json:"path,omitempty"` // -proto http: the GET of each connection
	Conns      int      `json:"conns"`
	Size       int      `json:"size,omitempty"` // -proto echo: the message size
	RSS1       int64    `json:"rss_1conn"`      // VmRSS with one connection
	RSSAll     int64    `json:"rss_all"`        // with all of them
	RSSBurst   int64    `json:"rss_burst"`      // after the burst
	SlabBefore int64    `json:"slab_before"`
	SlabAfter  int64    `json:"slab_all"`
	GC         *idleGC  `json:"gc,omitempty"`        // nil when the server echoed the Memstats request
	Unsettled  []string `json:"unsettled,omitempty"` // the readings still moving when rssBound ran out
}

// idleGC is what the server's Memstats answers told, and VmRSS after each
// collection.
type idleGC struct {
	RSS1   int64             `json:"rss_1conn"`
	RSSAll int64             `json:"rss_all"`
	One    loadproto.Figures `json:"one"`
	All    loadproto.Figures `json:"all"`
	Burst  loadproto.Figures `json:"burst"`
}

// perConn is the growth from a (at 1 conn) to b over the conns-1
// connections added, per connection.
func perConn[T int64 | uint64](a, b T, conns int) float64 {
	return (float64(b) - float64(a)) / float64(conns-1)
}

// metrics are the result's figures as benchmark units, the GC ones only
// when the server answered.
func (r *idleResult) metrics() []metric {
	n := r.Conns
	ms := []metric{
		{perConn(r.RSS1, r.RSSAll, n), "rss-bytes/conn"},
		{float64(r.RSS1), "rss-1conn-bytes"},
		{float64(r.RSSAll), "rss-bytes"},
		{perConn(r.RSS1, r.RSSBurst, n), "rss-burst-bytes/conn"},
		{float64(r.RSSBurst), "rss-burst-bytes"},
		{float64(r.SlabAfter-r.SlabBefore) / float64(n), "slab-bytes/conn"},
		{float64(len(r.Unsettled)), "unsettled-readings"},
	}
	if g := r.GC; g != nil {
		ms = append(ms,
			metric{perConn(g.RSS1, g.RSSAll, n), "rss-gc-bytes/conn"},
			metric{float64(g.RSS1), "rss-gc-1conn-bytes"},
			metric{float64(g.RSSAll), "rss-gc-bytes"},
			metric{perConn(g.One.HeapLive, g.All.HeapLive, n), "heap-live-bytes/conn"},
			metric{perConn(g.One.HeapObjects, g.All.HeapObjects, n), "heap-objects/conn"},
			metric{perConn(g.One.Goroutines, g.All.Goroutines, n), "goroutines/conn"},
			metric{perConn(g.One.Stacks, g.All.Stacks, n), "stack-bytes/conn"},
			metric{perConn(g.One.HeapLive, g.Burst.HeapLive, n), "heap-live-burst-bytes/conn"},
			metric{perConn(g.One.HeapObjects, g.Burst.HeapObjects, n), "heap-objects-burst/conn"},
			metric{perConn(g.One.Goroutines, g.Burst.Goroutines, n), "goroutines-burst/conn"},
			metric{perConn(g.One.Stacks, g.Burst.Stacks, n), "stack-burst-bytes/conn"})
	}
	return ms
}

// metric is one figure of a benchmark line.
type metric struct {
	value float64
	unit  string
}

// runIdle is the idle experiment: cfg.conns connections to the server
// cfg.serverPID at cfg.addr, reported in cfg.format.
func runIdle(cfg *config, stdout io.Writer) error {
	if err := idleReady(cfg.conns); err != nil {
		return err
	}
	r := &idleResult{Name: cfg.benchName(), Addr: cfg.addr, Proto: cfg.proto, Conns: cfg.conns}
	if cfg.proto == "http" {
		r.Path = cfg.path
	} else {
		r.Size = cfg.size
	}
	conns := make([]*idleConn, cfg.conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	if err := measureIdle(cfg, conns, r); err != nil {
		return err
	}
	return writeIdle(stdout, cfg.format, r)
}

// measureIdle fills conns and r, in the order the top of this file gives.
func measureIdle(cfg *config, conns []*idleConn, r *idleResult) error {
	pid := cfg.serverPID
	settled := func(dst *int64, what string, read func() (int64, error)) error {
		v, ok, err := settle(read)
		if err != nil {
			return err
		}
		*dst = v
		if !ok {
			r.Unsettled = append(r.Unsettled, what)
		}
		return nil
	}
	rss := func(dst *int64, what string) error {
		return settled(dst, "RSS "+what, func() (int64, error) { return readRSS(pid) })
	}
	// The last server's sockets and process are freed in part after it
	// ended (RCU, deferred work): Slab settles first.
	if err := settled(&r.SlabBefore, "Slab before", readSlab); err != nil {
		return err
	}
	if err := dialIdle(cfg, conns[:1], 0); err != nil {
		return err
	}
	if err := rss(&r.RSS1, "1 conn"); err != nil {
		return err
	}
	// memstats asks the server for its figures into dst; once it has
	// echoed the request, it is not asked again.
	gc := &idleGC{}
	memstats := func(dst *loadproto.Figures) error {
		if gc == nil {
			return nil
		}
		f, err := conns[0].memstats()
		switch {
		case errors.Is(err, loadproto.ErrEchoed) || errors.Is(err, errNoFigures):
			gc = nil
			return nil
		case err != nil:
			return fmt.Errorf("memstats request: %w", err)
		}
		*dst = f
		return nil
	}
	if err := memstats(&gc.One); err != nil {
		return err
	}
	if gc != nil {
		if err := rss(&gc.RSS1, "1 conn after GC"); err != nil {
			return err
		}
	}
	if err := dialIdle(cfg, conns, 1); err != nil {
		return err
	}
	var err error
	if r.SlabAfter, err = readSlab(); err != nil {
		return err
	}
	if err := rss(&r.RSSAll, "all conns"); err != nil {
		return err
	}
	if gc != nil {
		if err := memstats(&gc.All); err != nil {
			return err
		}
		if err := rss(&gc.RSSAll, "all conns after GC"); err != nil {
			return err
		}
	}
	if err := burst(conns); err != nil {
		return err
	}
	if err := rss(&r.RSSBurst, "after burst"); err != nil {
		return err
	}
	if gc != nil {
		if err := memstats(&gc.Burst); err != nil {
			return err
		}
	}
	r.GC = gc
	return nil
}

// idleConn is one connection of the experiment and the seq of its next
// message.
type idleConn struct {
	c    *net.TCPConn
	pc   figuresConn
	next uint64
}

// figuresConn is a protoConn that can also ask the server for its memory
// figures: echo's Memstats request, or HTTP's GET loadproto.MemstatsPath.
type figuresConn interface {
	protoConn
	memstats(seq uint64) (loadproto.Figures, error)
}

var (
	_ figuresConn = (*echoConn)(nil)
	_ figuresConn = (*httpConn)(nil)
)

// errNoFigures reports a server that does not tell its memory figures
// over HTTP (as loadproto.ErrEchoed does over echo).
var errNoFigures = errors.New("the server does not answer the memstats request")

// exchange sends the connection's next request and checks its answer.
func (c *idleConn) exchange() error {
	c.c.SetDeadline(time.Now().Add(idleWait))
	if err := c.pc.send(c.next); err != nil {
		return err
	}
	if err := c.pc.recv(c.next); err != nil {
		return err
	}
	c.next++
	return c.c.SetDeadline(time.Time{})
}

// memstats sends the connection's next request as a memstats request.
func (c *idleConn) memstats() (loadproto.Figures, error) {
	c.c.SetDeadline(time.Now().Add(idleWait))
	f, err := c.pc.memstats(c.next)
	c.next++
	if err == nil {
		err = c.c.SetDeadline(time.Time{})
	}
	return f, err
}

// close resets the connection: no TIME_WAIT socket is left in Slab.
func (c *idleConn) close() {
	c.c.SetLinger(0)
	c.c.Close()
}

// dialIdle fills conns[from:] with connections to cfg.addr, each of which
// has made one exchange (an echo, or a GET), idleDialers at a time. It
// stops at the first failure and returns it; what it opened is in conns
// either way.
func dialIdle(cfg *config, conns []*idleConn, from int) error {
	d := net.Dialer{Timeout: idleWait}
	return eachConn(len(conns), from, func(i int) error {
		c, err := d.Dial("tcp", cfg.addr)
		if err != nil {
			return err
		}
		var pc figuresConn
		if cfg.proto == "http" {
			pc = newHTTPConn(c, cfg.addr, cfg.path)
		} else if pc, err = newEchoConn(c, cfg.size, uint64(i), loadproto.Plain); err != nil {
			c.Close()
			return err
		}
		ic := &idleConn{c: c.(*net.TCPConn), pc: pc}
		conns[i] = ic
		return ic.exchange()
	})
}

// burst sends the next message on every connection, all of them before
// it reads any echo, idleDialers at a time; then it reads every echo.
func burst(conns []*idleConn) error {
	err := eachConn(len(conns), 0, func(i int) error {
		c := conns[i]
		c.c.SetWriteDeadline(time.Now().Add(idleWait))
		return c.pc.send(c.next)
	})
	if err != nil {
		return fmt.Errorf("burst, sending: %w", err)
	}
	err = eachConn(len(conns), 0, func(i int) error {
		c := conns[i]
		c.c.SetReadDeadline(time.Now().Add(idleWait))
		if err := c.pc.recv(c.next); err != nil {
			return err
		}
		c.next++
		return c.c.SetDeadline(time.Time{})
	})
	if err != nil {
		return fmt.Errorf("burst, reading the echoes: %w", err)
	}
	return nil
}

// eachConn calls f for every i in [from, n), idleDialers calls at a time.
// It stops at the first failure and returns it, naming the connection.
func eachConn(n, from int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range min(idleDialers, n-from) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					cancel(fmt.Errorf("connection %d of %d: %w", i+1, n, err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// idleReady checks what conns connections to one loopback address need
// of this process: a descriptor each, and an ephemeral port each. (The Go
// runtime raised the soft RLIMIT_NOFILE to the hard limit at start.)
func idleReady(conns int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return os.NewSyscallError("getrlimit", err)
	}
	if need := uint64(conns) + 64; lim.Cur < need {
		return fmt.Errorf("-idle -conns %d: RLIMIT_NOFILE is %d, below the %d descriptors needed (ulimit -n; the hard limit is %d)", conns, lim.Cur, need, lim.Max)
	}
	lo, hi, err := portRange()
	if err != nil {
		return err
	}
	if hi-lo+1 < conns {
		return fmt.Errorf("-idle -conns %d: as many connections to one address need as many ephemeral ports; net.ipv4.ip_local_port_range has %d (%d-%d)", conns, hi-lo+1, lo, hi)
	}
	return nil
}

// settle reads a figure every rssPoll until rssWindow readings in a row
// agree within rssSlack (or 0.5%), or rssBound passes. It returns the
// last reading and whether it settled.
func settle(read func() (int64, error)) (int64, bool, error) {
	tick := time.NewTicker(rssPoll)
	defer tick.Stop()
	end := time.Now().Add(rssBound)
	var window []int64
	for {
		v, err := read()
		if err != nil {
			return 0, false, err
		}
		window = append(window, v)
		if len(window) > rssWindow {
			window = window[1:]
		}
		if len(window) == rssWindow && slices.Max(window)-slices.Min(window) <= max(rssSlack, v/200) {
			return v, true, nil
		}
		if time.Now().After(end) {
			return v, false, nil
		}
		<-tick.C
	}
}

// writeIdle writes r in format.
func writeIdle(w io.Writer, format string, r *idleResult) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "bench":
		var b strings.Builder
		writeBenchHeader(&b)
		fmt.Fprintf(&b, "%s\t1", r.Name)
		for _, m := range r.metrics() {
			fmt.Fprintf(&b, "\t%s %s", formatValue(m.value), m.unit)
		}
		b.WriteByte('\n')
		_, err := io.WriteString(w, b.String())
		return err
	}
	var b strings.Builder
	mib := func(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }
	kib := func(v float64) string { return fmt.Sprintf("%.2f KiB", v/1024) }
	n := r.Conns
	if r.Proto == "http" {
		fmt.Fprintf(&b, "idle %s, %d conns after one GET %s each\n", r.Addr, n, r.Path)
	} else {
		fmt.Fprintf(&b, "idle %s, %d conns of %d B\n", r.Addr, n, r.Size)
	}
	fmt.Fprintf(&b, "RSS         %s with 1 conn, %s with all: %s per conn; after the burst %s per conn\n",
		mib(r.RSS1), mib(r.RSSAll), kib(perConn(r.RSS1, r.RSSAll, n)), kib(perConn(r.RSS1, r.RSSBurst, n)))
	fmt.Fprintf(&b, "kernel      Slab %s per conn (system-wide, both ends)\n", kib(float64(r.SlabAfter-r.SlabBefore)/float64(n)))
	if g := r.GC; g != nil {
		fmt.Fprintf(&b, "after GC    RSS %s per conn; heap live %.0f B, %.1f objects, %.3f goroutines per conn\n",
			kib(perConn(g.RSS1, g.RSSAll, n)), perConn(g.One.HeapLive, g.All.HeapLive, n),
			perConn(g.One.HeapObjects, g.All.HeapObjects, n), perConn(g.One.Goroutines, g.All.Goroutines, n))
	} else {
		fmt.Fprintf(&b, "after GC    none: the server does not answer the memstats request\n")
	}
	if len(r.Unsettled) > 0 {
		fmt.Fprintf(&b, "unsettled   %s: still moving after %v; the last reading is kept\n", strings.Join(r.Unsettled, ", "), rssBound)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
