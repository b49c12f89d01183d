package main

// The checks themselves run in verify.sh: they need a binary built by the
// patched toolchain, and the runtime prints its counters only when main.main
// returns, which a test binary's main never does.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCountTrace(t *testing.T) {
	tests := []struct {
		name        string
		log         string
		mods, parks int
	}{
		{
			name: "plain",
			log: `101 epoll_ctl(4, EPOLL_CTL_ADD, 7, {events=EPOLLONESHOT, data=0x1}) = 0
101 read(7, 0xc000012000, 1) = -1 EAGAIN (Resource temporarily unavailable)
101 epoll_ctl(4, EPOLL_CTL_MOD, 7, {events=EPOLLIN|EPOLLRDHUP|EPOLLONESHOT, data=0x1}) = 0
101 read(7, "x", 1) = 1
101 connect(8, {sa_family=AF_INET, sin_port=htons(1), sin_addr=inet_addr("127.0.0.1")}, 16) = -1 EINPROGRESS (Operation now in progress)
101 epoll_ctl(4, EPOLL_CTL_MOD, 8, {events=EPOLLOUT|EPOLLONESHOT, data=0x2}) = 0
`,
			mods: 2, parks: 2,
		},
		{
			name: "unfinished and resumed",
			log: `101 read(7,  <unfinished ...>
102 epoll_ctl(4, EPOLL_CTL_MOD, 9, {events=EPOLLIN|EPOLLRDHUP|EPOLLONESHOT, data=0x3} <unfinished ...>
101 <... read resumed>0xc000012000, 1) = -1 EAGAIN (Resource temporarily unavailable)
102 <... epoll_ctl resumed>) = 0
`,
			mods: 1, parks: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "strace.out")
			if err := os.WriteFile(path, []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			mods, parks, err := countTrace(path)
			if err != nil {
				t.Fatal(err)
			}
			if mods != tt.mods || parks != tt.parks {
				t.Errorf("countTrace = %d mods, %d parks; want %d, %d", mods, parks, tt.mods, tt.parks)
			}
		})
	}
}

func TestStat(t *testing.T) {
	stderr := []byte("noise\nedgepoll: netpolloneshot=1 oneshot-arms=42 netpollspin=0 spin-found=0\n")
	if v, err := stat(stderr, "oneshot-arms"); err != nil || v != 42 {
		t.Errorf("stat(oneshot-arms) = %d, %v; want 42", v, err)
	}
	if _, err := stat(stderr, "shard-waits"); err == nil {
		t.Error("stat(shard-waits) found a counter that is not there")
	}
	if _, err := stat([]byte("no line\n"), "oneshot-arms"); err == nil {
		t.Error("stat found a counter without an edgepoll line")
	}
}

func TestFields(t *testing.T) {
	kv, err := fields("eventpoll=5 conns=320 once=320\n", "eventpoll", "once")
	if err != nil || kv["eventpoll"] != 5 || kv["once"] != 320 || kv["conns"] != 320 {
		t.Errorf("fields = %v, %v; want eventpoll=5 conns=320 once=320", kv, err)
	}
	if _, err := fields("eventpoll=5", "splits"); err == nil {
		t.Error("fields: no error for a missing key")
	}
	if _, err := fields("eventpoll=x", "eventpoll"); err == nil {
		t.Error("fields: no error for a value that is not a number")
	}
}

// TestPingPongPeer runs the spin check's two workloads against each other
// in one process: echoOne serves exactly the one connection and returns
// without error once the ping-pong ends.
func TestPingPongPeer(t *testing.T) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := echoOne(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	addr, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address from echoOne: %v", err)
	}
	if err := pingpong(100, strings.TrimSpace(addr)); err != nil {
		t.Fatalf("pingpong against echoOne: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("echoOne: %v", err)
	}
	if err := pingpong(100, ""); err != nil {
		t.Fatalf("pingpong with its own peer: %v", err)
	}
}

