package main

import (
	"bytes"
	"context"
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

// The idle experiment asks what a server keeps resident for a connection
// that is open and quiet, the cost that decides how many connections a
// machine can hold. For each configuration it starts a fresh server,
// opens one connection and echoes one message on it, reads the server's
// VmRSS once it settles, opens the other connections (each echoes one
// message too, so the server has set up all it sets up per connection:
// goroutine, buffers, registration), reads VmRSS again, and divides the
// growth by the connections added. VmRSS is the server's user-space
// memory as the kernel sees it, the Go runtime's retained heap included;
// the kernel's own socket and epoll memory is not in it.
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
// arrives, the C reference reads into one static buffer).

const (
	idleMsgSize  = 64               // the echo each connection makes before it idles
	idleEchoBuf  = 4096             // echoserver's -buf in this experiment
	idleDialers  = 32               // connections dialled at once, far below the listen backlog
	idleDialWait = 10 * time.Second // bound on one connection's dial, and on its echo
	idleLifetime = 2 * time.Minute  // the server's -lifetime: it exits even if netpollbench dies
	rssPoll      = 100 * time.Millisecond
	rssWindow    = 5               // consecutive readings that must agree for RSS to have settled
	rssSlack     = 64 << 10        // how far they may differ (bytes), or 0.5% of RSS if more
	rssBound     = 5 * time.Second // the longest wait for RSS to settle
)

// idleRow is one configuration's idle measurement. A row with err set
// failed and has no figures.
type idleRow struct {
	cfg       string // configuration name
	label     string // benchmark labels: the configuration's, and buf= for echoserver
	conns     int
	buf       int      // echoserver's -buf; 0 for the other servers
	rssBefore int64    // VmRSS with one connection, bytes
	rssAfter  int64    // VmRSS with conns connections, bytes
	perConn   float64  // (rssAfter-rssBefore)/(conns-1), bytes
	unsettled []string // the readings still moving when rssBound ran out: "1 conn", "all conns"
	err       error
}

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
		fmt.Fprintf(r.stderr, "netpollbench: idle %-11s %s -> %s, %.2f KiB/conn\n", s.name, mib(row.rssBefore), mib(row.rssAfter), row.perConn/1024)
	}
	return rows, failures, nil
}

// newIdleRow returns s's row and its server flags besides -addr and
// -lifetime: echoserver's get -buf idleEchoBuf unless they set -buf.
func newIdleRow(s server, conns int) (idleRow, []string) {
	row := idleRow{cfg: s.name, label: s.label, conns: conns}
	args := slices.Clone(s.args)
	if !strings.HasPrefix(s.bin, "echoserver") {
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
// connections to it into row.
func (r *runner) idle(ctx context.Context, s server, args []string, row *idleRow) error {
	srv, err := r.start(ctx, r.pin, nil, r.bins[s.bin], args, s.env, idleLifetime)
	if err != nil {
		return err
	}
	err = measureIdle(ctx, srv.cmd.Process.Pid, srv.addr, row)
	if tail := srv.stop(); err != nil && tail != "" {
		err = fmt.Errorf("%w (server stderr: %s)", err, tail)
	}
	return err
}

// measureIdle opens row.conns connections to the server pid at addr, each
// after an echo, and reads its settled VmRSS with the first one and with
// all. It closes them before it returns.
func measureIdle(ctx context.Context, pid int, addr string, row *idleRow) error {
	st, err := loadproto.NewStream(idleMsgSize, 1)
	if err != nil {
		return err
	}
	msg := make([]byte, idleMsgSize)
	st.Put(msg, 0)
	conns := make([]net.Conn, row.conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var settled bool
	if err := dialEcho(ctx, addr, msg, conns[:1], 0); err != nil {
		return err
	}
	if row.rssBefore, settled, err = settledRSS(ctx, pid); err != nil {
		return err
	}
	if !settled {
		row.unsettled = append(row.unsettled, "1 conn")
	}
	if err := dialEcho(ctx, addr, msg, conns, 1); err != nil {
		return err
	}
	if row.rssAfter, settled, err = settledRSS(ctx, pid); err != nil {
		return err
	}
	if !settled {
		row.unsettled = append(row.unsettled, "all conns")
	}
	row.perConn = float64(row.rssAfter-row.rssBefore) / float64(row.conns-1)
	return nil
}

// dialEcho fills conns[from:] with connections to addr, each of which has
// echoed msg, idleDialers at a time. It stops at the first failure and
// returns it; what it opened is in conns either way.
func dialEcho(ctx context.Context, addr string, msg []byte, conns []net.Conn, from int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range min(idleDialers, len(conns)-from) {
		wg.Go(func() {
			d := net.Dialer{Timeout: idleDialWait}
			in := make([]byte, len(msg))
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(conns) {
					return
				}
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					conns[i] = c
					err = echoOnce(c, msg, in)
				}
				if err != nil {
					cancel(fmt.Errorf("connection %d of %d: %w", i+1, len(conns), err))
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
	tick := time.NewTicker(rssPoll)
	defer tick.Stop()
	end := time.Now().Add(rssBound)
	var window []int64
	for {
		rss, err := readRSS(pid)
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

// idleBlock tabulates the rows, failed ones as missing (their errors
// under the table), with the ratio of each per-connection figure to net's.
func idleBlock(rows []idleRow) block {
	b := block{id: "idle", title: "Idle connections: server resident memory (VmRSS), a fresh server process per configuration, one sample each.",
		notes: []string{
			fmt.Sprintf("Each connection echoes one %d-byte message and stays open, quiet. Per conn: (RSS all - RSS 1 conn) / (conns - 1).", idleMsgSize),
			fmt.Sprintf("echoserver configurations (net, netpoll) run with -buf %d, the bufio.Reader net/http keeps per connection, "+
				"not their default 64 KiB. Peers run as they are. Kernel socket and epoll memory is not in RSS.", idleEchoBuf),
		},
		head: []string{"cfg", "conns", "RSS 1 conn", "RSS all", "per conn (KiB)", "vs net"}, left: 1}
	var base *idleRow
	for i := range rows {
		if rows[i].cfg == "net" && rows[i].err == nil {
			base = &rows[i]
		}
	}
	for _, row := range rows {
		conns := strconv.Itoa(row.conns)
		if row.err != nil {
			b.rows = append(b.rows, []string{row.cfg, conns, "missing", "missing", "missing", "missing"})
			b.foot = append(b.foot, clip(row.cfg+": "+strings.ReplaceAll(row.err.Error(), "\n", " | "), summaryWidth))
			continue
		}
		ratio := "missing"
		if base != nil && base.perConn != 0 {
			ratio = fmt.Sprintf("%.2fx", row.perConn/base.perConn)
		}
		b.rows = append(b.rows, []string{row.cfg, conns, mib(row.rssBefore), mib(row.rssAfter), fmt.Sprintf("%.2f", row.perConn/1024), ratio})
		if len(row.unsettled) > 0 {
			b.foot = append(b.foot, fmt.Sprintf("%s: RSS (%s) still moving after %v; the last reading is shown.", row.cfg, strings.Join(row.unsettled, ", "), rssBound))
		}
	}
	return b
}

// idleLine is row as a benchmark line, "" for a failed row.
func idleLine(row idleRow) string {
	if row.err != nil {
		return ""
	}
	return fmt.Sprintf("BenchmarkIdle/%s/conns=%d\t1\t%.0f rss-bytes/conn\t%d rss-1conn-bytes\t%d rss-bytes",
		row.label, row.conns, row.perConn, row.rssBefore, row.rssAfter)
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
