package main

import (
	"archive/tar"
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// TestBeforeConfigs: -before adds the configuration before unless
// -configs names a before configuration; before is the default's flags on
// the before binary, before-NAME NAME's; before joins every closed echo
// cell (pinned and unpinned, each -conns) and the idle experiment, and no
// net/http, quota, open-loop or blocked-neighbour cell.
func TestBeforeConfigs(t *testing.T) {
	o, err := parseFlags([]string{"-runtime", "off", "-before", "HEAD"}, &bytes.Buffer{})
	if want := append(slices.Clone(defaults.configs), "before"); err != nil || !slices.Equal(o.configs, want) || o.before != "HEAD" {
		t.Errorf("-before HEAD: configs %v, before %q, %v; want %v", o.configs, o.before, err, want)
	}
	o, err = parseFlags([]string{"-runtime", "off", "-before", "HEAD", "-configs", "net,ondemand,before-ondemand"}, &bytes.Buffer{})
	if want := []string{"net", "ondemand", "before-ondemand"}; err != nil || !slices.Equal(o.configs, want) {
		t.Errorf("-configs net,ondemand,before-ondemand: configs %v, %v; want %v", o.configs, err, want)
	}
	srvs, err := pickServers([]string{"auto", "before", "ondemand", "before-ondemand"})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		s, base server
		label   string
	}{
		{srvs[1], srvs[0], "cfg=before/impl=netpoll/mode=et/spin=auto"},
		{srvs[3], srvs[2], "cfg=before-ondemand/impl=netpoll/mode=et/spin=auto/ondemand=on"},
	} {
		if x.s.bin != beforeBin || !slices.Equal(x.s.args, x.base.args) || x.s.label != x.label || beforeName(x.base.name) != x.s.name {
			t.Errorf("%s: %s %q, label %q; want %s %q, label %q", x.s.name, x.s.bin, x.s.args, x.s.label, beforeBin, x.base.args, x.label)
		}
	}

	p, _ := testPlan(t, "-runtime", "off", "-pin", "on", "-before", "HEAD", "-configs", "net,auto")
	has := func(ss []server) bool {
		return slices.ContainsFunc(ss, func(s server) bool { return s.name == "before" })
	}
	echo, open := 0, 0
	for _, cp := range p.cells {
		closedEcho := cp.kind == kindLoad && !cp.http() && cp.rate == 0 && cp.quota == 0 && cp.blocked == 0
		openLoop := cp.kind == kindLoad && cp.rate > 0
		if cp.kind == kindIdle || cp.kind == kindHerd {
			continue
		}
		if has(cp.srvs) != (closedEcho || openLoop) {
			t.Errorf("before in %s: %v, want %v", cp.short(), has(cp.srvs), closedEcho || openLoop)
		}
		if closedEcho {
			echo++
		}
		if openLoop {
			open++
		}
	}
	if echo != 4 {
		t.Errorf("%d closed echo cells, want 4 (1 and 50 conns, pinned and unpinned)", echo)
	}
	if open != 2 {
		t.Errorf("%d open-loop cells, want 2 (the sweep's rates, 2000 and 10000)", open)
	}
	// A before configuration joins the sweep when its counterpart does.
	for name, want := range map[string]bool{"before": true, "before-ondemand": true, "before-waitread": false, "waitread": false} {
		if swept(name) != want {
			t.Errorf("swept(%q) = %v, want %v", name, swept(name), want)
		}
	}
	if idle := idleCell(p); idle == nil || !has(idle.srvs) {
		t.Errorf("before is not in the idle experiment: %v", idle)
	}
	neighbour := slices.ContainsFunc(p.cells, func(cp *cellPlan) bool { return cp.blocked > 0 })
	if p.find(cell{conns: 1, size: 64, quota: 0.5}) == nil || sweepOf(p) == nil || len(o.http) == 0 || !neighbour {
		t.Errorf("the plan lacks the quota cell, the sweep, net/http or the blocked neighbour: before's absence from them proves nothing")
	}
}

// TestBeforeBadFlags: before configurations without -before, or of what
// echoserver does not serve, are errors; so is before in net/http's cells.
func TestBeforeBadFlags(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"-configs net,before", "need -before REF"},
		{"-configs net,before-ondemand", "need -before REF"},
		{"-before HEAD -configs net,before-gnet", `unknown configuration "before-gnet"`},
		{"-before HEAD -configs net,before-rt-none", `unknown configuration "before-rt-none"`},
		{"-before HEAD -configs net,before-auto", `unknown configuration "before-auto"`},
		{"-before HEAD -configs net,before -http before", `"before" does not serve net/http`},
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