func TestStatLines(t *testing.T) {
	stderr := []byte("edgepoll: spin-p=249 spin-idle=3\nnoise\nedgepoll: spin-p=7 spin-idle=203\nedgepoll: spin-p=7 spin-idle=205\n")
	lines := statLines(stderr)
	if len(lines) != 3 {
		t.Fatalf("statLines found %d lines, want 3: %q", len(lines), lines)
	}
	if v, err := statIn(lines[1], "spin-idle"); err != nil || v != 203 {
		t.Errorf("statIn(second line, spin-idle) = %d, %v; want 203", v, err)
	}
	if v, err := stat(stderr, "spin-p"); err != nil || v != 249 {
		t.Errorf("stat(spin-p) = %d, %v; want 249 from the first line", v, err)
	}
}

// TestMissesBelowLow checks the bound the spinauto check derives from the
// policy against the runtime's integer update, done by hand: p += -p/8,
// truncated towards zero.
func TestMissesBelowLow(t *testing.T) {
	tests := []struct {
		p    int64
		want int
	}{
		{p: 0, want: 0},
		{p: 95, want: 0},
		{p: 96, want: 1},  // 96 - 12 = 84
		{p: 109, want: 2}, // 109 - 13 = 96, still 3/8; 96 - 12 = 84
		{p: 110, want: 2}, // 110 - 13 = 97; 97 - 12 = 85
		{p: 249, want: 8}, // 218 191 168 147 129 113 99 87
		{p: 255, want: 8}, // 224 196 172 151 133 117 103 91: the most p can be
	}
	for _, tt := range tests {
		if got := missesBelowLow(tt.p); got != tt.want {
			t.Errorf("missesBelowLow(%d) = %d, want %d", tt.p, got, tt.want)
		}
	}
}

func TestJudgeIdleWindow(t *testing.T) {
	// At the end of traffic: p = 249, 8 misses from below 3/8.
	before := map[string]int64{"spin-w-ns": 5000, "spin-p": 249, "spin-sessions": 1900, "spin-probes": 3,
		"spin-found": 1850, "spin-blocked-hits": 6, "spin-blocked-gaps": 9, "spin-idle": 1990, "spin-longgap": 40}
	window := func(sessions, probes, found, blockedHits, idle int64) map[string]int64 {
		after := map[string]int64{}
		for k, v := range before {
			after[k] = v
		}
		after["spin-sessions"] += sessions
		after["spin-probes"] += probes
		after["spin-found"] += found
		after["spin-blocked-hits"] += blockedHits
		after["spin-idle"] += idle
		return after
	}
	longGap := func(after map[string]int64, n int64) map[string]int64 {
		after["spin-longgap"] += n
		return after
	}
	blockedGap := func(after map[string]int64) map[string]int64 {
		after["spin-blocked-gaps"]++
		return after
	}
	tests := []struct {
		name   string
		before map[string]int64
		after  map[string]int64
		ok     bool
	}{
		{name: "stops", before: before, after: window(12, 4, 0, 0, 200), ok: true},
		{name: "one session too many", before: before, after: window(13, 4, 0, 0, 200)},
		{name: "probes beyond one in 64", before: before, after: window(13, 5, 0, 0, 200)},
		{name: "one probe, the count running on, while the gap is long", before: before, after: longGap(window(9, 1, 0, 0, 200), 200), ok: true},
		{name: "probes beyond one in 64 of the moments with a short gap", before: before, after: longGap(window(10, 2, 0, 0, 200), 140)},
		{name: "spins at every idle moment", before: before, after: window(200, 4, 0, 0, 200)},
		{name: "a network event in the window", before: before, after: window(12, 4, 1, 0, 200)},
		{name: "a blocked hit in the window", before: before, after: window(12, 4, 0, 1, 200)},
		{name: "a blocked gap in the window", before: before, after: blockedGap(window(12, 4, 0, 0, 200))},
		{name: "fewer idle moments than sleeps", before: before, after: window(0, 0, 0, 0, 99)},
		{name: "no wakeup timed", before: map[string]int64{"spin-p": 0}, after: map[string]int64{"spin-idle": 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := judgeIdleWindow(tt.before, tt.after, 100)
			if tt.ok && err != nil {
				t.Errorf("judgeIdleWindow: %v, want no error", err)
			}
			if !tt.ok && err == nil {
				t.Error("judgeIdleWindow: no error")
			}
		})
	}
}

