package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// The idle experiment asks what a server keeps for a connection that is
// open and quiet, the cost that decides how many connections a machine
// can hold: cmd/loadgen -idle holds the cell's connections on a fresh
// process of each configuration and reads the server's memory (its
// idle.go says how, and in what order). Its cell is one sample per
// configuration, judged on its ratio alone.
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
// echo touches the first one only. A server that has run a while reuses
// freed memory, which the runtime zeroes, and then the whole buffer is
// resident; the smaller buffer keeps the figure from depending on the
// process's history. The peers keep their defaults: none of them holds a
// read buffer per idle connection (gnet and nbio read into their event
// loop's buffer, cloudwego/netpoll's buffers are allocated as data
// arrives, the C reference reads into one static buffer). They are other
// programs, which echo loadgen's memstats request: their after GC, heap
// live and objects are "—".

const (
	idleMsgSize  = 64              // the echo each connection makes before it idles
	idleEchoBuf  = 4096            // echoserver's -buf in this experiment
	idleLifetime = 2 * time.Minute // the server's -lifetime: it exits even if netpollbench dies; idleTimeout (configs.go) outlives it
)

// idleArgs is s as the idle cell runs it: echoserver's configurations
// with -buf idleEchoBuf unless their flags set -buf, labelled buf=.
func idleArgs(s server) server {
	if !isEchoserver(s) {
		return s
	}
	buf, set := idleEchoBuf, false
	for i, a := range s.args { // a bad value is echoserver's to refuse, and the measurement fails
		if v, ok := strings.CutPrefix(a, "-buf="); ok {
			buf, _ = strconv.Atoi(v)
			set = true
		} else if a == "-buf" && i+1 < len(s.args) {
			buf, _ = strconv.Atoi(s.args[i+1])
			set = true
		}
	}
	s.args = slices.Clone(s.args)
	if !set {
		s.args = append(s.args, "-buf", strconv.Itoa(idleEchoBuf))
	}
	s.label += "/buf=" + strconv.Itoa(buf)
	return s
}

// isEchoserver reports whether s runs cmd/echoserver (on either
// toolchain, or built from -before's commit).
func isEchoserver(s server) bool { return strings.HasPrefix(s.bin, "echoserver") }

// idleBlock tabulates the idle cell, one sample per configuration, failed
// ones as missing, with the ratio of each as-is figure to net's; the
// figures a peer cannot give (its memstats) are "—".
func idleBlock(id string, v cellVerdict) block {
	each, message, tells := fmt.Sprintf("one %d-byte echo", v.cp.size), "message", "Only echoserver collects and tells (loadgen's memstats request); peers show —."
	if v.cp.http() {
		each, message = "one keep-alive GET /plaintext of cmd/httpserver (net/http)", "GET"
		tells = "cmd/httpserver collects and tells (GET " + loadproto.MemstatsPath + ", loadgen -idle -proto http)."
	}
	b := block{id: id, title: "Idle connections: server resident memory (VmRSS), a fresh server process per configuration, one sample each.",
		notes: []string{
			fmt.Sprintf("%s, each after %s, quiet. KiB per conn: "+
				"as-is (RSS all - RSS 1 conn) / (conns - 1), the verdict's figure; after GC the same, "+
				"each reading after runtime.GC and debug.FreeOSMemory in the server; after burst "+
				"(RSS - RSS 1 conn) / (conns - 1) once every connection has sent one more %s before any answer was read "+
				"(for the servers that tell, after the collections).", conns(v.cp.conns), each, message),
			"heap live (B/conn) and objects (per conn): runtime/metrics' /gc/heap/live and /gc/heap/objects after those " +
				"collections, all minus 1 conn, / (conns - 1). " + tells,
			"kernel (KiB/conn): /proc/meminfo Slab with all conns minus before the first, / conns. It is system-wide and " +
				"holds both ends of each connection (the client's socket too, on loopback); a rough figure, since anything " +
				"else the machine does moves Slab too. RSS holds no kernel memory.",
		},
		head: []string{"config", "conns", "RSS 1 conn", "RSS all", "as-is", "vs net", "after GC", "heap live", "objects", "after burst", "kernel"},
		left: 1, indent: "  "}
	if v.cp.http() {
		b.title = "Idle net/http connections: " + strings.TrimPrefix(b.title, "Idle connections: ")
		b.notes = append(b.notes, "net is cmd/httpserver on stock Go; the rt- rows the same built with the patched toolchain, "+
			"under their GODEBUG (rt-profile's httpidlezeroread lets an idle keep-alive connection wait without its buffers).")
	} else {
		b.notes = append(b.notes, fmt.Sprintf("echoserver configurations (net, netpoll) run with -buf %d, the bufio.Reader net/http keeps per connection, "+
			"not their default 64 KiB. Peers run as they are.", idleEchoBuf))
	}
	conns := strconv.Itoa(v.cp.conns)
	kib := func(r cfgRow, unit string) string {
		if x, ok := r.med[unit]; ok && !math.IsNaN(x) {
			return fmt.Sprintf("%.2f", x/1024)
		}
		return "—"
	}
	num := func(r cfgRow, unit, format string) string {
		if x, ok := r.med[unit]; ok && !math.IsNaN(x) {
			return fmt.Sprintf(format, x)
		}
		return "—"
	}
	for _, r := range v.rows {
		if r.missing {
			row := []string{r.cfg, conns}
			for len(row) < len(b.head) {
				row = append(row, "missing")
			}
			b.rows = append(b.rows, row)
			continue
		}
		ratio := "—"
		if r.vsNet != nil && r.vsNet.n == 1 {
			ratio = fmt.Sprintf("%.2fx", r.vsNet.geo)
		} else if r.cfg == "net" {
			ratio = "1.00x"
		}
		b.rows = append(b.rows, []string{r.cfg, conns, mib(r.med["rss-1conn-bytes"]), mib(r.med["rss-bytes"]), kib(r, "rss-bytes/conn"), ratio,
			kib(r, "rss-gc-bytes/conn"), num(r, "heap-live-bytes/conn", "%.0f"), num(r, "heap-objects/conn", "%.1f"),
			kib(r, "rss-burst-bytes/conn"), kib(r, "slab-bytes/conn")})
		if n := r.med["unsettled-readings"]; n > 0 {
			b.foot = append(b.foot, fmt.Sprintf("%s: %.0f reading(s) still moving after 5 s; the last reading is kept.", r.cfg, n))
		}
	}
	return b
}

func mib(b float64) string {
	if math.IsNaN(b) {
		return "missing"
	}
	return fmt.Sprintf("%.1f MiB", b/(1<<20))
}