// TestBeforeVerdict judges a synthetic run of net, auto and before over 6
// rounds on a drifting host: at 50 connections auto spends 0.85x before's
// CPU per request (wins), at 1 connection the same (level); req/s level
// in both. The summary's verdict says so in one line, the before block has
// a row per cell with both ratios, and the idle experiment's pair is under
// it.
func TestBeforeVerdict(t *testing.T) {
	srvs, err := pickServers([]string{"net", "auto", "before"})
	if err != nil {
		t.Fatal(err)
	}
	one := &cellPlan{cell: cell{conns: 1, size: 64}, srvs: srvs, rounds: 6}
	fifty := &cellPlan{cell: cell{conns: 50, size: 64}, srvs: srvs, rounds: 6}
	idle := &cellPlan{cell: cell{kind: kindIdle, conns: 10000, size: 64}, srvs: mustServers(t, "ondemand", "before-ondemand"), rounds: 1}
	tb := &table{plan: &plan{cells: []*cellPlan{one, fifty, idle}}}
	rng := rand.New(rand.NewPCG(3, 3))
	noise := func() float64 { return 1 + 0.005*rng.NormFloat64() }
	for round := 1; round <= 6; round++ {
		drift := 0.75 + 0.5*rng.Float64()
		for _, cp := range []*cellPlan{one, fifty} {
			for _, cfg := range []string{"net", "auto", "before"} {
				cpu := 8e3 / drift * noise()
				if cfg == "auto" && cp == fifty {
					cpu *= 0.85
				}
				nsop := 10e3 / (drift * noise())
				addResult(tb, cp, cfg, round, map[string]float64{"ns/op": nsop, "server-cpu-ns/op": cpu, "client-cpu-ns/op": nsop * 0.5})
			}
		}
	}
	addResult(tb, idle, "ondemand", 1, map[string]float64{"rss-bytes/conn": 0.40 * 1024})
	addResult(tb, idle, "before-ondemand", 1, map[string]float64{"rss-bytes/conn": 0.47 * 1024})
	tb.calStart = calibration{cpu: "Test CPU", ncpu: 2, kernel: "6.18", toolVer: "go1.26.8", syscallNs: 150, sameCoreUs: 6, crossCoreUs: 40}
	tb.calEnd = tb.calStart

	text := writeSummary(tb, summaryBlocks(tb, judge(tb, 2)), nil, nil)
	if strings.Contains(text, "before (") || strings.Contains(text, "Against the code before") {
		t.Errorf("without a -before commit the summary speaks of it:\n%s", text)
	}
	tb.before = beforeCommit{ref: "HEAD~1", rev: "0123456789abcdef0123456789abcdef01234567"}
	vs := judge(tb, 2)
	for _, x := range []struct {
		v         cellVerdict
		cpu, rate string
	}{{vs[0], verdictLevel, verdictLevel}, {vs[1], verdictWins, verdictLevel}} {
		p := x.v.row("auto").vsBefore
		if p == nil || p.before != "before" || p.cpu.verdict(false) != x.cpu || p.rate.verdict(true) != x.rate {
			t.Fatalf("%s: auto against before %+v; want CPU/req %s, req/s %s", x.v.cp.short(), p, x.cpu, x.rate)
		}
		if x.v.row("before").vsBefore != nil || x.v.row("net").vsBefore != nil {
			t.Errorf("%s: before or net paired with a before configuration", x.v.cp.short())
		}
	}
	text = writeSummary(tb, summaryBlocks(tb, vs), nil, nil)
	t.Log("\n" + text)
	for _, want := range []string{
		spaced(`Against the code before \(HEAD~1 \(0123456789ab\), -before\), the default's CPU per request wins in 1 \(echo, 50 conns\), level in 1 \(echo, 1 conn\)\.`),
		`(?m)^Against the code before: .* built from HEAD~1 \(0123456789ab\)$`,
		`(?m)^  auto against before, CPU per request: wins in 1 \(echo, 50 conns\), level in 1 \(echo, 1 conn\)\.$`,
		`(?m)^  echo, 1 conn +auto +(1\.0\d|0\.9\d)x \[[\d.]+,[\d.]+\] level +(1\.0\d|0\.9\d)x \[[\d.]+,[\d.]+\] level$`,
		`(?m)^  echo, 50 conns +auto +0\.8\dx \[[\d.]+,[\d.]+\] wins +(1\.0\d|0\.9\d)x \[[\d.]+,[\d.]+\] level$`,
		`Idle, 10000 conns: ondemand 0\.40 KiB/conn as-is against before-ondemand 0\.47: 0\.85x \(1 sample\) wins\.`,
		`(?m)^  before +6 +\d+ `, // a row of each cell's detail, as any configuration
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("summary lacks %s", want)
		}
	}
	if w := wideLines(text, summaryWidth); len(w) > 0 {
		t.Errorf("lines over %d columns: %q", summaryWidth, w)
	}
}