func TestCountCalls(t *testing.T) {
	log := `101 read(7, 0xc000012000, 4096) = -1 EAGAIN (Resource temporarily unavailable)
101 read(7, "xxxx", 4096) = 64
102 write(8, "yyyy", 64) = 64
102 write(8, "zzzz"..., 16777216) = 2621440
102 write(8, "zzzz"..., 14155776) = -1 EAGAIN (Resource temporarily unavailable)
101 read(7,  <unfinished ...>
102 epoll_pwait(4, [], 128, 0, NULL, 0) = 0
101 <... read resumed>0xc000012000, 4096) = -1 EAGAIN (Resource temporarily unavailable)
103 write(9, "\1\0\0\0\0\0\0\0", 8 <unfinished ...>
103 <... write resumed>) = 8
101 --- SIGURG {si_signo=SIGURG, si_code=SI_TKILL, si_pid=1, si_uid=0} ---
101 +++ exited with 0 +++
`
	path := filepath.Join(t.TempDir(), "strace.out")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := countCalls(path)
	if err != nil {
		t.Fatal(err)
	}
	want := syscallCounts{reads: 3, readAgain: 2, writes: 4, writeAgain: 1}
	if got != want {
		t.Errorf("countCalls = %+v, want %+v", got, want)
	}
}

func TestJudgeShortRead(t *testing.T) {
	const rounds = 2000
	report := []byte(fmt.Sprintf("rounds=%d bulk=%d\n", rounds, shortBulk))
	stock := syscallCounts{reads: 8100, readAgain: 4000, writes: 4100, writeAgain: 3}
	off := map[string]uint64{}
	on := func(skips, wskips uint64) map[string]uint64 {
		return map[string]uint64{"shortread-skips": skips, "shortwrite-skips": wskips}
	}
	tests := []struct {
		name   string
		on     bool
		stdout []byte
		counts syscallCounts
		st     map[string]uint64
		ok     bool
	}{
		{name: "stock", stdout: report, counts: stock, st: off, ok: true},
		{name: "stock with a skip", stdout: report, counts: stock, st: on(1, 0)},
		{name: "stock without parks", stdout: report, counts: syscallCounts{readAgain: rounds - 1}, st: off},
		{name: "rounds missing", stdout: []byte("rounds=1999 bulk=16777216"), counts: stock, st: off},
		{name: "bulk missing", stdout: []byte("rounds=2000 bulk=5"), counts: stock, st: off},
		{name: "no report", stdout: []byte("noise"), counts: stock, st: off},
		{name: "patched", on: true, stdout: report, counts: syscallCounts{readAgain: 4}, st: on(3998, 12), ok: true},
		{name: "patched at a tenth", on: true, stdout: report, counts: syscallCounts{readAgain: 400}, st: on(3998, 12), ok: true},
		{name: "patched above a tenth", on: true, stdout: report, counts: syscallCounts{readAgain: 401}, st: on(3998, 12)},
		{name: "patched, few skips", on: true, stdout: report, counts: syscallCounts{readAgain: 4}, st: on(rounds-1, 12)},
		{name: "patched, no write skip", on: true, stdout: report, counts: syscallCounts{readAgain: 4}, st: on(3998, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := judgeShortRead(tt.on, rounds, tt.stdout, tt.counts, stock, tt.st)
			if tt.ok && err != nil {
				t.Errorf("judgeShortRead: %v, want no error", err)
			}
			if !tt.ok && err == nil {
				t.Error("judgeShortRead: no error")
			}
		})
	}
}

// TestShortReadPingPong runs the shortread child's workload on whatever
// runtime the test has: it must complete and check every byte.
func TestShortReadPingPong(t *testing.T) {
	got, err := shortReadPingPong(100)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("rounds=100 bulk=%d", shortBulk); got != want {
		t.Errorf("shortReadPingPong = %q, want %q", got, want)
	}
}

