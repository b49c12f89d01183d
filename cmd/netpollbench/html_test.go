package main

import (
	"bytes"
	"context"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// sectionIDs are report.html's sections, in order.
var sectionIDs = []string{"calibration", "summary", "plots", "frontier", "herd", "tables"}

// TestHTML writes a report from plots drawn from small fixed results and
// renders it in headless Chromium: the DOM has every section, in order,
// the summary text and the plots inline; the page fetches nothing; the
// screenshot is not blank.
func TestHTML(t *testing.T) {
	dir := t.TempDir()
	r := fixedReport(t, dir)
	path := filepath.Join(dir, "report.html")
	if err := writeHTML(path, r); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, page)

	chromium := findChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dom, err := runChromium(ctx, t, chromium, "--dump-dom", "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatalf("parse the DOM: %v", err)
	}
	var ids []string
	svgs := 0
	text := map[string]string{} // section id -> its text
	elems := map[string]int{}   // "section element" and "section td.class" -> count
	var walk func(n *html.Node, section string)
	walk = func(n *html.Node, section string) {
		if n.Type == html.ElementNode {
			if id := attr(n, "id"); id != "" && slices.Contains(sectionIDs, id) {
				ids = append(ids, id)
				section = id
			}
			if n.Data == "svg" {
				svgs++
			}
			elems[section+" "+n.Data]++
			for _, class := range strings.Fields(attr(n, "class")) {
				elems[section+" "+n.Data+"."+class]++
			}
		}
		if n.Type == html.TextNode && section != "" {
			text[section] += n.Data
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, section)
		}
	}
	walk(doc, "")
	if !slices.Equal(ids, sectionIDs) {
		t.Errorf("sections %q, want %q", ids, sectionIDs)
	}
	// The summary is tables, not preformatted text: the verdict and the
	// three echo cells, the blocked neighbour and idle memory, verdict
	// words marked for colour, on demand's rows indented.
	if elems["summary table"] != 6 || elems["summary pre"] != 0 {
		t.Errorf("summary: %d tables and %d <pre>, want 6 tables and no <pre>", elems["summary table"], elems["summary pre"])
	}
	if n := elems["summary td.sub"]; n != 4 {
		t.Errorf("summary: %d indented cells, want 4 (ondemand's rows of the verdict: all its cells but the quota cell)", n)
	}
	for _, class := range []string{"td.wins", "td.loses", "td.level", "td.num"} {
		if elems["summary "+class] == 0 {
			t.Errorf("summary has no %s cell", class)
		}
	}
	if want := len(r.Plots) + len(r.Frontier); svgs != want {
		t.Errorf("%d inline <svg>, want %d", svgs, want)
	}
	for _, tt := range []struct{ section, want string }{
		{"summary", "Verdict: netpoll's default"},
		{"summary", "echo, 1 conn, quota 0.5"},
		{"summary", "Idle connections"},
		{"summary", "blocked neighbour, unpinned"},
		{"summary", "Against package net, serving on demand"},
		{"calibration", r.Machine[0]},
		{"herd", "seed <ctxsw>"},
		{"tables", "tables.txt"},
		{"plots", "latency-conns1-size64.svg"},
		{"frontier", "sweep-frontier.svg"},
	} {
		if !strings.Contains(text[tt.section], tt.want) {
			t.Errorf("section %s lacks %q:\n%s", tt.section, tt.want, text[tt.section])
		}
	}

	shot := filepath.Join(t.TempDir(), "report.png")
	if _, err := runChromium(ctx, t, chromium, "--screenshot="+shot, "--window-size=1200,3000", "--hide-scrollbars", "file://"+path); err != nil {
		t.Fatal(err)
	}
	checkNotBlank(t, shot)
}

// TestHTMLNotRun writes a report with nothing in it: every section is
// there and says it did not run.
func TestHTMLNotRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	if err := writeHTML(path, htmlReport{Plots: []string{filepath.Join(t.TempDir(), "gone.svg")}}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSelfContained(t, page)
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range sectionIDs {
		n := byID(doc, id)
		if n == nil {
			t.Errorf("no section %s", id)
			continue
		}
		want := "not run"
		if id == "plots" {
			want = "gone.svg: missing"
		}
		if got := textOf(n); !strings.Contains(got, want) {
			t.Errorf("section %s says %q, want %q", id, got, want)
		}
	}
}

