package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// TestTiny runs netpollbench in a tiny configuration end to end: every
// configuration produces a result per cell and round, pinned and
// unpinned, benchstat's table parses and has a column per configuration,
// the quota cell counts its throttling, the blocked neighbour counts the
// requests its server held, the idle cell and the herd have a result per
// configuration, the plots are written, the summary starts with the
// verdict, and the sweep measures its configurations at 2000 req/s and
// takes the closed loop from the main matrix's 1-conn cell. The table
// holds exactly the plan's measurements (checkPlanned), and a render of
// the table read back from the run's table.json writes the same files
// (checkRerender). The windows are long enough to get answers even with
// the machine loaded by parallel test binaries.
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
	configs := []string{"net", "et", "spin", "ondemand", "gnet", "nbio", "cloudwego", "c"}
	var stdout, stderr bytes.Buffer
	err = run([]string{"-out", out, "-configs", strings.Join(configs, ","), "-conns", "1,4", "-sizes", "64",
		"-rounds", "2", "-duration", "600ms", "-warmup", "200ms", "-rates", "2000,closed", "-sweep-rounds", "1",
		"-http", "net", "-idle", "20", "-quota-rounds", "1", "-quota-duration", "1s"}, &stdout, &stderr)
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
	placements := []string{"", "off"} // pinned and unpinned
	if strings.Contains(stderr.String(), "every cell unpinned") {
		placements = []string{"off"}
	}
	for _, cfg := range ran {
		for _, conns := range []string{"1", "4"} {
			for _, pin := range placements {
				var rounds []int
				for _, r := range rs {
					if r.labels["cfg"] == cfg && r.labels["conns"] == conns && r.labels["pin"] == pin && r.labels["proto"] != "http" {
						rounds = append(rounds, r.round)
						if r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 || r.metrics["client-cpu-ns/op"] <= 0 {
							t.Errorf("%s conns=%s pin=%s: ns/op %v, errors %v, client CPU %v", cfg, conns, pin, r.metrics["ns/op"], r.metrics["errors"], r.metrics["client-cpu-ns/op"])
						}
					}
				}
				if slices.Sort(rounds); !slices.Equal(rounds, []int{1, 2}) {
					t.Errorf("%s conns=%s pin=%s: rounds %v, want one result in each of rounds 1 and 2", cfg, conns, pin, rounds)
				}
			}
		}
	}
	tables, err := os.ReadFile(filepath.Join(out, "tables.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"sec/op", "p50-sec", "server-cpu-sec/op", "syscalls/op", "\noff 1 64 ", "\noff 4 64 "}, ran...) {
		if !bytes.Contains(tables, []byte(want)) {
			t.Errorf("tables.txt lacks %q:\n%s", want, tables)
		}
	}
	if i := bytes.Index(tables, []byte("│")); i < 0 || !bytes.HasPrefix(bytes.TrimLeft(tables[i+len("│"):], " "), []byte("net ")) {
		t.Errorf("tables.txt's first column is not net (the base):\n%s", tables)
	}
	// The quota cell: net, et and ondemand (auto is not among -configs),
	// each with the throttling of its window.
	if strings.Contains(stdout.String(), "Quota cell skipped") {
		if os.Getenv("CI") != "" {
			t.Errorf("the quota cell was skipped under CI (root, cgroups): %s", stdout.String())
		}
	} else {
		q, err := readResults(filepath.Join(out, "quota.txt"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range q {
			got = append(got, r.labels["cfg"])
			if r.labels["quota"] != "0.5" || r.metrics["quota-periods"] <= 0 || r.metrics["throttled-ns"] < 0 || r.metrics["max-ns"] <= 0 {
				t.Errorf("quota result %v %v", r.labels, r.metrics)
			}
		}
		if slices.Sort(got); !slices.Equal(got, []string{"et", "net", "ondemand"}) {
			t.Errorf("quota.txt has %v, want et, net and ondemand once each", got)
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
	for _, plot := range []string{"latency-conns1-size64.svg", "cpu-conns4-size64.svg", "throughput-size64.svg", "latency-conns1-size64-unpinned.svg"} {
		if b, err := os.ReadFile(filepath.Join(out, plot)); err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("plot %s: %v", plot, err)
		}
	}
	checkReport(t, out, stdout.String(), ran, []string{"Verdict: ", "echo, 1 conn, 64 B", "echo, 4 conns, 64 B",
		"echo, 4 conns, 64 B, unpinned", "net/http plaintext, keep-alive, 1 conn", "net/http plaintext, keep-alive, 4 conns",
		"blocked neighbour, echo 64 B: 1 conn pinging beside 1 conn whose requests the server holds 2ms, unpinned", "Idle connections: ",
		"Idle net/http connections: "})
	// The blocked neighbour: net and ondemand (auto is not among
	// -configs), the pinger's figures and the held requests counted.
	nb, err := readResults(filepath.Join(out, neighbourFile))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range nb {
		got = append(got, r.labels["cfg"])
		if r.labels["blocked"] != "1" || r.labels["delay"] != "2ms" || r.labels["pin"] != "off" || r.metrics["blocked-requests"] < 1 ||
			r.metrics["ns/op"] <= 0 || r.metrics["max-ns"] <= 0 || r.metrics["errors"] != 0 {
			t.Errorf("neighbour result %v %v", r.labels, r.metrics)
		}
	}
	if slices.Sort(got); !slices.Equal(got, []string{"net", "net", "ondemand", "ondemand"}) {
		t.Errorf("neighbour.txt has %v, want net and ondemand in each of 2 rounds", got)
	}
	// The echo idle cell, a result per configuration, and the net/http
	// one: net's cmd/httpserver held 20 connections after a GET each and
	// told its figures (GET /debug/memstats).
	idle, err := readResults(filepath.Join(out, "idle.txt"))
	if err != nil || len(idle) != len(ran)+1 {
		t.Errorf("idle.txt: %d results (%v), want one per configuration (%d) and net/http's", len(idle), err, len(ran))
	}
	var httpIdle []result
	for _, r := range idle {
		if r.labels["proto"] == "http" {
			httpIdle = append(httpIdle, r)
		}
	}
	if len(httpIdle) != 1 || httpIdle[0].labels["cfg"] != "net" || httpIdle[0].labels["conns"] != "20" ||
		httpIdle[0].metrics["rss-bytes"] <= 0 || httpIdle[0].metrics["goroutines/conn"] < 1 {
		t.Errorf("net/http idle results %v: want net's, 20 conns, its RSS read and at least a goroutine per connection told", httpIdle)
	}
	if !strings.Contains(stdout.String(), "KiB per conn") {
		t.Errorf("the summary lacks the idle table")
	}
	// The warm-up round is measured and set aside: every configuration
	// once.
	warm, err := readResults(filepath.Join(out, "warmup.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(warm) != len(ran) {
		t.Errorf("warmup.txt has %d results, want one per configuration (%d)", len(warm), len(ran))
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
	tb := checkPlanned(t, out)
	checkRerender(t, out, tb)
}

// checkPlanned reads the table back from the run in out and checks that
// every measurement in it is one the plan lists, once: each
// configuration of each cell in each of its rounds (the warm-up round:
// each configuration once), the idle cell and the herd once each. (A
// configuration the build dropped, the C reference without a compiler,
// is in no cell of the plan.) It returns the table.
func checkPlanned(t *testing.T, out string) *table {
	t.Helper()
	tb, err := readTable(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.failures) > 0 {
		t.Errorf("failures: %q", tb.failures)
	}
	seen := map[string]int{}
	for _, r := range tb.results {
		if !slices.Contains(tb.plan.cells, r.cell) {
			t.Fatalf("result of a cell not in the plan: %s", r.line)
		}
		seen[fmt.Sprintf("%s %s %d", r.cell, r.labels["cfg"], r.round)]++
	}
	want := map[string]int{}
	for round := 0; round <= tb.plan.rounds(); round++ {
		for _, j := range tb.plan.jobs(round, func(int, func(int, int)) {}) {
			if round > 0 {
				want[fmt.Sprintf("%s %s %d", j.c, cfgName(j.s), round)]++
			}
		}
	}
	for _, j := range tb.plan.lastJobs() {
		want[fmt.Sprintf("%s %s %d", j.c, cfgName(j.s), 1)]++
	}
	kinds := map[kind]int{}
	for k, n := range want {
		if seen[k] != n {
			t.Errorf("%s: %d results, want %d", k, seen[k], n)
		}
	}
	for k, n := range seen {
		if _, ok := want[k]; !ok && !strings.HasSuffix(k, " 0") {
			t.Errorf("%s: %d results the plan does not list", k, n)
		}
	}
	for _, cp := range tb.plan.cells {
		kinds[cp.kind] += len(tb.measured(cp))
	}
	if kinds[kindIdle] == 0 || kinds[kindHerd] != 5 {
		t.Errorf("results by kind %v: want idle ones and the herd's 5", kinds)
	}
	return tb
}

// checkRerender renders tb, read back from the run in out, into another
// directory: every file the run's render wrote (all but the binaries) is
// written again, byte for byte the same, and no other.
func checkRerender(t *testing.T, out string, tb *table) {
	t.Helper()
	again := t.TempDir()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := render(t.Context(), root, again, tb, io.Discard); err != nil {
		t.Fatal(err)
	}
	files := func(dir string) map[string][]byte {
		m := map[string][]byte{}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			m[e.Name()] = b
		}
		return m
	}
	first, second := files(out), files(again)
	for name, b := range first {
		if c, ok := second[name]; !ok {
			t.Errorf("%s: not written by a render of the table read back", name)
		} else if !bytes.Equal(b, c) {
			t.Errorf("%s differs when rendered from the table read back:\n%s", name, firstDiff(b, c))
		}
	}
	for name := range second {
		if _, ok := first[name]; !ok {
			t.Errorf("%s: written by a render of the table read back, not by the run", name)
		}
	}
	if len(first) < 20 {
		t.Errorf("the run wrote %d files: %v", len(first), slices.Sorted(maps.Keys(first)))
	}
}

// firstDiff is the first line where a and b differ.
func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  %q\n  %q", i+1, x, y)
		}
	}
	return "(the same lines)"
}

// TestSweep runs the sweep of two configurations where the main matrix has
// no 1-conn cell, so that the sweep measures the closed loop itself.
func TestSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds servers and runs processes; skipped with -short")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-out", out, "-configs", "net,auto", "-conns", "4", "-herd=false", "-quota", "0", "-unpinned=false", "-neighbour=false", "-idle", "0",
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

// TestRerender renders the synthetic table (every kind of cell but the
// sweep) into a directory, then runs netpollbench -render on it into
// another: the files are the same, byte for byte, and table.json reads
// back into a table that marshals the same.
func TestRerender(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	first, again := t.TempDir(), t.TempDir()
	tb := syntheticTable(t)
	tb.seed, tb.skipped, tb.failures = 42, []string{"c: no C compiler"}, []string{"c: it failed"}
	tb.plan.notes = []string{"Quota cell skipped: a test"}
	if err := render(t.Context(), root, first, tb, io.Discard); err != nil {
		t.Fatal(err)
	}
	back, err := readTable(first)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tb.marshal()
	if err != nil {
		t.Fatal(err)
	}
	b, err := back.marshal()
	if err != nil || !bytes.Equal(a, b) {
		t.Errorf("the table read back marshals otherwise (%v):\n%s", err, firstDiff(a, b))
	}
	var stdout bytes.Buffer
	if err := run([]string{"-render", first, "-out", again}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "Verdict: ") {
		t.Errorf("-render printed no summary:\n%s", stdout.String())
	}
	entries, err := os.ReadDir(first)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		x, err := os.ReadFile(filepath.Join(first, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(again, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s: rendered again %v:\n%s", e.Name(), err, firstDiff(x, y))
		}
	}
	for _, want := range []string{tableFileName, rawFile, quotaFile, neighbourFile, idleFile, "summary.txt", "herd.txt", "report.html",
		"tables.txt", "tables-quota.txt", "tables-neighbour.txt", "latency-conns2-size64-blocked1-unpinned-delay2ms.svg"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s among %v", want, names)
		}
	}
	if _, err := readTable(t.TempDir()); err == nil {
		t.Error("readTable of a directory without table.json: no error")
	}
}

// TestHTTPDefaultFollowsConfigs: the default -http list keeps only the
// run's configurations, and none leaves no net/http cells.
func TestHTTPDefaultFollowsConfigs(t *testing.T) {
	o, err := parseFlags([]string{"-configs", "net,gnet", "-runtime", "off"}, &bytes.Buffer{})
	if err != nil || !slices.Equal(o.http, []string{"net"}) || len(o.httpConns) != 2 {
		t.Errorf("-configs net,gnet: http %v, cells %v, %v; want net in 2 cells", o.http, o.httpConns, err)
	}
	o, err = parseFlags([]string{"-configs", "gnet,c", "-runtime", "off"}, &bytes.Buffer{})
	if err != nil || len(o.http) != 0 || len(o.httpConns) != 0 {
		t.Errorf("-configs gnet,c: http %v, cells %v, %v; want none", o.http, o.httpConns, err)
	}
}

// TestDefaults: the default plan lists every experiment the verdict
// needs (pinned and unpinned echo, net/http, the blocked neighbour, the
// quota cell, the open loop, idle memory at 18,000 connections, the herd),
// with on demand in every echo cell, the blocked neighbour's and the idle
// cell, enough rounds for the paired interval; each round measures every
// configuration of a cell once, and the order within a round is random
// (seeded), not net first, with a cell's measurements together; the idle
// cell and the herd are measured once each, after the rounds.
func TestDefaults(t *testing.T) {
	p, srvs := testPlan(t, "-runtime", "off", "-pin", "on")
	if sweepOf(p) == nil {
		t.Errorf("default run lacks the sweep")
	}
	has := func(cp *cellPlan, n string) bool {
		return cp != nil && slices.ContainsFunc(cp.srvs, func(s server) bool { return s.name == n })
	}
	var titles []string
	for _, cp := range p.cells {
		titles = append(titles, cp.short())
		least := 6
		switch {
		case cp.kind != kindLoad:
			least = 1
		case cp.quota > 0 || cp.rate > 0:
			least = 5
		}
		if cp.rounds < least {
			t.Errorf("%s: %d rounds, want at least %d", cp.short(), cp.rounds, least)
		}
		if cp.kind == kindLoad && !cp.http() && !has(cp, onDemandCfg) {
			t.Errorf("%s: no %s", cp.short(), onDemandCfg)
		}
	}
	for _, want := range []string{"echo, 1 conn", "echo, 50 conns", "echo, 1 conn, unpinned", "echo, 50 conns, unpinned",
		"http, 1 conn", "http, 50 conns", "blocked neighbour, unpinned", "echo, 1 conn, quota 0.5", "open loop 2000/s",
		"idle, 18000 conns", "idle http, 18000 conns", "herd, pipe", "herd, accept"} {
		if !slices.Contains(titles, want) {
			t.Errorf("default plan lacks the cell %q: %q", want, titles)
		}
	}
	if q := p.find(cell{conns: 1, size: 64, quota: 0.5}); q == nil || len(q.srvs) != 4 || q.duration < 2*time.Second {
		t.Errorf("quota cell %+v: want net, et, auto and ondemand, 2 s or more", q)
	}
	nb := p.find(cell{conns: 2, size: 64, blocked: 1, delay: neighbourDelay, unpinned: true})
	if nb == nil || len(nb.srvs) != 3 || nb.file != neighbourFile {
		t.Fatalf("blocked-neighbour cell %+v: want net, auto and ondemand", nb)
	}
	for _, s := range nb.srvs {
		if !slices.Contains(neighbourConfigs, s.name) || !strings.HasSuffix(strings.Join(s.args, " "), " -delay 2ms") {
			t.Errorf("blocked neighbour: %s %q, want one of %v with -delay 2ms", s.name, s.args, neighbourConfigs)
		}
	}
	idle := idleCell(p)
	if idle == nil || idle.conns != 18000 || idle.rounds != 1 || !has(idle, defaultCfg) || !has(idle, onDemandCfg) || !has(idle, "net") {
		t.Errorf("idle cell %+v: want 18000 connections, one sample of net, the default and ondemand", idle)
	}
	// Every round measures each configuration of each load cell once; the
	// first job of a round is not always the same.
	firsts := map[string]bool{}
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		for round := 0; round <= p.rounds(); round++ {
			js := p.jobs(round, rng.Shuffle)
			n := map[string]int{}
			for _, j := range js {
				if j.c.kind != kindLoad {
					t.Fatalf("round %d measures the %s cell %s", round, j.c.kind, j.c)
				}
				n[j.s.name+" "+j.c.String()]++
			}
			if round == 0 {
				warmed := map[string]int{}
				for _, j := range js {
					warmed[j.s.name]++
				}
				for _, s := range srvs {
					if warmed[s.name] != 1 {
						t.Errorf("seed %d: %s warmed up %d times, want once", seed, s.name, warmed[s.name])
					}
				}
				continue
			}
			for _, cp := range p.cells {
				if cp.kind != kindLoad {
					continue
				}
				for _, s := range cp.srvs {
					want := 1
					if round > cp.rounds {
						want = 0
					}
					if got := n[s.name+" "+cp.String()]; got != want {
						t.Fatalf("seed %d round %d: %s %s measured %d times, want %d", seed, round, s.name, cp, got, want)
					}
				}
			}
			if round == 1 {
				firsts[js[0].s.name+" "+js[0].c.String()] = true
			}
			// A cell's measurements are together within the round.
			seen := map[*cellPlan]bool{}
			for i, j := range js {
				if i > 0 && js[i-1].c != j.c && seen[j.c] {
					t.Fatalf("seed %d round %d: %s measured apart", seed, round, j.c)
				}
				seen[j.c] = true
			}
		}
	}
	if len(firsts) < 2 {
		t.Errorf("8 seeds start round 1 with the same measurement: %v", firsts)
	}
	// After the rounds: the idle cell and the herd, every configuration
	// and mode once.
	last := map[kind]int{}
	for _, j := range p.lastJobs() {
		last[j.c.kind]++
		if j.round != 1 {
			t.Errorf("%s %s in round %d, want 1", j.c, j.s.name, j.round)
		}
	}
	httpIdle := httpIdleCell(p)
	if httpIdle == nil || httpIdle.conns != 18000 || len(httpIdle.srvs) != 1 || !has(httpIdle, "net") {
		t.Fatalf("net/http idle cell %+v: want 18000 connections, one sample of net (the runtime's rows are off)", httpIdle)
	}
	if last[kindIdle] != len(idle.srvs)+len(httpIdle.srvs) || last[kindHerd] != 5 || last[kindLoad] != 0 {
		t.Errorf("after the rounds %v: want the idle cells' %d and the herd's 5", last, len(idle.srvs)+len(httpIdle.srvs))
	}
}