func TestJudgeSpinQuota(t *testing.T) {
	st := func(sessions, refused, mcpu int64) map[string]int64 {
		return map[string]int64{"spin-sessions": sessions, "spin-quota-refused": refused, "spin-quota-mcpu": mcpu, "spin-quota-period-us": quotaPeriodUS}
	}
	short := st(700, 8800, quotaMCPU)
	short["spin-quota-period-us"] = shortPeriodUS
	tests := []struct {
		name         string
		quota, auto  bool
		period       int // 0: quotaPeriodUS
		st           map[string]int64
		missing, bad bool
	}{
		{name: "no quota", auto: true, st: st(9000, 0, 0)},
		{name: "no quota, no session", auto: true, st: st(0, 0, 0), missing: true},
		{name: "no quota, a refusal", auto: true, st: st(9000, 1, 0), bad: true},
		{name: "no quota, a limit", auto: true, st: st(9000, 0, 500), bad: true},
		{name: "quota", quota: true, auto: true, st: st(700, 8800, quotaMCPU)},
		{name: "quota, nothing refused", quota: true, auto: true, st: st(9000, 0, quotaMCPU), missing: true},
		{name: "quota, limit not read", quota: true, auto: true, st: st(9000, 0, 0), bad: true},
		{name: "quota, limit read wrong", quota: true, auto: true, st: st(700, 8800, 1000), bad: true},
		{name: "short period", quota: true, auto: true, period: shortPeriodUS, st: short},
		{name: "short period, window not the period", quota: true, auto: true, period: shortPeriodUS, st: st(700, 8800, quotaMCPU), bad: true},
		{name: "quota, setting off", quota: true, st: st(0, 0, 0)},
		{name: "quota, setting off, a session", quota: true, st: st(1, 0, 0), bad: true},
		{name: "quota, setting off, a limit", quota: true, st: st(0, 0, quotaMCPU), bad: true},
		{name: "quota, setting off, a refusal", quota: true, st: st(0, 1, 0), bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			period := tt.period
			if period == 0 {
				period = quotaPeriodUS
			}
			missing, err := judgeSpinQuota(tt.quota, tt.auto, period, tt.st)
			if (err != nil) != tt.bad {
				t.Errorf("judgeSpinQuota error %v, want an error: %v", err, tt.bad)
			}
			if (missing != "") != tt.missing {
				t.Errorf("judgeSpinQuota missing %q, want something missing: %v", missing, tt.missing)
			}
		})
	}
}

func TestNamedCounters(t *testing.T) {
	stderr := []byte("edgepoll: netpollspin=auto spin-sessions=705 spin-quota-refused=8830 spin-quota-mcpu=500\n")
	st, err := namedCounters(stderr, []string{"spin-sessions", "spin-quota-refused", "spin-quota-mcpu"})
	if err != nil || st["spin-sessions"] != 705 || st["spin-quota-refused"] != 8830 || st["spin-quota-mcpu"] != 500 {
		t.Errorf("namedCounters = %v, %v", st, err)
	}
	if _, err := namedCounters(stderr, []string{"spin-found"}); err == nil {
		t.Error("namedCounters: no error for a missing counter")
	}
}

