package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// TestTiny runs netpollbench in a tiny configuration end to end: every
// configuration produces a result per cell and round, benchstat's table
// parses and has a column per configuration, the herd table has its rows,
// the plots are written, and the sweep measures its configurations at
// 2000 req/s and takes the closed loop from the main matrix's 1-conn cell.
// The windows are long enough to get answers even with the machine loaded
// by parallel test binaries.
func TestTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every server and runs processes; skipped with -short")
	}
	// A relative -out, as users give it: binaries built from another
	// directory (bench/peers) must still land in it.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	out, err := filepath.Rel(wd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	configs := []string{"net", "et", "spin", "gnet", "nbio", "cloudwego", "c"}
	var stdout, stderr bytes.Buffer
	err = run([]string{"-out", out, "-configs", strings.Join(configs, ","), "-conns", "1,4", "-sizes", "64",
		"-rounds", "2", "-duration", "600ms", "-warmup", "200ms", "-rates", "2000,closed", "-sweep-rounds", "1",
		"-http", "net", "-idle", "20"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	rs, err := readResults(filepath.Join(out, "raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ran := configs
	if strings.Contains(stderr.String(), "no C compiler") {
		ran = configs[:len(configs)-1] // the C reference is skipped, and says so
	}
	for _, cfg := range ran {
		for _, conns := range []string{"1", "4"} {
			n := 0
			for _, r := range rs {
				if r.labels["cfg"] == cfg && r.labels["conns"] == conns && r.labels["proto"] != "http" {
					n++
					if r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 {
						t.Errorf("%s conns=%s: ns/op %v, errors %v", cfg, conns, r.metrics["ns/op"], r.metrics["errors"])
					}
				}
			}
			if n != 2 {
				t.Errorf("%s conns=%s: %d results, want one per round (2)", cfg, conns, n)
			}
		}
	}
	tables, err := os.ReadFile(filepath.Join(out, "tables.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"sec/op", "p50-sec", "server-cpu-sec/op", "syscalls/op", "\n1 64 ", "\n4 64 "}, ran...) {
		if !bytes.Contains(tables, []byte(want)) {
			t.Errorf("tables.txt lacks %q:\n%s", want, tables)
		}
	}
	herd, err := os.ReadFile(filepath.Join(out, "herd.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"pipe    wakeall", "pipe    exclusive", "accept  wakeall", "accept  exclusive", "accept  reuseport", "Seed"} {
		if !bytes.Contains(herd, []byte(row)) {
			t.Errorf("herd.txt lacks %q:\n%s", row, herd)
		}
	}
	for _, plot := range []string{"latency-conns1-size64.svg", "cpu-conns4-size64.svg", "throughput-size64.svg"} {
		if b, err := os.ReadFile(filepath.Join(out, plot)); err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("plot %s: %v", plot, err)
		}
	}
	checkReport(t, out, stdout.String(), ran, []string{"echo, 1 conn, 64 B", "echo, 4 conns, 64 B",
		"net/http plaintext, keep-alive, 1 conn", "net/http plaintext, keep-alive, 4 conns"})
	idle, err := readResults(filepath.Join(out, "idle.txt"))
	if err != nil || len(idle) != len(ran) {
		t.Errorf("idle.txt: %d results (%v), want one per configuration (%d)", len(idle), err, len(ran))
	}
	if !strings.Contains(stdout.String(), "per conn") {
		t.Errorf("the summary lacks the idle table")
	}
	// The warm-up round is measured and set aside.
	warm, err := readResults(filepath.Join(out, "warmup.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(warm) != 2*len(ran) {
		t.Errorf("warmup.txt has %d results, want one per configuration and cell (%d)", len(warm), 2*len(ran))
	}
	http := 0
	for _, r := range rs {
		if r.labels["proto"] == "http" {
			http++
			if r.labels["cfg"] != "net" || r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 {
				t.Errorf("http result %v %v", r.labels, r.metrics)
			}
		}
	}
	if http != 4 {
		t.Errorf("%d net/http results, want 2 cells x 2 rounds", http)
	}
	var swept []string
	for _, cfg := range ran {
		if cfg != "nbio" && cfg != "cloudwego" {
			swept = append(swept, cfg)
		}
	}
	checkSweep(t, out, stdout.String(), swept, map[string]int{"2000": 1, "closed": 2})
}

// TestSweep runs the sweep of two configurations where the main matrix has
// no 1-conn cell, so that the sweep measures the closed loop itself.
func TestSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds servers and runs processes; skipped with -short")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-out", out, "-configs", "net,auto", "-conns", "4", "-herd=false",
		"-rounds", "1", "-duration", "600ms", "-warmup", "200ms", "-rates", "closed,2000", "-sweep-rounds", "2"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	checkSweep(t, out, stdout.String(), []string{"net", "auto"}, map[string]int{"2000": 2, "closed": 2})
}

// checkSweep checks the sweep in out: each configuration has want[rate]
// results at each rate, with requests and no errors; the tables name every
// configuration and are printed; the plots are written.
func checkSweep(t *testing.T, out, stdout string, cfgs []string, want map[string]int) {
	t.Helper()
	rs, err := readResults(filepath.Join(out, "sweep.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		for rate, n := range want {
			got := 0
			for _, r := range rs {
				if r.labels["cfg"] != cfg || r.labels["rate"] != rate {
					continue
				}
				got++
				if r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 || r.metrics[utilUnit] <= 0 {
					t.Errorf("sweep %s rate=%s: ns/op %v, errors %v, %s %v", cfg, rate, r.metrics["ns/op"], r.metrics["errors"], utilUnit, r.metrics[utilUnit])
				}
			}
			if got != n {
				t.Errorf("sweep %s rate=%s: %d results, want %d", cfg, rate, got, n)
			}
		}
	}
	if len(rs) != len(cfgs)*(want["2000"]+want["closed"]) {
		t.Errorf("sweep.txt has %d results, want %d", len(rs), len(cfgs)*(want["2000"]+want["closed"]))
	}
	tables, err := os.ReadFile(filepath.Join(out, "sweep-tables.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range append([]string{"p50-sec", "p99-sec", "server-cpu-sec/op", utilUnit, "\n2000 ", "\nclosed "}, cfgs...) {
		if !bytes.Contains(tables, []byte(w)) {
			t.Errorf("sweep-tables.txt lacks %q:\n%s", w, tables)
		}
	}
	if abs, _ := filepath.Abs(out); !strings.Contains(stdout, filepath.Join(abs, "sweep-tables.txt")) {
		t.Errorf("stdout lacks the sweep tables' file name:\n%s", stdout)
	}
	for _, plot := range []string{"sweep-frontier.svg", "sweep-utilisation.svg"} {
		b, err := os.ReadFile(filepath.Join(out, plot))
		if err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("plot %s: %v", plot, err)
			continue
		}
		for _, cfg := range cfgs {
			if !bytes.Contains(b, []byte(">"+cfg+"<")) {
				t.Errorf("plot %s: no legend entry for %s", plot, cfg)
			}
		}
	}
}

// checkReport checks what every run reports: the calibration before and
// after in raw.txt's configuration lines and in the summary, a summary
// (printed and in summary.txt) with a section per cell and a line per
// configuration, no line wider than summaryWidth, and the full tables in
// files whose names are printed.
func checkReport(t *testing.T, out, stdout string, cfgs, titles []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(out, "raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"calib-", "calib-end-"} {
		got := readCalib(raw, prefix)
		for _, k := range calibKeys[:2] {
			if got[k] <= 0 {
				t.Errorf("raw.txt: no %s%s line", prefix, k)
			}
		}
		if !bytes.Contains(raw, []byte("\n"+prefix+"cpu: ")) || !bytes.Contains(raw, []byte("\n"+prefix+"kernel: ")) {
			t.Errorf("raw.txt: no %scpu or %skernel line", prefix, prefix)
		}
	}
	sum, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, string(sum)) {
		t.Errorf("stdout lacks the summary")
	}
	for _, w := range append([]string{"Machine: ", "Calibration before: syscall ", "Calibration after:  syscall "}, titles...) {
		if !bytes.Contains(sum, []byte(w)) {
			t.Errorf("summary lacks %q:\n%s", w, sum)
		}
	}
	for _, cfg := range cfgs {
		if !regexp.MustCompile(`(?m)^  ` + cfg + ` +\d+ +\d+ `).Match(sum) {
			t.Errorf("summary has no measured line for %s:\n%s", cfg, sum)
		}
	}
	if w := wideLines(string(sum), summaryWidth); len(w) > 0 {
		t.Errorf("summary lines over %d columns: %q", summaryWidth, w)
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"calibration", "summary", "plots", "frontier", "herd", "tables"} {
		if !bytes.Contains(html, []byte(`id="`+id+`"`)) {
			t.Errorf("report.html has no section %q", id)
		}
	}
	if !bytes.Contains(html, []byte("<svg")) {
		t.Error("report.html has no inline plot")
	}
	if !strings.Contains(stdout, filepath.Join(abs, "tables.txt")) {
		t.Errorf("stdout does not name tables.txt:\n%s", stdout)
	}
}

// TestHTTPDefaultFollowsConfigs: the default -http list keeps only the
// run's configurations, and none leaves no net/http cells.
func TestHTTPDefaultFollowsConfigs(t *testing.T) {
	o, err := parseFlags([]string{"-configs", "net,gnet", "-runtime", "off"}, &bytes.Buffer{})
	if err != nil || !slices.Equal(o.http, []string{"net"}) || len(o.httpCells) != 2 {
		t.Errorf("-configs net,gnet: http %v, cells %v, %v; want net in 2 cells", o.http, o.httpCells, err)
	}
	o, err = parseFlags([]string{"-configs", "gnet,c", "-runtime", "off"}, &bytes.Buffer{})
	if err != nil || len(o.http) != 0 || len(o.httpCells) != 0 {
		t.Errorf("-configs gnet,c: http %v, cells %v, %v; want none", o.http, o.httpCells, err)
	}
}

// TestDefaults: the default run gives every headline cell minSamples
// rounds after a warm-up round, echo and net/http alike.
func TestDefaults(t *testing.T) {
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	srvs, err := pickServers(o.configs)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.httpCells) == 0 || o.idle == 0 || !o.sweep || !o.herd {
		t.Errorf("default run lacks a part: http %v, idle %d, sweep %v, herd %v", o.httpCells, o.idle, o.sweep, o.herd)
	}
	n := map[string]int{}
	warm := 0
	for _, j := range interleave(o.rounds, true, append(o.cells, o.httpCells...), srvs) {
		if j.round == 0 {
			warm++
			continue
		}
		n[j.s.name+" "+j.c.String()]++
	}
	if warm == 0 {
		t.Error("no warm-up round")
	}
	for k, v := range n {
		if v < minSamples {
			t.Errorf("%s: %d samples by default, want at least %d", k, v, minSamples)
		}
	}
}

// TestFailedMeasurement: a configuration whose server cannot start is
// reported missing in the summary, not as a zero, has no line in raw.txt,
// and fails the run.
func TestFailedMeasurement(t *testing.T) {
	if testing.Short() {
		t.Skip("builds servers and runs processes; skipped with -short")
	}
	saved := servers
	servers = append(slices.Clone(servers), server{"broken", "cfg=broken/impl=netpoll", "echoserver", []string{"-impl", "netpoll", "-mode", "bogus"}, nil})
	defer func() { servers = saved }()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-out", out, "-configs", "net,broken", "-conns", "1", "-herd=false", "-sweep=false",
		"-http", "none", "-idle", "0", "-rounds", "1", "-duration", "300ms", "-warmup", "100ms"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "failed") {
		t.Fatalf("run with a broken configuration: %v, want a failure", err)
	}
	sum, rerr := os.ReadFile(filepath.Join(out, "summary.txt"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !regexp.MustCompile(`(?m)^  broken +0 +missing$`).Match(sum) || !bytes.Contains(sum, []byte("FAILED")) {
		t.Errorf("summary does not show broken as missing:\n%s", sum)
	}
	rs, _ := readResults(filepath.Join(out, "raw.txt"))
	for _, r := range rs {
		if r.labels["cfg"] == "broken" {
			t.Errorf("raw.txt has a result for the broken configuration: %v", r.metrics)
		}
	}
}

func TestParseRates(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []float64
	}{
		{"2000,10000,30000", []float64{2000, 10000, 30000}},
		{"30000, closed,2000", []float64{2000, 30000, 0}},
		{"0", []float64{0}},
		{"2.5e3,closed,100", []float64{100, 2500, 0}},
	} {
		got, err := parseRates(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseRates(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"-configs net,bogus", `"bogus"`},
		{"-conns 0", "-conns"},
		{"-sizes 8", "-sizes"},
		{"-pin maybe", "-pin"},
		{"-rounds -1", "-rounds"},
		{"-sweep-rounds -2", "-sweep-rounds"},
		{"-rates 2000,fast", `"fast" is not a rate`},
		{"-rates -5", `"-5" is not a rate`},
		{"-rates 2000,,closed", `"" is not a rate`},
		{"-rates Inf", `"Inf" is not a rate`},
		{"-rates 2000,closed,0", "closed twice"},
		{"-rates 2e3,2000", "2000 twice"},
		{"-http gnet", `"gnet" does not serve net/http`},
		{"-configs net -http et", `"et" is not among -configs`},
		{"-runtime maybe", "-runtime"},
		{"-idle -3", "-idle"},
	} {
		o, err := parseFlags(strings.Fields(tt.args), &bytes.Buffer{})
		if err == nil {
			_, err = pickServers(o.configs)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error mentioning %s", tt.args, err, tt.want)
		}
	}
}

// TestRuntimeRows runs the patched runtime's configurations beside stock
// net, echo and net/http: each has its rounds, labelled runtime=patched
// with its GODEBUG, and the summary has their lines. It needs the toolchain
// runtime_patch/build.sh builds (.ci/run builds it before the tests).
func TestRuntimeRows(t *testing.T) {
	if testing.Short() {
		t.Skip("builds servers with the patched toolchain and runs processes; skipped with -short")
	}
	if patchedGoroot() == "" {
		testtool.Missing(t, "the patched toolchain (runtime_patch/build.sh)", fmt.Errorf("no %s/bin/go", patchedGorootPath()))
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-out", out, "-configs", "net,rt-none,rt-shortread", "-http", "net,rt-shortread", "-conns", "1",
		"-herd=false", "-sweep=false", "-idle", "0", "-rounds", "2", "-duration", "300ms", "-warmup", "100ms"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	rs, err := readResults(filepath.Join(out, "raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, r := range rs {
		if r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 {
			t.Errorf("%v: %v", r.labels, r.metrics)
		}
		n[r.labels["cfg"]+" "+r.labels["proto"]+" "+r.labels["runtime"]+" "+r.labels["godebug"]]++
	}
	for _, k := range []string{"net   ", "rt-none  patched none", "rt-shortread  patched netpollshortread:1", "rt-shortread http patched netpollshortread:1", "net http  "} {
		if n[k] != 2 {
			t.Errorf("%q: %d results, want 2 (all: %v)", k, n[k], n)
		}
	}
	checkReport(t, out, stdout.String(), []string{"net", "rt-none", "rt-shortread"}, []string{"echo, 1 conn, 64 B", "net/http plaintext, keep-alive, 1 conn"})
}

// TestStartEnv: a configuration's environment reaches its server process.
func TestStartEnv(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	srvs, err := pickServers([]string{"net"})
	if err != nil {
		t.Fatal(err)
	}
	bins, _, _, err := build(t.Context(), root, t.TempDir(), srvs, false, false, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{opts: &options{}, bins: bins, stderr: io.Discard}
	srv, err := r.start(t.Context(), bins["echoserver"], srvs[0].args, []string{"GODEBUG=netpollshortread=1"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", srv.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(env, []byte("\x00GODEBUG=netpollshortread=1\x00")) && !bytes.HasPrefix(env, []byte("GODEBUG=netpollshortread=1\x00")) {
		t.Errorf("server environment lacks GODEBUG=netpollshortread=1")
	}
}

// TestCompare: -compare with a run whose calibration differs by more than
// 2x warns that the machines differ, and still compares (the calibration
// keys do not split benchstat's tables).
func TestCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("builds servers and runs processes; skipped with -short")
	}
	args := []string{"-configs", "net", "-conns", "1", "-herd=false", "-sweep=false", "-http", "none", "-idle", "0",
		"-runtime", "off", "-rounds", "1", "-duration", "300ms", "-warmup", "100ms"}
	old := t.TempDir()
	if err := run(append([]string{"-out", old}, args...), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(old, "raw.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// The old run on a machine whose wakeups cost 10x: another machine.
	cal := readCalib(raw, "calib-")
	key := "same-core-wakeup-roundtrip-us"
	raw = regexp.MustCompile(`(?m)^calib-`+key+`: .*$`).ReplaceAll(raw, fmt.Appendf(nil, "calib-%s: %.3g", key, cal[key]*10))
	if err := os.WriteFile(filepath.Join(old, "raw.txt"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var stdout bytes.Buffer
	if err := run(append([]string{"-out", out, "-compare", old}, args...), &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "DIFFERENT MACHINES") || !strings.Contains(stdout.String(), key) {
		t.Errorf("no warning that the machines differ:\n%s", stdout.String())
	}
	cmp, err := os.ReadFile(filepath.Join(out, "compare.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cmp, []byte("old")) || !bytes.Contains(cmp, []byte("new")) || !bytes.Contains(cmp, []byte("vs base")) {
		t.Errorf("compare.txt does not compare old and new side by side:\n%s", cmp)
	}
}
