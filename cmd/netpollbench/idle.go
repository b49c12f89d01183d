package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// The idle experiment asks what a server keeps for a connection that is
// open and quiet, the cost that decides how many connections a machine
// can hold. For each configuration it starts a fresh server and, in this
// order:
//
//   - reads the Slab line of /proc/meminfo, opens one connection, echoes
//     one message on it and reads the server's VmRSS once it settles (RSS
//     1 conn);
//   - echoserver only: sends it SIGUSR1, on which it runs runtime.GC and
//     debug.FreeOSMemory and writes a memstats line to stderr (heap live
//     bytes, heap objects, goroutines, stack bytes, from runtime/metrics),
//     and reads VmRSS again once it settles (RSS 1 conn after GC). This
//     comes after the 1-conn reading so as not to change it, but it
//     changes what the next one holds: a process's first collection costs
//     memory of its own (some 0.6 MiB of anonymous memory in a fresh
//     echoserver, the collector's workers and metadata), and RSS all then
//     holds it. A server that is not asked collects anyway once its heap
//     reaches 4 MiB, live and garbage: on demand's 443 live bytes a
//     connection alone come to that at some 9,500 connections, the other
//     echoserver configurations' far sooner, so at -idle's default of
//     10,000 and above the as-is figure should hold what it held before
//     (reasoned from those figures, not measured here); at a few hundred
//     connections it does not (TestIdle's 200: on demand's as-is went
//     from about 1.1 to about 5 KiB/conn). The same cost is why after GC
//     is measured from RSS 1 conn after GC, not from the as-is RSS 1 conn;
//   - opens the other connections, each of which echoes one message too,
//     so the server has set up all it sets up per connection (goroutine,
//     buffers, registration), reads Slab again and then the settled VmRSS
//     (RSS all). "as-is", the verdict's figure, is (RSS all - RSS 1 conn)
//     / (conns - 1), and "kernel" is the growth of Slab over conns;
//   - echoserver only: SIGUSR1 again and the settled VmRSS: "after GC" is
//     the growth of RSS after GC from 1 conn to all, over conns - 1, and
//     heap live and objects the growth of the memstats figures likewise;
//   - a burst: every connection sends one message, all of them before any
//     echo is read, then every echo is read; after the settled VmRSS,
//     "after burst" is its growth over RSS 1 conn, per connection added
//     (an echoserver's after the collections above, a peer's without). A
//     goroutine-per-connection server keeps what it has (a goroutine's g
//     is never freed, its stack may have grown); a server on demand runs
//     a handler goroutine for each readable connection, as many at once as
//     the burst makes readable, and may keep their stacks and gs;
//   - echoserver only: SIGUSR1 once more, for the benchmark line's heap
//     and stack figures after the burst.
//
// VmRSS is the server's user-space memory as the kernel sees it, the Go
// runtime's retained heap included; the kernel's own socket and epoll
// memory is not in it. Slab is, with the rest of the kernel's: it is
// system-wide and holds both ends of every loopback connection (the
// client's socket too), and anything else the machine does moves it, so
// the kernel figure is rough.
//
// cmd/echoserver allocates a -buf read buffer per connection, 64 KiB by
// default, sized for throughput. Here the echoserver configurations run
// with -buf 4096 (unless their flags set -buf), the size of the
// bufio.Reader net/http keeps per connection (net/http's conn.serve:
// newBufioReader, bufio's default 4096): the figure is then what a typical
// goroutine-per-connection server pays, not what one flag of the echo
// server chose. In a fresh process the 64 KiB buffer costs little more
// RSS (a 10,000-connection trial: net 7.92 KiB per connection with 64 KiB,
// 7.75 with 4 KiB): the heap hands out pages never touched and a small
// echo touches the first one only. A server that has run a while reuses freed
// memory, which the runtime zeroes, and then the whole buffer is
// resident; the smaller buffer keeps the figure from depending on the
// process's history. The peers keep their defaults: none of them holds a
// read buffer per idle connection (gnet and nbio read into their event
// loop's buffer, cloudwego/netpoll's buffers are allocated as data
// arrives, the C reference reads into one static buffer). They are other
// programs, with no memstats line: their after GC, heap live and objects
// are "—".