// TestBeforeOneRound: in a run of one round (-rounds 1) an echo cell and
// an open-loop cell still pair CPU per request and req/s against before,
// one sample each, and only the idle experiment pairs memory.
func TestBeforeOneRound(t *testing.T) {
	srvs := mustServers(t, "net", "auto", "before")
	echo := &cellPlan{cell: cell{conns: 1, size: 64}, srvs: srvs, rounds: 1}
	open := &cellPlan{cell: cell{conns: 1, size: 64, rate: 2000}, srvs: srvs, rounds: 1}
	tb := &table{plan: &plan{cells: []*cellPlan{echo, open}}}
	for _, cp := range []*cellPlan{echo, open} {
		for cfg, cpu := range map[string]float64{"net": 8e3, "auto": 7.2e3, "before": 8e3} {
			addResult(tb, cp, cfg, 1, map[string]float64{"ns/op": 10e3, "server-cpu-ns/op": cpu, "client-cpu-ns/op": 5e3})
		}
	}
	tb.calStart = calibration{cpu: "Test CPU", ncpu: 2, kernel: "6.18", toolVer: "go1.26.8", syscallNs: 150, sameCoreUs: 6, crossCoreUs: 40}
	tb.calEnd = tb.calStart
	tb.before = beforeCommit{ref: "HEAD~1", rev: "0123456789abcdef0123456789abcdef01234567"}
	vs := judge(tb, 2)
	for _, v := range vs {
		p := v.row("auto").vsBefore
		if p == nil || p.mem != nil || p.cpu.n != 1 || !p.cpu.oneSample || math.Abs(p.cpu.geo-0.9) > 1e-9 {
			t.Fatalf("%s: auto against before %+v; want CPU/req 0.90x from one sample, no memory", v.cp.short(), p)
		}
	}
	text := writeSummary(tb, summaryBlocks(tb, vs), nil, nil)
	if strings.Contains(text, "KiB/conn as-is against") {
		t.Errorf("a one-round echo cell reads as memory:\n%s", text)
	}
	for _, want := range []string{
		`(?m)^  echo, 1 conn +auto +0\.90x \(1 sample\)`,
		`(?m)^  open loop 2000/s +auto +0\.90x \(1 sample\)`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("summary lacks %s:\n%s", want, text)
		}
	}
}

// spaced lets the spaces of a pattern match where the summary wraps its
// lines.
func spaced(pattern string) string { return strings.ReplaceAll(pattern, " ", `\s+`) }