func TestParseCPUStat(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want throttling
		bad  bool
	}{
		{name: "v1", stat: "nr_periods 17\nnr_throttled 7\nthrottled_time 10915865\nnr_bursts 0\nburst_time 0\n",
			want: throttling{periods: 17, throttled: 7, throttledNS: 10915865}},
		{name: "v2", stat: "usage_usec 123\nuser_usec 100\nsystem_usec 23\nnr_periods 9\nnr_throttled 3\nthrottled_usec 26700\nnr_bursts 0\nburst_usec 0\n",
			want: throttling{periods: 9, throttled: 3, throttledNS: 26700000}},
		{name: "no throttled time", stat: "nr_periods 9\nnr_throttled 3\n", bad: true},
		{name: "empty", stat: "", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCPUStat(tt.stat)
			if (err != nil) != tt.bad {
				t.Fatalf("parseCPUStat error %v, want an error: %v", err, tt.bad)
			}
			if got != tt.want {
				t.Errorf("parseCPUStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestCPUGroupEnter runs a shell through a group's enter command, with a
// plain directory for the group: the pid written to cgroup.procs must be
// the pid of the command it executes, which is what puts that command in
// the group before it starts.
func TestCPUGroupEnter(t *testing.T) {
	g := &cpuGroup{dir: t.TempDir()}
	argv := append(g.enter(), "/bin/sh", "-c", "echo $$")
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	procs, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), strings.TrimSpace(string(procs)); got == "" || got != want {
		t.Errorf("the command ran as pid %q, the group was given pid %q", got, want)
	}
}

func TestJudgeShortSafe(t *testing.T) {
	tests := []struct {
		name, kase string
		on         bool
		report     string
		skips      uint64
		fail       bool
	}{
		{name: "stock without skips", kase: "tcp", report: "rounds=200"},
		{name: "stock with a skip", kase: "tcp", report: "rounds=200", skips: 1, fail: true},
		{name: "tcp skips every round", kase: "tcp", on: true, report: "rounds=200", skips: 398},
		{name: "tcp skips too few", kase: "tcp", on: true, report: "rounds=200", skips: shortSafeRounds - 1, fail: true},
		{name: "mptcp no skip", kase: "mptcp", on: true, report: "rounds=200"},
		{name: "mptcp skipped", kase: "mptcp", on: true, report: "rounds=200", skips: 1, fail: true},
		{name: "mptcp unavailable", kase: "mptcp", on: true, report: "skip: no MPTCP connection", skips: 0},
		{name: "rcvlowat read", kase: "rcvlowat-conn", on: true, report: "read=10 in=2µs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := judgeShortSafe(tt.kase, tt.on, tt.report, tt.skips)
			if (err != nil) != tt.fail {
				t.Errorf("judgeShortSafe(%q, %v, %q, %d) = %v; want failure %v", tt.kase, tt.on, tt.report, tt.skips, err, tt.fail)
			}
		})
	}
}

func TestJudgeHTTPIdle(t *testing.T) {
	// Reports as the child prints them, one line per network.
	const (
		held     = "network=tcp conns=200 idlewait=0 peek=200 events=0 heap=10443\nnetwork=unix conns=200 idlewait=0 peek=200 events=0 heap=9790\n"
		released = "network=tcp conns=200 idlewait=200 peek=0 events=200 heap=2086\nnetwork=unix conns=200 idlewait=200 peek=0 events=200 heap=1413\n"
	)
	tests := []struct {
		name              string
		none, alone, both string
		fail              bool
	}{
		{name: "ok", none: held, alone: held, both: released},
		{name: "both settings, buffers held", none: held, alone: held, both: held, fail: true},
		{name: "alone takes effect", none: held, alone: released, both: released, fail: true},
		{name: "one connection in Peek", none: held, alone: held, both: strings.Replace(released, "idlewait=200 peek=0", "idlewait=199 peek=1", 1), fail: true},
		{name: "a wait not counted", none: held, alone: held, both: strings.Replace(released, "events=200", "events=199", 1), fail: true},
		{name: "heap saving too small", none: held, alone: held, both: strings.Replace(released, "heap=2086", "heap=5000", 1), fail: true},
		{name: "a network missing", none: held, alone: held, both: "network=tcp conns=200 idlewait=200 peek=0 events=200 heap=2086\n", fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs [3][]httpIdleRun
			for i, out := range []string{tt.none, tt.alone, tt.both} {
				r, err := parseHTTPIdle([]byte(out))
				if err != nil {
					t.Fatal(err)
				}
				runs[i] = r
			}
			err := judgeHTTPIdle(runs[0], runs[1], runs[2])
			if (err != nil) != tt.fail {
				t.Errorf("judgeHTTPIdle = %v; want failure %v", err, tt.fail)
			}
		})
	}
	if _, err := parseHTTPIdle([]byte("network=tcp conns=200\n")); err == nil {
		t.Error("parseHTTPIdle accepted a line without its counts")
	}
}