const (
	idleMsgSize  = 64               // the echo each connection makes before it idles
	idleEchoBuf  = 4096             // echoserver's -buf in this experiment
	idleDialers  = 32               // connections dialled at once, far below the listen backlog
	idleDialWait = 10 * time.Second // bound on one connection's dial, and on its echo
	idleLifetime = 2 * time.Minute  // the server's -lifetime: it exits even if netpollbench dies; idleTimeout (configs.go) outlives it
	idleGCWait   = 30 * time.Second // the longest wait for a memstats line after SIGUSR1
	rssPoll      = 100 * time.Millisecond
	rssWindow    = 5               // consecutive readings that must agree for RSS to have settled
	rssSlack     = 64 << 10        // how far they may differ (bytes), or 0.5% of RSS if more
	rssBound     = 5 * time.Second // the longest wait for RSS to settle
)

// idleRow is one configuration's idle measurement. A row with err set
// failed and has no figures.
type idleRow struct {
	cfg          string // configuration name
	label        string // benchmark labels: the configuration's, and buf= for echoserver
	conns        int
	buf          int      // echoserver's -buf; 0 for the other servers
	rssBefore    int64    // VmRSS with one connection, bytes
	rssAfter     int64    // VmRSS with conns connections, bytes
	perConn      float64  // (rssAfter-rssBefore)/(conns-1), bytes: as-is
	rssBurst     int64    // VmRSS after the burst, bytes
	burstPerConn float64  // (rssBurst-rssBefore)/(conns-1), bytes
	slabBefore   int64    // /proc/meminfo Slab before the first connection, bytes
	slabAfter    int64    // and with all connections
	gc           *idleGC  // echoserver's memstats; nil for the peers
	unsettled    []string // the readings still moving when rssBound ran out: "RSS 1 conn", "RSS all conns", ...
	err          error
}

// kernelPerConn is the growth of Slab per connection, bytes, both ends.
func (row *idleRow) kernelPerConn() float64 {
	return float64(row.slabAfter-row.slabBefore) / float64(row.conns)
}

// idleGC is what an echoserver's SIGUSR1 told: its memstats lines and its
// VmRSS after the collections.
type idleGC struct {
	rss1, rssAll    int64    // settled VmRSS after the collection at 1 conn and at all, bytes
	one, all, burst memstats // the lines at 1 conn, at all, after the burst
}

// memstats is an echoserver memstats line.
type memstats struct {
	heapLive, objects, goroutines, stacks int64
}

// memstatsPrefix starts echoserver's answer to SIGUSR1 on its stderr.
const memstatsPrefix = "echoserver: memstats "

// parseMemstats reads a memstats line.
func parseMemstats(line string) (memstats, error) {
	var m memstats
	fields := map[string]*int64{"heap-live": &m.heapLive, "heap-objects": &m.objects, "goroutines": &m.goroutines, "stacks": &m.stacks}
	rest, ok := strings.CutPrefix(line, memstatsPrefix)
	for _, kv := range strings.Fields(rest) {
		k, v, _ := strings.Cut(kv, "=")
		p := fields[k]
		if p == nil {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return m, fmt.Errorf("memstats line %q: %s: %v", line, k, err)
		}
		*p = n
		delete(fields, k)
	}
	if !ok || len(fields) > 0 {
		return m, fmt.Errorf("memstats line %q: want heap-live, heap-objects, goroutines and stacks", line)
	}
	return m, nil
}

// perConn is the growth from a (at 1 conn) to b over the conns-1
// connections added, per connection.
func perConn(a, b int64, conns int) float64 { return float64(b-a) / float64(conns-1) }