// TestProfileRows: the default run, with the patched toolchain (a stub),
// has rt-none and rt-profile in every cell but the herd's and the echo
// idle cell's: pinned and unpinned echo at 1 and 50 connections, net/http
// at 1 and 50 (on cmd/httpserver built with the patched toolchain), the
// quota cell, every rate of the open-loop sweep, the blocked neighbour
// (with -delay) and the net/http idle cell beside net; the profile's row
// runs under GODEBUG=rtProfile and rt-none under none. An echo server
// never calls Read(nil), so the echo idle cell has no rt- row.
func TestProfileRows(t *testing.T) {
	stubPatchedToolchain(t)
	p, _ := testPlan(t, "-pin", "on")
	var judged []string
	for _, cp := range p.cells {
		names := map[string]server{}
		for _, s := range cp.srvs {
			names[s.name] = s
		}
		switch {
		case cp.kind == kindHerd:
			continue
		case cp.kind == kindIdle && !cp.http():
			for n := range names {
				if strings.HasPrefix(n, "rt-") {
					t.Errorf("%s: has %s", cp.short(), n)
				}
			}
			continue
		}
		judged = append(judged, cp.short())
		none, okNone := names["rt-none"]
		prof, okProf := names[profileCfg]
		if _, okNet := names["net"]; !okNone || !okProf || !okNet {
			t.Errorf("%s: rt-none %v, %s %v, net %v; want all three", cp.short(), okNone, profileCfg, okProf, okNet)
			continue
		}
		if len(none.env) != 0 || strings.Join(prof.env, " ") != "GODEBUG="+rtProfile {
			t.Errorf("%s: rt-none's environment %q, %s's %q", cp.short(), none.env, profileCfg, prof.env)
		}
		if cp.http() {
			if b := httpBin(prof); b != "httpserver-rt" {
				t.Errorf("%s: %s runs %s, want httpserver-rt (the patched toolchain's)", cp.short(), profileCfg, b)
			}
		} else if prof.bin != "echoserver-rt" {
			t.Errorf("%s: %s runs %s, want echoserver-rt", cp.short(), profileCfg, prof.bin)
		}
		if cp.blocked > 0 && !strings.HasSuffix(strings.Join(prof.args, " "), " -delay 2ms") {
			t.Errorf("%s: %s's flags %q, want -delay 2ms", cp.short(), profileCfg, prof.args)
		}
	}
	want := []string{"echo, 1 conn", "echo, 50 conns", "echo, 1 conn, unpinned", "echo, 50 conns, unpinned", "http, 1 conn", "http, 50 conns",
		"blocked neighbour, unpinned", "echo, 1 conn, quota 0.5", "open loop 2000/s", "open loop 10000/s", "idle http, 18000 conns"}
	for _, w := range want {
		if !slices.Contains(judged, w) {
			t.Errorf("the default plan has no cell %q with the profile's rows: %q", w, judged)
		}
	}
	if sw := sweepOf(p); sw == nil || !slices.ContainsFunc(sw.srvs, isProfileRow) {
		t.Errorf("the sweep's configurations lack the profile's rows")
	}
}