// fixedReport draws plots into dir from fixed results, with 3 rounds of
// net and spin in one cell and a sweep of them at one rate and the closed
// loop, and returns a report of them and of fixed texts.
func fixedReport(t *testing.T, dir string) htmlReport {
	t.Helper()
	srvs, err := pickServers([]string{"net", "spin"})
	if err != nil {
		t.Fatal(err)
	}
	c := cell{conns: 1, size: 64}
	plots, err := drawPlots(dir, &cellPlan{cell: c, srvs: srvs, rounds: 3}, fakeResults([]string{"net", "spin"}, c, 3))
	if err != nil {
		t.Fatal(err)
	}
	var swept []result
	for _, rate := range []string{"2000", "closed"} {
		for _, r := range fakeResults([]string{"net", "spin"}, c, 3) {
			r.labels["rate"] = rate
			r.metrics[utilUnit] = r.metrics["server-cpu-ns/op"] / r.metrics["ns/op"]
			if rate == "2000" {
				r.metrics["ns/op"] = 500e3
			}
			swept = append(swept, r)
		}
	}
	frontier, err := drawSweep(dir, &sweep{srvs: srvs, rates: []float64{2000, 0}, rounds: 3, shape: c}, swept)
	if err != nil {
		t.Fatal(err)
	}
	tb := syntheticTable(t)
	if err := os.WriteFile(filepath.Join(dir, "tables.txt"), []byte("benchstat tables\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return htmlReport{
		Title:      "netpollbench <test> report",
		Machine:    []string{"syscall-ns: 118", "cross-core-wakeup-roundtrip-us: 16.77"},
		Warnings:   []string{"the host changed speed: syscall 118 ns before, 240 ns after"},
		Blocks:     summaryBlocks(tb, judge(tb, 2)),
		Plots:      plots,
		Frontier:   frontier,
		Herd:       "pipe wakeall 100 waiters",
		HerdSeed:   "seed <ctxsw>: wakeall 2047108 vs exclusive 40308",
		TableFiles: []string{filepath.Join(dir, "tables.txt")},
	}
}

// checkSelfContained checks that page loads nothing: no scripts, no
// external style sheets, images or frames, and no http or https URL
// outside plain text.
func checkSelfContained(t *testing.T, page []byte) {
	t.Helper()
	z := html.NewTokenizer(bytes.NewReader(page))
	inStyle := false
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			switch tok.Data {
			case "script", "link", "img", "iframe", "object", "embed", "image", "use":
				t.Errorf("page has a <%s> tag", tok.Data)
			}
			inStyle = tok.Data == "style"
			for _, a := range tok.Attr {
				v := strings.ToLower(a.Key + "=" + a.Val)
				if strings.Contains(v, "http:") || strings.Contains(v, "https:") || a.Key == "src" || strings.Contains(v, "url(") {
					t.Errorf("<%s %s=%q> refers outside the page", tok.Data, a.Key, a.Val)
				}
			}
		case html.EndTagToken:
			inStyle = false
		case html.TextToken:
			if s := strings.ToLower(string(z.Text())); inStyle && (strings.Contains(s, "url(") || strings.Contains(s, "@import") || strings.Contains(s, "http")) {
				t.Errorf("style refers outside the page: %s", s)
			}
		}
	}
}

// findChromium returns the chromium binary, or ends the test with
// testtool.Missing.
func findChromium(t *testing.T) string {
	t.Helper()
	var err error
	for _, name := range []string{"chromium", "chromium-browser"} {
		var path string
		if path, err = exec.LookPath(name); err == nil {
			return path
		}
	}
	testtool.Missing(t, "chromium", err)
	return ""
}

// runChromium runs headless chromium with args and a home and profile of
// its own in a temporary directory, and returns its stdout.
func runChromium(ctx context.Context, t *testing.T, chromium string, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, chromium, append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + filepath.Join(home, "profile"),
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
		"--disable-background-networking", "--disable-component-update", "--disable-default-apps",
	}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("chromium %s: %w\n%s", strings.Join(args, " "), err, lastLines(stderr.String(), 10))
	}
	return stdout.Bytes(), nil
}

// checkNotBlank checks that more than 2% of the screenshot's pixels
// differ from its top left one, the page's background.
func checkNotBlank(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	bg := img.At(b.Min.X, b.Min.Y)
	differ := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if !sameColor(img.At(x, y), bg) {
				differ++
			}
		}
	}
	if total := b.Dx() * b.Dy(); differ*50 <= total {
		t.Errorf("screenshot %v: %d of %d pixels differ from the background: blank", b.Size(), differ, total)
	}
}

func sameColor(a, b color.Color) bool {
	r1, g1, b1, a1 := a.RGBA()
	r2, g2, b2, a2 := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2 && a1 == a2
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func byID(n *html.Node, id string) *html.Node {
	if n.Type == html.ElementNode && attr(n, "id") == id {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if m := byID(c, id); m != nil {
			return m
		}
	}
	return nil
}

func textOf(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		b.WriteString(textOf(c))
	}
	return b.String()
}