// runIdle measures conns idle connections on a fresh process of each of
// srvs, in order. It returns a row for every server (failed ones with err
// set) and a line per failure; its error is ctx's, when ctx ends.
func runIdle(ctx context.Context, r *runner, srvs []server, conns int) ([]idleRow, []string, error) {
	ready := idleReady(conns)
	fmt.Fprintf(r.stderr, "netpollbench: idle: %d connections on each of %d configurations\n", conns, len(srvs))
	var rows []idleRow
	var failures []string
	for _, s := range srvs {
		if err := ctx.Err(); err != nil {
			return rows, failures, err
		}
		row, args := newIdleRow(s, conns)
		row.err = ready
		if row.err == nil {
			row.err = r.idle(ctx, s, args, &row)
		}
		if err := ctx.Err(); err != nil {
			return rows, failures, err
		}
		rows = append(rows, row)
		if row.err != nil {
			msg := strings.ReplaceAll(row.err.Error(), "\n", " | ")
			failures = append(failures, fmt.Sprintf("idle %s: %s", s.name, msg))
			fmt.Fprintf(r.stderr, "netpollbench: idle %s: FAILED: %s\n", s.name, msg)
			continue
		}
		gc := "—"
		if row.gc != nil {
			gc = fmt.Sprintf("%.2f", perConn(row.gc.rss1, row.gc.rssAll, row.conns)/1024)
		}
		fmt.Fprintf(r.stderr, "netpollbench: idle %-12s %s -> %s, KiB/conn: %.2f as-is, %s after GC, %.2f after burst, %.2f kernel\n",
			s.name, mib(row.rssBefore), mib(row.rssAfter), row.perConn/1024, gc, row.burstPerConn/1024, row.kernelPerConn()/1024)
	}
	return rows, failures, nil
}

// newIdleRow returns s's row and its server flags besides -addr and
// -lifetime: echoserver's get -buf idleEchoBuf unless they set -buf.
func newIdleRow(s server, conns int) (idleRow, []string) {
	row := idleRow{cfg: s.name, label: s.label, conns: conns}
	args := slices.Clone(s.args)
	if !isEchoserver(s) {
		return row, args
	}
	row.buf = idleEchoBuf
	set := false
	for i, a := range args { // a bad value is echoserver's to refuse, and the row fails
		if v, ok := strings.CutPrefix(a, "-buf="); ok {
			row.buf, _ = strconv.Atoi(v)
			set = true
		} else if a == "-buf" && i+1 < len(args) {
			row.buf, _ = strconv.Atoi(args[i+1])
			set = true
		}
	}
	if !set {
		args = append(args, "-buf", strconv.Itoa(idleEchoBuf))
	}
	row.label += "/buf=" + strconv.Itoa(row.buf)
	return row, args
}

// isEchoserver reports whether s runs cmd/echoserver (on either
// toolchain), which answers SIGUSR1 with a memstats line.
func isEchoserver(s server) bool { return strings.HasPrefix(s.bin, "echoserver") }

// idleReady checks what conns connections to one loopback address need:
// a descriptor each on both sides and an ephemeral port each.
func idleReady(conns int) error {
	if conns < 2 {
		return fmt.Errorf("%d connections: want at least 2, the growth from one to all is measured", conns)
	}
	if err := raiseNoFile(conns + 64); err != nil {
		return err
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return err
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return fmt.Errorf("ip_local_port_range %q: %v", b, err)
	}
	if hi-lo+1 < conns {
		return fmt.Errorf("%d connections to one address need as many ephemeral ports; net.ipv4.ip_local_port_range has %d (%d-%d)", conns, hi-lo+1, lo, hi)
	}
	return nil
}

// raiseNoFile sets this process's soft RLIMIT_NOFILE to the hard limit,
// which must be at least need. Setting it also makes the servers started
// afterwards inherit the raised limit: the Go runtime raises its own soft
// limit at start but restores the original one in the processes it
// starts, unless the program set the limit itself (syscall/rlimit.go,
// exec_linux.go). The Go servers raise their own again; the C reference
// (bench/cref/echo.c) never does, and would stop at 1024 with many
// systems' default soft limit.
func raiseNoFile(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return os.NewSyscallError("getrlimit", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return os.NewSyscallError("setrlimit", err)
	}
	if lim.Max < uint64(need) {
		return fmt.Errorf("RLIMIT_NOFILE hard limit %d is below the %d descriptors needed (ulimit -Hn)", lim.Max, need)
	}
	return nil
}

// idle starts s with args, as measure does, and measures row.conns idle
// connections to it into row; an echoserver is asked for its memstats.
func (r *runner) idle(ctx context.Context, s server, args []string, row *idleRow) error {
	srv, err := r.start(ctx, r.pin, nil, r.bins[s.bin], args, s.env, idleLifetime)
	if err != nil {
		return err
	}
	var gc func(context.Context) (memstats, error)
	if isEchoserver(s) {
		asked := 0
		gc = func(ctx context.Context) (memstats, error) {
			if err := srv.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
				return memstats{}, fmt.Errorf("SIGUSR1: %w", err)
			}
			asked++
			l, err := srv.stderr.line(ctx, memstatsPrefix, asked-1, idleGCWait)
			if err != nil {
				return memstats{}, fmt.Errorf("SIGUSR1: %w", err)
			}
			return parseMemstats(l)
		}
	}
	err = measureIdle(ctx, srv.cmd.Process.Pid, srv.addr, row, gc)
	if tail := srv.stop(); err != nil && tail != "" {
		err = fmt.Errorf("%w (server stderr: %s)", err, tail)
	}
	return err
}