// TestDefaultRunTime: the default run's plan, with the runtime's rows (a
// stub stands for the patched toolchain), takes no more than runBudget by
// its estimate, rounds × (warm-up + window + a server's start) and the
// idle cell's, the herd's and the calibrations' costs; -full keeps the
// whole matrix and takes longer.
func TestDefaultRunTime(t *testing.T) {
	stubPatchedToolchain(t)
	p, srvs := testPlan(t, "-pin", "on")
	if !slices.ContainsFunc(srvs, func(s server) bool { return s.name == "rt-profile" }) || len(srvs) != 7 {
		t.Fatalf("default configurations %v: want five and the runtime's two rows", srvs)
	}
	d := p.duration()
	t.Logf("the default run's plan: %d cells, about %v", len(p.cells), d)
	if d > runBudget {
		t.Errorf("the default run's plan takes about %v, over the budget of %v", d, runBudget)
	}
	full, fullSrvs := testPlan(t, "-pin", "on", "-full")
	for _, n := range append(slices.Clone(fullDefaults.configs), fullDefaults.rtConfigs...) {
		if !slices.ContainsFunc(fullSrvs, func(s server) bool { return s.name == n }) {
			t.Errorf("-full lacks %s", n)
		}
	}
	if full.find(cell{conns: 1000, size: 4096}) == nil || full.duration() <= d {
		t.Errorf("-full: no 1000-conn 4096 B cell, or about %v, not longer than the default run's %v", full.duration(), d)
	}
}