// gitHead skips (fails under CI) without git, and returns the module
// root's HEAD commit, failing if the root is not a repository.
func gitHead(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		testtool.Missing(t, "git", err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("the module root is no git repository with a HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestBefore runs the default beside itself built from HEAD: before has a
// result in each round, labelled with HEAD's commit, the summary has the
// comparison, and the temporary tree is gone.
func TestBefore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds servers and runs processes; skipped with -short")
	}
	head := gitHead(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-out", out, "-configs", "auto", "-before", "HEAD", "-conns", "1", "-herd=false", "-sweep=false", "-quota", "0",
		"-unpinned=false", "-neighbour=false", "-http", "none", "-idle", "0", "-runtime", "off", "-rounds", "2", "-duration", "300ms", "-warmup", "100ms"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	rs, err := readResults(filepath.Join(out, rawFile))
	if err != nil {
		t.Fatal(err)
	}
	var rounds []int
	for _, r := range rs {
		if r.labels["cfg"] != "before" {
			continue
		}
		rounds = append(rounds, r.round)
		if r.labels["rev"] != head[:beforeRevLen] || r.labels["spin"] != "auto" || r.metrics["ns/op"] <= 0 || r.metrics["errors"] != 0 {
			t.Errorf("before: labels %v, metrics %v; want rev=%s, spin=auto, requests and no errors", r.labels, r.metrics, head[:beforeRevLen])
		}
	}
	if slices.Sort(rounds); !slices.Equal(rounds, []int{1, 2}) {
		t.Errorf("before's rounds %v, want 1 and 2", rounds)
	}
	sum := stdout.String()
	for _, want := range []string{
		spaced(`Against the code before \(HEAD \(` + head[:beforeRevLen] + `\), -before\), the default's CPU per request (wins|level|loses|unresolved) in 1 \(echo, 1 conn\)\.`),
		`(?m)^  echo, 1 conn +auto +\d+\.\d\dx \[[^\]]+\] (wins|level|loses|unresolved) +\d+\.\d\dx \[[^\]]+\] (wins|level|loses|unresolved)$`,
	} {
		if !regexp.MustCompile(want).MatchString(sum) {
			t.Errorf("summary lacks %s:\n%s", want, sum)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "bin", beforeBin)); err != nil {
		t.Errorf("no before binary: %v", err)
	}
	noTree(t, tmp)
}

// noTree fails if a temporary tree of buildBefore is left in dir.
func noTree(t *testing.T, dir string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "netpollbench-before-*"))
	if err != nil || len(left) > 0 {
		t.Errorf("temporary trees left behind: %v %v", left, err)
	}
}

// TestBeforeErrors: a name git does not know, a directory that is no
// repository, and a commit whose echoserver does not build are each an
// error that says which, before anything is measured (for the name,
// before the output directory is made), and the temporary tree is gone.
func TestBeforeErrors(t *testing.T) {
	gitHead(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	out := filepath.Join(t.TempDir(), "out")
	err := run([]string{"-out", out, "-configs", "auto", "-before", "no-such-commit", "-runtime", "off", "-herd=false", "-sweep=false",
		"-idle", "0", "-quota", "0", "-http", "none"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "-before no-such-commit: git: unknown revision") {
		t.Errorf("-before no-such-commit: %v, want -before no-such-commit: git: unknown revision", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("-before no-such-commit made the output directory (%v)", serr)
	}

	notRepo := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(notRepo))
	if _, err := resolveBefore(t.Context(), notRepo, "HEAD"); err == nil || !strings.Contains(err.Error(), "-before HEAD: git: not a git repository") {
		t.Errorf("a directory that is no repository: %v", err)
	}

	// A repository whose one commit's echoserver does not compile.
	repo := t.TempDir()
	files := map[string]string{
		"go.mod":                  "module github.com/edgepoll/edgepoll\n\ngo 1.26\n",
		"cmd/echoserver/main.go":  "package main\n\nfunc main() { notDefined() }\n",
		"cmd/echoserver/README":   "a file beside it\n",
		"netpoll/doc.go":          "package netpoll\n",
		"testdata/nested/x/y.txt": "deep\n",
	}
	for name, body := range files {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "broken"}} {
		if b, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", args, err, b)
		}
	}
	c, err := resolveBefore(t.Context(), repo, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	// The tree extracts whole, files where the commit has them.
	tree := t.TempDir()
	if err := extractTree(t.Context(), repo, c.rev, tree); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if b, err := os.ReadFile(filepath.Join(tree, name)); err != nil || string(b) != body {
			t.Errorf("extracted %s: %q, %v; want %q", name, b, err, body)
		}
	}
	err = buildBefore(t.Context(), repo, c, filepath.Join(t.TempDir(), beforeBin))
	if err == nil || !strings.HasPrefix(err.Error(), "-before HEAD ("+c.rev[:beforeRevLen]+"): building ./cmd/echoserver at that commit") ||
		!strings.Contains(err.Error(), "notDefined") {
		t.Errorf("a commit that does not build: %v", err)
	}
	noTree(t, tmp)
}

// TestUntarStaysInside: an archive entry that leaves the tree is refused.
func TestUntarStaysInside(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range []string{"ok.txt", "../escaped.txt"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte("x"))
	}
	tw.Close()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := untar(&b, dir); err == nil || !strings.Contains(err.Error(), "outside the tree") {
		t.Errorf("untar of ../escaped.txt: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped.txt")); !os.IsNotExist(err) {
		t.Errorf("escaped.txt was written outside the tree (%v)", err)
	}
}