// measureIdle opens row.conns connections to the server pid at addr, each
// after an echo, reads its settled VmRSS with the first one and with all,
// and Slab before the first and with all, then makes every connection
// echo once more at once (the burst) and reads VmRSS again. gc, unless
// nil, makes the server collect and tell its memstats: measureIdle calls
// it after the 1-conn and the all-conn readings, reading the settled RSS
// after each, and after the burst's. It closes the connections before it
// returns. The package comment has the order and why.
func measureIdle(ctx context.Context, pid int, addr string, row *idleRow, gc func(context.Context) (memstats, error)) error {
	st, err := loadproto.NewStream(idleMsgSize, 1)
	if err != nil {
		return err
	}
	msg := make([]byte, idleMsgSize)
	st.Put(msg, 0, loadproto.Plain)
	conns := make([]net.Conn, row.conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				// A reset, not a FIN: no TIME_WAIT socket is left in
				// Slab for the next configuration's kernel figure.
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}
	}()
	rss := func(dst *int64, what string) error {
		v, settled, err := settledRSS(ctx, pid)
		if err != nil {
			return err
		}
		*dst = v
		if !settled {
			row.unsettled = append(row.unsettled, "RSS "+what)
		}
		return nil
	}
	// The last configuration's sockets and process are freed in part
	// after it ended (RCU, deferred work): Slab settles first.
	slab, settled, err := settle(ctx, readSlab)
	if err != nil {
		return err
	}
	row.slabBefore = slab
	if !settled {
		row.unsettled = append(row.unsettled, "Slab before")
	}
	if err := dialEcho(ctx, addr, msg, conns[:1], 0); err != nil {
		return err
	}
	if err := rss(&row.rssBefore, "1 conn"); err != nil {
		return err
	}
	if gc != nil {
		row.gc = &idleGC{}
		if row.gc.one, err = gc(ctx); err != nil {
			return err
		}
		if err := rss(&row.gc.rss1, "1 conn after GC"); err != nil {
			return err
		}
	}
	if err := dialEcho(ctx, addr, msg, conns, 1); err != nil {
		return err
	}
	if row.slabAfter, err = readSlab(); err != nil {
		return err
	}
	if err := rss(&row.rssAfter, "all conns"); err != nil {
		return err
	}
	row.perConn = perConn(row.rssBefore, row.rssAfter, row.conns)
	if gc != nil {
		if row.gc.all, err = gc(ctx); err != nil {
			return err
		}
		if err := rss(&row.gc.rssAll, "all conns after GC"); err != nil {
			return err
		}
	}
	if err := burst(ctx, msg, conns); err != nil {
		return err
	}
	if err := rss(&row.rssBurst, "after burst"); err != nil {
		return err
	}
	row.burstPerConn = perConn(row.rssBefore, row.rssBurst, row.conns)
	if gc != nil {
		if row.gc.burst, err = gc(ctx); err != nil {
			return err
		}
	}
	return nil
}

// dialEcho fills conns[from:] with connections to addr, each of which has
// echoed msg, idleDialers at a time. It stops at the first failure and
// returns it; what it opened is in conns either way.
func dialEcho(ctx context.Context, addr string, msg []byte, conns []net.Conn, from int) error {
	d := net.Dialer{Timeout: idleDialWait}
	return eachConn(ctx, len(conns), from, len(msg), func(ctx context.Context, i int, in []byte) error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		conns[i] = c
		return echoOnce(c, msg, in)
	})
}