// TestPlanDuration: the estimate is the plan's jobs, each its warm-up,
// window and startCost, the idle and herd costs, and two calibrations.
func TestPlanDuration(t *testing.T) {
	srvs := mustServers(t, "net", "auto")
	load := &cellPlan{cell: cell{conns: 1, size: 64}, srvs: srvs, rounds: 3, warm: true, warmup: time.Second, duration: 2 * time.Second}
	idle := &cellPlan{cell: cell{kind: kindIdle, conns: 10000, size: 64}, srvs: srvs, rounds: 1}
	p := &plan{cells: append([]*cellPlan{load, idle}, herdCells(false)...)}
	want := 2*calibCost + (2+2*3)*(3*time.Second+startCost) + 2*(idleCost+10000*idleConnCost) +
		2*(herdCost+2*5000*herdInterval) + 3*(herdCost+2*1000*herdInterval)
	if got := p.duration(); got != want {
		t.Errorf("duration %v, want %v", got, want)
	}
}

// stubPatchedToolchain makes the runtime's rows available without
// building anything: a go that fails stands for the patched toolchain.
func stubPatchedToolchain(t *testing.T) {
	t.Helper()
	goroot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(goroot, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(goroot, "bin", "go"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGEPOLL_GOROOT", goroot)
}

// TestHelpTellsTheDefaults: -h states the defaults the code sets, for the
// default run and -full.
func TestHelpTellsTheDefaults(t *testing.T) {
	var help bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &help); err != flag.ErrHelp {
		t.Fatalf("-h: %v", err)
	}
	d, f := defaults, fullDefaults
	for _, w := range []string{
		"(default " + both(d.rounds, f.rounds) + ")",
		"(default " + both(d.duration, f.duration) + ")",
		"(default " + both(d.warmup, f.warmup) + ")",
		"(default " + both(d.sweepRounds, f.sweepRounds) + ")",
		"(default " + both(d.quotaRounds, f.quotaRounds) + ")",
		"(default " + both(d.quotaDuration, f.quotaDuration) + ")",
		"(default " + both(d.conns, f.conns) + ")",
		strings.Join(d.configs, ","),
	} {
		if !strings.Contains(help.String(), w) {
			t.Errorf("-h lacks %q:\n%s", w, help.String())
		}
	}
	for _, x := range []struct {
		args []string
		want runDefaults
	}{{nil, d}, {[]string{"-full"}, f}} {
		o, err := parseFlags(append([]string{"-runtime", "off"}, x.args...), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		w := x.want
		if o.rounds != w.rounds || o.duration != w.duration || o.warmup != w.warmup || o.sweepRounds != w.sweepRounds ||
			o.quotaRounds != w.quotaRounds || o.quotaDuration != w.quotaDuration || !slices.Equal(o.configs, w.configs) {
			t.Errorf("%q: rounds %d, %v after %v, sweep %d, quota %d of %v, configs %v; the help says %+v", x.args,
				o.rounds, o.duration, o.warmup, o.sweepRounds, o.quotaRounds, o.quotaDuration, o.configs, w)
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
	err := run([]string{"-out", out, "-configs", "net,broken", "-conns", "1", "-herd=false", "-sweep=false", "-quota", "0", "-unpinned=false", "-neighbour=false",
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
		{"-configs net,ondemand -http ondemand", `"ondemand" does not serve net/http`},
		{"-configs net,ondemand-net -http ondemand-net", `"ondemand-net" does not serve net/http`},
		{"-configs net,ondemand-timeout -http ondemand-timeout", `"ondemand-timeout" does not serve net/http`},
		{"-configs net,auto-timeout -http auto-timeout", `"auto-timeout" does not serve net/http`},
		{"-configs net -http et", `"et" is not among -configs`},
		{"-runtime maybe", "-runtime"},
		{"-idle -3", "-idle"},
		{"-quota -1", "-quota"},
		{"-quota NaN", "-quota"},
		{"-quota-rounds -1", "-quota-rounds"},
		{"-quota-duration -1s", "-quota-duration"},
		{"-render out/x -rounds 2", "-render measures nothing: not with -rounds"},
		{"-render out/x -idle 0 -configs net", "not with -configs, -idle"},
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
// with its GODEBUG, and the summary has their lines; rt-zeroread's echo
// server starts (its check that a zero-byte Read waits passes under
// GODEBUG=netpollzeroread=1) and echoes. It needs the toolchain
// runtime_patch/build.sh builds (.ci/run builds it before the tests).
func TestRuntimeRows(t *testing.T) {
	out, stdout, n := runRuntimeRows(t, "net,rt-none,rt-shortread,rt-zeroread", "net,rt-shortread", 0)
	for _, k := range []string{"net   ", "rt-none  patched none", "rt-shortread  patched netpollshortread:1", "rt-shortread http patched netpollshortread:1", "net http  ",
		"rt-zeroread  patched netpollzeroread:1"} {
		if n[k] != 2 {
			t.Errorf("%q: %d results, want 2 (all: %v)", k, n[k], n)
		}
	}
	checkReport(t, out, stdout, []string{"net", "rt-none", "rt-shortread", "rt-zeroread"}, []string{"echo, 1 conn, 64 B", "net/http plaintext, keep-alive, 1 conn"})
}

// TestProfileRun runs the profile's rows end to end on the patched
// toolchain: rt-none and rt-profile serve echo and net/http (httpserver
// built with the patched toolchain, rt-profile under GODEBUG=rtProfile,
// whose httpidlezeroread a toolchain without that patch ignores); the
// net/http idle cell holds net's, rt-none's and rt-profile's connections,
// each server telling its figures; the echo idle cell has net alone; and
// the summary has the profile's block.
func TestProfileRun(t *testing.T) {
	rows := "net,rt-none," + profileCfg
	out, stdout, n := runRuntimeRows(t, rows, rows, 20)
	profile := "patched " + strings.ReplaceAll(rtProfile, "=", ":")
	for _, k := range []string{"rt-none  patched none", "rt-none http patched none", profileCfg + "  " + profile, profileCfg + " http " + profile} {
		if n[k] != 2 {
			t.Errorf("%q: %d results, want 2 (all: %v)", k, n[k], n)
		}
	}
	idle, err := readResults(filepath.Join(out, idleFile))
	if err != nil {
		t.Fatal(err)
	}
	var echoIdle, httpIdle []string
	for _, r := range idle {
		if r.labels["proto"] != "http" {
			echoIdle = append(echoIdle, r.labels["cfg"])
			continue
		}
		httpIdle = append(httpIdle, r.labels["cfg"])
		if r.metrics["rss-bytes"] <= 0 || r.metrics["goroutines/conn"] < 1 {
			t.Errorf("net/http idle %s: RSS %v, goroutines/conn %v; want the RSS read and the server's figures told",
				r.labels["cfg"], r.metrics["rss-bytes"], r.metrics["goroutines/conn"])
		}
	}
	if slices.Sort(httpIdle); !slices.Equal(httpIdle, []string{"net", "rt-none", profileCfg}) || !slices.Equal(echoIdle, []string{"net"}) {
		t.Errorf("idle.txt: net/http %v, echo %v; want net, rt-none and %s over net/http, net alone over echo", httpIdle, echoIdle, profileCfg)
	}
	for _, w := range []string{"The runtime's profile (rt-profile) against rt-none and against package net", "idle http, 20 conns", "Target"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("the summary lacks %q:\n%s", w, stdout)
		}
	}
}

// runRuntimeRows runs netpollbench on the patched toolchain (skipping
// the test without it, or with -short) over configs, http among them
// serving net/http, echo at 1 connection pinned, and idle connections
// (0: none), 2 rounds; every load measured has its req/s and no error. It
// returns the output directory, stdout and raw.txt's results counted by
// "cfg proto runtime godebug".
func runRuntimeRows(t *testing.T, configs, http string, idle int) (string, string, map[string]int) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds servers with the patched toolchain and runs processes; skipped with -short")
	}
	if patchedGoroot() == "" {
		testtool.Missing(t, "the patched toolchain (runtime_patch/build.sh)", fmt.Errorf("no %s/bin/go", patchedGorootPath()))
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-out", out, "-configs", configs, "-http", http, "-conns", "1", "-quota", "0", "-unpinned=false", "-neighbour=false",
		"-herd=false", "-sweep=false", "-idle", strconv.Itoa(idle), "-rounds", "2", "-duration", "300ms", "-warmup", "100ms"}, &stdout, &stderr)
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
	return out, stdout.String(), n
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
	bins, _, _, err := build(t.Context(), root, t.TempDir(), srvs, false, false, "", beforeCommit{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{bins: bins, stderr: io.Discard}
	srv, err := r.start(t.Context(), false, nil, bins["echoserver"], srvs[0].args, []string{"GODEBUG=netpollshortread=1"}, time.Minute)
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
	args := []string{"-configs", "net", "-conns", "1", "-herd=false", "-sweep=false", "-http", "none", "-idle", "0", "-quota", "0", "-unpinned=false", "-neighbour=false",
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

// TestPlanPinOff: a run that cannot pin (-pin off, one CPU, no taskset)
// measures every cell unpinned, once: no cell twice, the quota cell and
// the sweep unpinned too, and their labels say so.
func TestPlanPinOff(t *testing.T) {
	p, _ := testPlan(t, "-runtime", "off", "-pin", "off")
	seen := map[string]bool{}
	for _, cp := range p.cells {
		if !cp.unpinned || !strings.Contains(cp.String(), "pin=off") {
			t.Errorf("cell %s (%s) is not unpinned", cp.short(), cp)
		}
		if seen[cp.String()] {
			t.Errorf("cell %s twice", cp)
		}
		seen[cp.String()] = true
	}
	for _, want := range []string{"conns=1/size=64/pin=off", "conns=1/size=64/pin=off/quota=0.5", "conns=1/size=64/pin=off/rate=2000", "proto=http/conns=50/pin=off"} {
		if !seen[want] {
			t.Errorf("no cell %s among %v", want, seen)
		}
	}
}

// TestBufferFreeConfigs: the echo server's buffer-free configurations
// (waitread, ondemand, ondemand-go, ondemand-inline, ondemand-net) and
// those with an idle timeout (ondemand-timeout, auto-timeout) pass their
// flags, join the echo cells
// and the idle experiment, and stay out of net/http's cells (cmd/httpserver
// has none of their flags); ondemand alone joins the sweep (its cost at a
// light load: a goroutine started per request). The idle timeout outlives
// the idle experiment's servers, so that it never closes a connection
// there.
func TestBufferFreeConfigs(t *testing.T) {
	want := map[string]string{
		"waitread":         "-impl netpoll -spin auto -waitread",
		"ondemand":         "-impl netpoll -spin auto -ondemand",
		"ondemand-go":      "-impl netpoll -spin auto -ondemand -dispatch go",
		"ondemand-inline":  "-impl netpoll -spin auto -ondemand -wait inline",
		"ondemand-net":     "-impl net -ondemand",
		"ondemand-timeout": "-impl netpoll -spin auto -ondemand -idletimeout 10m",
		"auto-timeout":     "-impl netpoll -spin auto -idletimeout 10m",
	}
	if d, err := time.ParseDuration(idleTimeout); err != nil || d <= idleLifetime {
		t.Errorf("idleTimeout %s (%v): want a duration longer than idleLifetime, %v", idleTimeout, err, idleLifetime)
	}
	names := []string{"net", "auto", "waitread", "ondemand", "ondemand-go", "ondemand-inline", "ondemand-net", "ondemand-timeout", "auto-timeout"}
	p, srvs := testPlan(t, "-runtime", "off", "-pin", "on", "-configs", strings.Join(names, ","))
	for _, s := range srvs {
		if w, ok := want[s.name]; ok && (s.bin != "echoserver" || strings.Join(s.args, " ") != w || !strings.HasPrefix(s.label, "cfg="+s.name+"/")) {
			t.Errorf("%s: %s %q, label %q; want echoserver %s", s.name, s.bin, s.args, s.label, w)
		}
	}
	has := func(ss []server, n string) bool {
		return slices.ContainsFunc(ss, func(s server) bool { return s.name == n })
	}
	for n := range want {
		for _, c := range []cell{{conns: 1, size: 64}, {conns: 50, size: 64}, {conns: 1, size: 64, unpinned: true}} {
			if cp := p.find(c); cp == nil || !has(cp.srvs, n) {
				t.Errorf("%s is not in the cell %s", n, c.short())
			}
		}
		if !has(idleCell(p).srvs, n) {
			t.Errorf("%s is not in the idle experiment", n)
		}
		if slices.Contains(httpConfigs, n) {
			t.Errorf("%s is among net/http's configurations", n)
		}
		if swept := slices.Contains(sweepConfigs, n); swept != (n == "ondemand") {
			t.Errorf("%s in the sweep: %v, want %v", n, swept, n == "ondemand")
		}
	}
	for _, cp := range p.cells {
		for n := range want {
			if (cp.http() || (cp.rate > 0 && n != "ondemand")) && has(cp.srvs, n) {
				t.Errorf("%s is in the cell %s", n, cp.short())
			}
		}
	}
	swept := false
	for _, cp := range p.cells {
		swept = swept || (cp.rate > 0 && has(cp.srvs, "ondemand"))
	}
	if !swept {
		t.Error("ondemand is in no cell of the sweep")
	}
}

// TestPalette: every configuration has a colour of its own, and so have
// rt-zeroread among the runtime's rows and before (the others take
// plotutil's).
func TestPalette(t *testing.T) {
	seen := map[string]string{}
	rt := keep(runtimeServers, func(s server) bool { return s.name == "rt-zeroread" })
	if len(rt) != 1 {
		t.Fatalf("no rt-zeroread among the runtime's rows")
	}
	before, err := pickServers([]string{"before"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(append(slices.Clone(servers), rt...), before...) {
		c, ok := palette[s.name]
		if !ok {
			t.Errorf("%s has no colour in the palette", s.name)
			continue
		}
		r, g, b, _ := c.RGBA()
		k := fmt.Sprint(r, g, b)
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s have the same colour", s.name, other)
		}
		seen[k] = s.name
	}
}

// TestZeroReadRow: rt-zeroread is package net's echoserver -zeroread on
// the patched toolchain under GODEBUG=netpollzeroread=1; it is in -full's
// runtime rows and not the default run's; named, it joins the echo cells
// and the idle experiment (rt-none does not: its memory is net's), and
// stays out of net/http's cells, the sweep and the quota cell. A stub
// toolchain stands for the patched one: nothing is built.
func TestZeroReadRow(t *testing.T) {
	stubPatchedToolchain(t)
	srvs, err := pickServers([]string{"rt-zeroread"})
	if err != nil {
		t.Fatal(err)
	}
	s := srvs[0]
	if s.bin != "echoserver-rt" || strings.Join(s.args, " ") != "-impl net -zeroread" || strings.Join(s.env, " ") != "GODEBUG=netpollzeroread=1" ||
		s.label != "cfg=rt-zeroread/impl=net/runtime=patched/godebug=netpollzeroread:1/zeroread=on" {
		t.Errorf("rt-zeroread: %s %q, env %q, label %q", s.bin, s.args, s.env, s.label)
	}
	for _, args := range [][]string{nil, {"-full"}} {
		o, err := parseFlags(args, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := slices.Contains(o.configs, "rt-zeroread"), len(args) > 0; got != want {
			t.Errorf("parseFlags(%q): rt-zeroread among %v: %v, want %v", args, o.configs, got, want)
		}
		if slices.Contains(o.http, "rt-zeroread") {
			t.Errorf("parseFlags(%q): rt-zeroread among net/http's %v", args, o.http)
		}
	}
	if _, err := parseFlags([]string{"-configs", "net,rt-zeroread", "-http", "rt-zeroread"}, &bytes.Buffer{}); err == nil {
		t.Error("-http rt-zeroread accepted")
	}
	p, _ := testPlan(t, "-pin", "on", "-configs", "net,rt-none,rt-zeroread")
	has := func(ss []server, n string) bool {
		return slices.ContainsFunc(ss, func(s server) bool { return s.name == n })
	}
	for _, c := range []cell{{conns: 1, size: 64}, {conns: 50, size: 64}} {
		if cp := p.find(c); cp == nil || !has(cp.srvs, "rt-zeroread") {
			t.Errorf("rt-zeroread is not in the cell %s", c.short())
		}
	}
	if idle := idleCell(p).srvs; !has(idle, "rt-zeroread") || has(idle, "rt-none") || !has(idle, "net") {
		t.Errorf("idle experiment: %v, want net and rt-zeroread, not rt-none", idle)
	}
	for _, cp := range p.cells {
		if (cp.http() || cp.rate > 0 || cp.quota > 0) && has(cp.srvs, "rt-zeroread") {
			t.Errorf("rt-zeroread is in the cell %s", cp.short())
		}
	}
}

// testPlan is the plan netpollbench makes of args, with cgroups available,
// and its servers.
func testPlan(t *testing.T, args ...string) (*plan, []server) {
	t.Helper()
	o, err := parseFlags(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	srvs, err := pickServers(o.configs)
	if err != nil {
		t.Fatal(err)
	}
	return makePlan(o, srvs, nil), srvs
}

// TestWriteDataInterrupted: what an interrupted run keeps (writeData,
// without a closing calibration) is its table, which reads back whole,
// and its benchmark lines, raw.txt without calib-end lines.
func TestWriteDataInterrupted(t *testing.T) {
	dir := t.TempDir()
	tb := syntheticTable(t)
	tb.calEnd = calibration{}
	tb.results = tb.results[:len(tb.results)/2]
	if err := writeData(dir, tb); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, rawFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("calib-end-")) || !bytes.Contains(raw, []byte("\ncalib-syscall-ns: ")) {
		t.Errorf("raw.txt of an interrupted run:\n%s", raw)
	}
	back, err := readTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.results) != len(tb.results) || len(back.plan.cells) != len(tb.plan.cells) {
		t.Errorf("read back %d results of %d cells, want %d of %d", len(back.results), len(back.plan.cells), len(tb.results), len(tb.plan.cells))
	}
	rs, err := readResults(filepath.Join(dir, rawFile))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, r := range tb.results {
		if r.cell.file == rawFile && r.round > 0 {
			want++
		}
	}
	if len(rs) != want {
		t.Errorf("raw.txt has %d lines, want %d", len(rs), want)
	}
}
