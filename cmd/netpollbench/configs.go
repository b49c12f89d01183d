package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// server is one configuration under test: a server binary and its flags.
// Every server speaks the echoserver contract: -addr, -lifetime, and a first
// stdout line "echoserver listening on ADDR (LABELS)".
type server struct {
	name  string   // short name for -configs: net, et, gnet, c, ...
	label string   // benchmark labels, key=value joined by '/'
	bin   string   // binary: echoserver, gnetecho, nbioecho, cloudwegoecho, cref, echoserver-rt
	args  []string // flags besides -addr and -lifetime
	env   []string // extra environment (GODEBUG for the patched runtime)
}

// servers are all the configurations netpollbench knows, in table order.
var servers = []server{
	{"net", "cfg=net/impl=net", "echoserver", []string{"-impl", "net"}, nil},
	{"et", "cfg=et/impl=netpoll/mode=et/spin=0", "echoserver", []string{"-impl", "netpoll", "-mode", "et", "-spin", "0"}, nil},
	{"oneshot", "cfg=oneshot/impl=netpoll/mode=oneshot/spin=0", "echoserver", []string{"-impl", "netpoll", "-mode", "oneshot", "-spin", "0"}, nil},
	{"lt", "cfg=lt/impl=netpoll/mode=lt/spin=0", "echoserver", []string{"-impl", "netpoll", "-mode", "lt", "-spin", "0"}, nil},
	{"spin", "cfg=spin/impl=netpoll/mode=et/spin=forever", "echoserver", []string{"-impl", "netpoll", "-spin", "forever"}, nil},
	{"auto", "cfg=auto/impl=netpoll/mode=et/spin=auto", "echoserver", []string{"-impl", "netpoll", "-spin", "auto"}, nil},
	// The default with every read on the poller: what hotread buys (issue 35).
	{"auto-cold", "cfg=auto-cold/impl=netpoll/mode=et/spin=auto/hotread=off", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-hotread", "off"}, nil},
	{"inline", "cfg=inline/impl=netpoll/mode=et/spin=0/wait=inline", "echoserver", []string{"-impl", "netpoll", "-mode", "et", "-spin", "0", "-wait", "inline"}, nil},
	{"auto-inline", "cfg=auto-inline/impl=netpoll/mode=et/spin=auto/wait=inline", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-wait", "inline"}, nil},
	// The default waiting for readability with no buffer (Conn.WaitRead),
	// taking one from a pool to echo: the idle experiment's buffer-free row.
	{"waitread", "cfg=waitread/impl=netpoll/mode=et/spin=auto/waitread=on", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-waitread"}, nil},
	// The default serving on demand (netpoll.Server): a handler call per
	// readable connection echoes one Read with a buffer from a pool, a
	// busy connection keeps its goroutine, waiting on the runtime's
	// netpoller (dispatch=hot, the default), and an idle one holds no
	// goroutine and no buffer. ondemand-net is
	// the same on package net's listener, the Server's fallback: a
	// goroutine per connection that waits with no buffer.
	{"ondemand", "cfg=ondemand/impl=netpoll/mode=et/spin=auto/ondemand=on", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-ondemand"}, nil},
	// ondemand with a hot connection polling for its next input, the
	// handler's Read making the read: the Server before read-ahead
	// (issue 35).
	{"ondemand-poll", "cfg=ondemand-poll/impl=netpoll/mode=et/spin=auto/ondemand=on/readahead=off", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-ondemand", "-readahead", "off"}, nil},
	// ondemand with a goroutine per handler call, as the Server ran
	// before inline dispatch (issue 35's before-row).
	{"ondemand-go", "cfg=ondemand-go/impl=netpoll/mode=et/spin=auto/ondemand=on/dispatch=go", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-ondemand", "-dispatch", "go"}, nil},
	// ondemand with handlers run on the goroutine that polled, the role
	// passing on (dispatch=inline): the Server's default before hot
	// connections (issue 35).
	{"ondemand-role", "cfg=ondemand-role/impl=netpoll/mode=et/spin=auto/ondemand=on/dispatch=inline", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-ondemand", "-dispatch", "inline"}, nil},
	// ondemand under wait=inline: what the Server would get if the
	// default wait were inline above one P (issue 35, part 4).
	// The Server's handlers on the blocking wait's thread, one after
	// another, with the watchdog (dispatch=loop): a callback library's
	// event loop that a blocking handler does not stall.
	{"ondemand-loop", "cfg=ondemand-loop/impl=netpoll/mode=et/spin=0/ondemand=on/wait=block/dispatch=loop", "echoserver", []string{"-impl", "netpoll", "-spin", "0", "-ondemand", "-wait", "block", "-dispatch", "loop"}, nil},
	{"ondemand-inline", "cfg=ondemand-inline/impl=netpoll/mode=et/spin=auto/ondemand=on/wait=inline", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-ondemand", "-wait", "inline"}, nil},
	{"ondemand-net", "cfg=ondemand-net/impl=net/ondemand=on", "echoserver", []string{"-impl", "net", "-ondemand"}, nil},
	// ondemand and auto with an idle timeout set (echoserver's
	// -idletimeout): a timer per idle connection, what the idle
	// experiment asks of them, and in the echo cells a read deadline set
	// again at each request (the plan has no idle-only configurations;
	// like waitread they stay out of net/http's cells and the sweep).
	// idleTimeout outlives the idle experiment's servers, so it never
	// fires there: every connection stays open, holding its timer.
	{"ondemand-timeout", "cfg=ondemand-timeout/impl=netpoll/mode=et/spin=auto/ondemand=on/idletimeout=" + idleTimeout, "echoserver",
		[]string{"-impl", "netpoll", "-spin", "auto", "-ondemand", "-idletimeout", idleTimeout}, nil},
	{"auto-timeout", "cfg=auto-timeout/impl=netpoll/mode=et/spin=auto/idletimeout=" + idleTimeout, "echoserver",
		[]string{"-impl", "netpoll", "-spin", "auto", "-idletimeout", idleTimeout}, nil},
	// Short-read skipping off (it is on in every netpoll configuration above).
	{"et-noskip", "cfg=et-noskip/impl=netpoll/mode=et/spin=0/shortread=off", "echoserver", []string{"-impl", "netpoll", "-mode", "et", "-spin", "0", "-shortread", "off"}, nil},
	{"auto-noskip", "cfg=auto-noskip/impl=netpoll/mode=et/spin=auto/shortread=off", "echoserver", []string{"-impl", "netpoll", "-spin", "auto", "-shortread", "off"}, nil},
	{"gnet", "cfg=gnet/impl=gnet", "gnetecho", nil, nil},
	{"nbio", "cfg=nbio/impl=nbio", "nbioecho", nil, nil},
	{"cloudwego", "cfg=cloudwego/impl=cloudwego", "cloudwegoecho", nil, nil},
	{"c", "cfg=c/impl=c-epoll-et", "cref", nil, nil},
}

// idleTimeout is the -idletimeout of the -timeout configurations: longer
// than idleLifetime, the idle experiment's server -lifetime
// (TestBufferFreeConfigs checks). Not 1m: a connection there is quiet
// from its echo to the burst, and loadgen's waits in between for RSS to
// settle and for the memstats answers may add up to 30 s plus the
// dialling of every connection.
const idleTimeout = "10m"

// runtimeServers are package net's echo server built with the patched
// toolchain (runtime_patch/build.sh), with GODEBUG empty ("rt-none") and
// with each setting of the patches: the runtime's rows beside the
// library's. "net" is the same server on stock go1.26.8. rt-zeroread
// also serves as waitread does (echoserver's -zeroread): each connection's
// goroutine waits with a zero-byte Read, which waits only under its
// setting, and holds a buffer only to echo; so, unlike the other rt- rows,
// it joins the idle experiment (idleServer), and like waitread it stays out
// of net/http's cells and the sweep. rt-profile is the recommended
// profile (rtProfile), which with rt-none joins every cell of the default
// run (profileConfigs).
var runtimeServers = []server{
	rtServer("rt-none", ""),
	rtServer("rt-oneshot", "netpolloneshot=1"),
	rtServer("rt-spin50", "netpollspin=50"),
	rtServer("rt-spinauto", "netpollspin=auto"),
	rtServer("rt-shards4", "netpollshards=4"),
	rtServer("rt-shortread", "netpollshortread=1"),
	rtServer("rt-zeroread", "netpollzeroread=1", "-zeroread"),
	rtServer(profileCfg, rtProfile),
}

// rtServer is package net's echoserver on the patched toolchain under
// GODEBUG=godebug (none if empty), with extra flags.
func rtServer(name, godebug string, extra ...string) server {
	label := "none"
	if godebug != "" {
		label = strings.ReplaceAll(godebug, "=", ":")
	}
	s := server{name: name, label: "cfg=" + name + "/impl=net/runtime=patched/godebug=" + label,
		bin: "echoserver-rt", args: append([]string{"-impl", "net"}, extra...)}
	if slices.Contains(extra, "-zeroread") {
		s.label += "/zeroread=on"
	}
	if godebug != "" {
		s.env = []string{"GODEBUG=" + godebug}
	}
	return s
}

// rtProfile is the recommended profile (issue 37): one GODEBUG line of
// the settings that only take work away (a syscall that would fail with
// EAGAIN, a buffer held while idle), together. netpollspin=auto is left
// out: it spends CPU to buy latency, and where a CPU is shared it loses
// (testdata/issue37/run1: 0.83x package net's req/s at 1 connection
// unpinned and 1.34x its p99 beside a blocked neighbour, with the
// setting in the line). httpidlezeroread is
// net/http's (its idle keep-alive connections wait with a zero-byte Read
// and hold no buffers, effective with netpollzeroread=1); a toolchain
// without that patch ignores an unknown GODEBUG key, so the line runs on
// either.
const rtProfile = "netpollshortread=1,netpollzeroread=1,httpidlezeroread=1"

// profileCfg is the profile's row, and profileConfigs the runtime's rows
// that join every cell of the run when they are among its configurations
// (the default run's rtConfigs): the profile judged against the patched
// runtime without a setting and against package net on stock Go, in
// every cell (the profile's block of the verdict).
const profileCfg = "rt-profile"

var profileConfigs = []string{"rt-none", profileCfg}

// isProfileRow reports whether s is one of profileConfigs.
func isProfileRow(s server) bool { return slices.Contains(profileConfigs, s.name) }

// idleServer reports whether s joins the idle experiment: every server but
// the runtime's rows of package net's plain echo, whose memory per
// connection the GODEBUG settings do not change (net's row has it);
// rt-zeroread's, which holds no buffer while idle, joins.
func idleServer(s server) bool {
	return !strings.HasPrefix(s.name, "rt-") || slices.Contains(s.args, "-zeroread")
}

// httpBin is the net/http server binary that runs s's flags.
func httpBin(s server) string { return strings.Replace(s.bin, "echoserver", "httpserver", 1) }

// pickServers resolves a comma-separated list of names; the before
// configurations' labels lack their commit (bench adds it).
func pickServers(names []string) ([]server, error) {
	var out []server
	all := append(slices.Clone(servers), runtimeServers...)
	for _, n := range names {
		if s, ok := pickBefore(n, all); ok {
			out = append(out, s)
			continue
		}
		i := slices.IndexFunc(all, func(s server) bool { return s.name == n })
		if i < 0 {
			var known []string
			for _, s := range all {
				known = append(known, s.name)
			}
			return nil, fmt.Errorf("unknown configuration %q: known are %s; with -before, before (%s) and before-NAME for NAME served by echoserver",
				n, strings.Join(known, ", "), defaultCfg)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// httpConfigs are the configurations -http may name: those cmd/httpserver
// runs on the same flags as cmd/echoserver (package net and netpoll; the
// peers and the C reference serve echo only).
var httpConfigs = []string{"net", "et", "oneshot", "lt", "spin", "auto", "et-noskip", "auto-noskip",
	"rt-none", "rt-oneshot", "rt-spin50", "rt-spinauto", "rt-shards4", "rt-shortread", "rt-profile"}

// defaultHTTPConfigs are those of the default run.
var defaultHTTPConfigs = []string{"net", "et", "auto"}

// kind is what measures a cell.
type kind uint8

const (
	kindLoad kind = iota // cmd/loadgen: a closed or an open loop against a fresh server
	kindIdle             // cmd/loadgen -idle: memory per idle connection, one sample a configuration
	kindHerd             // cmd/herd: epoll waiters on one wakeup source, one run a mode
)

var kindNames = [...]string{kindLoad: "load", kindIdle: "idle", kindHerd: "herd"}

func (k kind) String() string { return kindNames[k] }

// cell is one experiment's shape and where its server runs. A load cell
// (kindLoad) is a protocol ("" or "echo": framed echo of size bytes;
// "http": net/http plaintext GET over keep-alive), connections, message
// size, the total rate of an open loop (requests/s; 0 runs a closed
// loop), whether the server and the load generator run unpinned
// (GOMAXPROCS = the machine's CPUs, as servers normally run; otherwise
// pinned to CPUs of their own when the run pins), the server's CPU quota
// in CPUs (a cgroup; 0 for none), and, in the blocked-neighbour cell, how
// many of its connections send requests the server holds for delay
// (loadgen -blocked, echoserver -delay). An idle cell (kindIdle) is conns
// quiet connections after one echo of size bytes each, or, with proto
// "http", after one net/http keep-alive GET each. A herd cell
// (kindHerd) is 100 waiters on source for events.
type cell struct {
	kind        kind
	proto       string
	conns, size int
	rate        float64
	unpinned    bool
	quota       float64
	blocked     int
	delay       time.Duration
	source      string // herd: pipe or accept
	events      int    // herd
}

func (c cell) http() bool { return c.proto == "http" }

// String is the cell's labels as in benchmark names.
func (c cell) String() string {
	switch c.kind {
	case kindHerd:
		return fmt.Sprintf("herd/source=%s/events=%d", c.source, c.events) + c.labels()
	case kindIdle:
		if c.http() {
			return fmt.Sprintf("idle/proto=http/conns=%d", c.conns) + c.labels()
		}
		return fmt.Sprintf("idle/conns=%d/size=%d", c.conns, c.size) + c.labels()
	}
	s := fmt.Sprintf("conns=%d/size=%d", c.conns, c.size)
	if c.http() {
		s = fmt.Sprintf("proto=http/conns=%d", c.conns)
	}
	if c.blocked > 0 {
		s += fmt.Sprintf("/blocked=%d", c.blocked)
	}
	s += c.labels()
	if c.rate > 0 {
		s += "/rate=" + rateLabel(c.rate)
	}
	return s
}

// labels is the labels of where the cell's server runs, pin=off and
// quota=, and of what it is told, delay=: the runner passes them to
// loadgen's -labels, which adds conns=, size=, blocked= and rate=.
func (c cell) labels() string {
	var s string
	if c.unpinned {
		s += "/pin=off"
	}
	if c.quota > 0 {
		s += "/quota=" + strconv.FormatFloat(c.quota, 'f', -1, 64)
	}
	if c.delay > 0 {
		s += "/delay=" + c.delay.String()
	}
	return s
}

// conns says n connections for people.
func conns(n int) string {
	if n == 1 {
		return "1 conn"
	}
	return fmt.Sprintf("%d conns", n)
}

// title names the cell for people.
func (c cell) title() string {
	var t string
	switch {
	case c.kind == kindHerd:
		return fmt.Sprintf("thundering herd, 100 waiters on a %s, %d events", c.source, c.events)
	case c.kind == kindIdle && c.http():
		t = fmt.Sprintf("idle net/http, %s after one keep-alive GET each", conns(c.conns))
	case c.kind == kindIdle:
		t = fmt.Sprintf("idle, %s after one %d B echo each", conns(c.conns), c.size)
	case c.blocked > 0:
		t = fmt.Sprintf("blocked neighbour, echo %d B: %s pinging beside %s whose requests the server holds %v", c.size,
			conns(c.conns-c.blocked), conns(c.blocked), c.delay)
	case c.http():
		t = "net/http plaintext, keep-alive, " + conns(c.conns)
	default:
		t = fmt.Sprintf("echo, %s, %d B", conns(c.conns), c.size)
	}
	if c.unpinned {
		t += ", unpinned"
	}
	if c.quota > 0 {
		t += fmt.Sprintf(", quota %s CPU", strconv.FormatFloat(c.quota, 'f', -1, 64))
	}
	if c.rate > 0 {
		t += ", open loop " + rateLabel(c.rate) + " req/s"
	}
	return t
}

// short names the cell in the verdict's one column: "echo, 1 conn",
// "http, 50 conns, unpinned", "echo, 1 conn, quota 0.5", "open loop
// 2000/s" (the sweep's, always echo of 1 conn), "blocked neighbour,
// unpinned", "idle, 18000 conns", "idle http, 18000 conns".
func (c cell) short() string {
	var s string
	switch {
	case c.kind == kindHerd:
		return "herd, " + c.source
	case c.kind == kindIdle && c.http():
		return "idle http, " + conns(c.conns)
	case c.kind == kindIdle:
		return "idle, " + conns(c.conns)
	case c.blocked > 0:
		s = "blocked neighbour"
	case c.rate > 0:
		s = "open loop " + rateLabel(c.rate) + "/s"
	default:
		s = conns(c.conns)
		if c.size != 64 && !c.http() {
			s += fmt.Sprintf(", %d B", c.size)
		}
		s = "echo, " + s
		if c.http() {
			s = "http" + strings.TrimPrefix(s, "echo")
		}
	}
	if c.unpinned {
		s += ", unpinned"
	}
	if c.quota > 0 {
		s += ", quota " + strconv.FormatFloat(c.quota, 'f', -1, 64)
	}
	return s
}

// fileName is the cell in plot file names: conns1-size64, http-conns50,
// conns1-size64-unpinned, conns1-size64-quota0.5, conns1-size64-rate2000,
// conns2-size64-blocked1-unpinned-delay2ms.
func (c cell) fileName() string {
	return strings.NewReplacer("proto=http/", "http-", "pin=off", "unpinned", "=", "", "/", "-").Replace(c.String())
}