// burst sends msg on every connection of conns, all of them before it
// reads any echo, idleDialers at a time; then it reads every echo.
func burst(ctx context.Context, msg []byte, conns []net.Conn) error {
	err := eachConn(ctx, len(conns), 0, 0, func(_ context.Context, i int, _ []byte) error {
		c := conns[i]
		c.SetWriteDeadline(time.Now().Add(idleDialWait))
		_, err := c.Write(msg)
		return err
	})
	if err != nil {
		return fmt.Errorf("burst, sending: %w", err)
	}
	err = eachConn(ctx, len(conns), 0, len(msg), func(_ context.Context, i int, in []byte) error {
		c := conns[i]
		c.SetReadDeadline(time.Now().Add(idleDialWait))
		if _, err := io.ReadFull(c, in); err != nil {
			return err
		}
		if !bytes.Equal(in, msg) {
			return fmt.Errorf("the echo differs from the %d-byte message sent", len(msg))
		}
		return c.SetDeadline(time.Time{})
	})
	if err != nil {
		return fmt.Errorf("burst, reading the echoes: %w", err)
	}
	return nil
}

// eachConn calls f for every i in [from, n), idleDialers calls at a time,
// each worker with a buffer of bufSize bytes to pass. It stops at the
// first failure (f's ctx ends then) and returns it, naming the connection.
func eachConn(ctx context.Context, n, from, bufSize int, f func(ctx context.Context, i int, buf []byte) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range min(idleDialers, n-from) {
		wg.Go(func() {
			buf := make([]byte, bufSize)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i, buf); err != nil {
					cancel(fmt.Errorf("connection %d of %d: %w", i+1, n, err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// echoOnce sends msg on c and reads its echo into in.
func echoOnce(c net.Conn, msg, in []byte) error {
	c.SetDeadline(time.Now().Add(idleDialWait))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, in); err != nil {
		return err
	}
	if !bytes.Equal(in, msg) {
		return fmt.Errorf("the echo differs from the %d-byte message sent", len(msg))
	}
	return c.SetDeadline(time.Time{})
}

// settledRSS reads pid's VmRSS every rssPoll until rssWindow readings in a
// row agree within rssSlack (or 0.5%), or rssBound passes. It returns the
// last reading and whether it settled.
func settledRSS(ctx context.Context, pid int) (int64, bool, error) {
	return settle(ctx, func() (int64, error) { return readRSS(pid) })
}

// settle is settledRSS of what read reads.
func settle(ctx context.Context, read func() (int64, error)) (int64, bool, error) {
	tick := time.NewTicker(rssPoll)
	defer tick.Stop()
	end := time.Now().Add(rssBound)
	var window []int64
	for {
		rss, err := read()
		if err != nil {
			return 0, false, err
		}
		window = append(window, rss)
		if len(window) > rssWindow {
			window = window[1:]
		}
		if len(window) == rssWindow && slices.Max(window)-slices.Min(window) <= max(rssSlack, rss/200) {
			return rss, true, nil
		}
		if time.Now().After(end) {
			return rss, false, nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// readRSS returns the VmRSS of process pid in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("server gone: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: bad line %q", pid, l)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: bad line %q", pid, l)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS: the server has exited", pid)
}

// readSlab returns the Slab line of /proc/meminfo in bytes: the kernel's
// slab allocations, sockets among them, system-wide.
func readSlab() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Slab:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/meminfo: bad line %q", l)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo: bad line %q", l)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("/proc/meminfo has no Slab line")
}

// idleBlock tabulates the rows, failed ones as missing (their errors
// under the table), with the ratio of each as-is figure to net's; the
// figures a peer cannot give (its memstats) are "—".
func idleBlock(rows []idleRow) block {
	b := block{id: "idle", title: "Idle connections: server resident memory (VmRSS), a fresh server process per configuration, one sample each.",
		notes: []string{
			fmt.Sprintf("Each connection echoes one %d-byte message and stays open, quiet. KiB per conn: "+
				"as-is (RSS all - RSS 1 conn) / (conns - 1), the verdict's figure; after GC the same, "+
				"each reading after runtime.GC and debug.FreeOSMemory in the server; after burst "+
				"(RSS - RSS 1 conn) / (conns - 1) once every connection has sent one more message before any echo was read "+
				"(for echoserver after the collections).", idleMsgSize),
			"heap live (B/conn) and objects (per conn): runtime/metrics' /gc/heap/live and /gc/heap/objects after those " +
				"collections, all minus 1 conn, / (conns - 1). Only echoserver can collect and tell (SIGUSR1); peers show —.",
			"kernel (KiB/conn): /proc/meminfo Slab with all conns minus before the first, / conns. It is system-wide and " +
				"holds both ends of each connection (the client's socket too, on loopback); a rough figure, since anything " +
				"else the machine does moves Slab too. RSS holds no kernel memory.",
			fmt.Sprintf("echoserver configurations (net, netpoll) run with -buf %d, the bufio.Reader net/http keeps per connection, "+
				"not their default 64 KiB. Peers run as they are.", idleEchoBuf),
		},
		head: []string{"cfg", "conns", "RSS 1 conn", "RSS all", "as-is", "vs net", "after GC", "heap live", "objects", "after burst", "kernel"},
		left: 1}
	var base *idleRow
	for i := range rows {
		if rows[i].cfg == "net" && rows[i].err == nil {
			base = &rows[i]
		}
	}
	kib := func(v float64) string { return fmt.Sprintf("%.2f", v/1024) }
	for _, row := range rows {
		conns := strconv.Itoa(row.conns)
		if row.err != nil {
			r := []string{row.cfg, conns}
			for len(r) < len(b.head) {
				r = append(r, "missing")
			}
			b.rows = append(b.rows, r)
			b.foot = append(b.foot, clip(row.cfg+": "+strings.ReplaceAll(row.err.Error(), "\n", " | "), summaryWidth))
			continue
		}
		ratio := "missing"
		if base != nil && base.perConn != 0 {
			ratio = fmt.Sprintf("%.2fx", row.perConn/base.perConn)
		}
		gc, live, objects := "—", "—", "—"
		if g := row.gc; g != nil {
			gc = kib(perConn(g.rss1, g.rssAll, row.conns))
			live = fmt.Sprintf("%.0f", perConn(g.one.heapLive, g.all.heapLive, row.conns))
			objects = fmt.Sprintf("%.1f", perConn(g.one.objects, g.all.objects, row.conns))
		}
		b.rows = append(b.rows, []string{row.cfg, conns, mib(row.rssBefore), mib(row.rssAfter), kib(row.perConn), ratio,
			gc, live, objects, kib(row.burstPerConn), kib(row.kernelPerConn())})
		if len(row.unsettled) > 0 {
			b.foot = append(b.foot, fmt.Sprintf("%s: %s still moving after %v; the last reading is shown.", row.cfg, strings.Join(row.unsettled, ", "), rssBound))
		}
	}
	return b
}

// idleLine is row as a benchmark line, "" for a failed row: RSS as-is,
// after the burst, Slab, and for echoserver RSS after GC and the memstats
// figures per connection, after the burst too.
func idleLine(row idleRow) string {
	if row.err != nil {
		return ""
	}
	l := fmt.Sprintf("BenchmarkIdle/%s/conns=%d\t1\t%.0f rss-bytes/conn\t%d rss-1conn-bytes\t%d rss-bytes"+
		"\t%.0f rss-burst-bytes/conn\t%d rss-burst-bytes\t%.0f slab-bytes/conn",
		row.label, row.conns, row.perConn, row.rssBefore, row.rssAfter, row.burstPerConn, row.rssBurst, row.kernelPerConn())
	if g := row.gc; g != nil {
		n := row.conns
		l += fmt.Sprintf("\t%.0f rss-gc-bytes/conn\t%d rss-gc-1conn-bytes\t%d rss-gc-bytes"+
			"\t%.0f heap-live-bytes/conn\t%.2f heap-objects/conn\t%.3f goroutines/conn\t%.0f stack-bytes/conn"+
			"\t%.0f heap-live-burst-bytes/conn\t%.2f heap-objects-burst/conn\t%.3f goroutines-burst/conn\t%.0f stack-burst-bytes/conn",
			perConn(g.rss1, g.rssAll, n), g.rss1, g.rssAll,
			perConn(g.one.heapLive, g.all.heapLive, n), perConn(g.one.objects, g.all.objects, n),
			perConn(g.one.goroutines, g.all.goroutines, n), perConn(g.one.stacks, g.all.stacks, n),
			perConn(g.one.heapLive, g.burst.heapLive, n), perConn(g.one.objects, g.burst.objects, n),
			perConn(g.one.goroutines, g.burst.goroutines, n), perConn(g.one.stacks, g.burst.stacks, n))
	}
	return l
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
