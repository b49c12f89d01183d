package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// render is the render stage: it writes every file of a run into dir
// from t and nothing else. First the data: table.json (t itself, which
// readTable reads back), the benchmark lines of each cell file (raw.txt,
// quota.txt, sweep.txt, neighbour.txt, idle.txt) and of the warm-up round
// (warmup.txt), each round's after a "round: N" line (writeData); then
// the summary (summary.txt, and stdout), the benchstat tables of those
// files, the herd's table (herd.txt), the plots, report.html, and with
// -compare compare.txt against the earlier run's raw.txt.
func render(ctx context.Context, root, dir string, t *table, stdout io.Writer) error {
	if err := writeData(dir, t); err != nil {
		return err
	}
	warnings, compareNotes, err := runWarnings(t)
	if err != nil {
		return err
	}
	verdicts := judge(t, t.calStart.ncpu)
	blocks := summaryBlocks(t, verdicts)

	summaryText := writeSummary(t, blocks, warnings, compareNotes)
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summaryText), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, summaryText)

	// The full tables, to files.
	files, err := benchstatFiles(ctx, root, dir, t)
	if err != nil {
		return err
	}
	herd, seed := herdText(t)
	if herd != "" {
		path := filepath.Join(dir, "herd.txt")
		if err := os.WriteFile(path, []byte(herd), 0o644); err != nil {
			return err
		}
		files = append(files, path)
	}

	var plots []string
	for _, cp := range t.plan.cells {
		if cp.kind != kindLoad || cp.rate > 0 {
			continue // the sweep's plots come with its tables
		}
		more, err := drawPlots(dir, cp, t.measured(cp))
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		plots = append(plots, more...)
	}
	if more, err := drawScaling(dir, t); err != nil {
		return fmt.Errorf("plots: %w", err)
	} else {
		plots = append(plots, more...)
	}
	var frontier []string
	if sw := sweepOf(t.plan); sw != nil {
		path, more, err := renderSweep(ctx, root, dir, t, sw)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		files, frontier = append(files, path), more
	}
	fmt.Fprintf(stdout, "\nFull tables:\n  %s\n", strings.Join(files, "\n  "))
	fmt.Fprintf(stdout, "Plots:\n  %s\n", strings.Join(append(slices.Clone(plots), frontier...), "\n  "))
	html := filepath.Join(dir, "report.html")
	err = writeHTML(html, htmlReport{
		Title: "netpollbench, " + t.calStart.machine(), Machine: machineLines(t),
		Warnings: warnings, Notes: append(compareNotes, t.plan.notes...), Failures: t.failures,
		Blocks: blocks, Plots: plots, Frontier: frontier,
		Herd: herd, HerdSeed: seed, TableFiles: files,
	})
	if err != nil {
		return fmt.Errorf("report.html: %w", err)
	}
	fmt.Fprintf(stdout, "Report: %s\n", html)

	if t.compare != "" {
		old, err := filepath.Abs(filepath.Join(t.compare, rawFile))
		if err != nil {
			return err
		}
		// The calibration lines differ between runs by nature: they must
		// not split the comparison into separate tables.
		cmp, err := benchstat(ctx, root, "-ignore", compareIgnore(), "-row", "/cfg,/proto,/pin,/conns,/size", "old="+old, "new="+filepath.Join(dir, rawFile))
		if err != nil {
			return fmt.Errorf("compare with %s: %w", t.compare, err)
		}
		path := filepath.Join(dir, "compare.txt")
		if err := os.WriteFile(path, []byte(cmp), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Compared with %s: %s\n", t.compare, path)
	}
	return nil
}

// writeData writes t's data into dir: table.json and the benchmark-line
// files, each with the configuration lines benchstat shows (the
// calibration before the run, and after it at the end of raw.txt) and the
// order's seed. A cell file is written when a cell of the plan has it,
// even if every measurement of it failed. It runs nothing, so that an
// interrupted run can keep what it measured.
func writeData(dir string, t *table) error {
	b, err := t.marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, tableFileName), b, 0o644); err != nil {
		return err
	}
	files := map[string][]result{}
	var names []string
	add := func(name string, r result) {
		if _, ok := files[name]; !ok {
			names = append(names, name)
		}
		files[name] = append(files[name], r)
	}
	for _, cp := range t.plan.cells {
		if cp.file != "" && cp.file != sweepFile && files[cp.file] == nil {
			names = append(names, cp.file)
			files[cp.file] = []result{}
		}
	}
	for _, r := range t.results {
		switch {
		case r.round == 0:
			add(warmupFile, r)
		case r.cell.file != "" && r.cell.file != sweepFile:
			add(r.cell.file, r)
		}
	}
	if sw := sweepOf(t.plan); sw != nil {
		names = append(names, sweepFile)
		files[sweepFile] = sweepLines(t, sw)
	}
	for _, name := range names {
		var b strings.Builder
		writeHeader(&b, t.calStart)
		fmt.Fprintf(&b, "order-seed: %d\n", t.seed)
		last := -1
		for _, r := range files[name] {
			if r.round != last {
				fmt.Fprintf(&b, "round: %d\n", r.round)
				last = r.round
			}
			b.WriteString(r.line + "\n")
		}
		if name == rawFile && t.calEnd.ncpu > 0 { // an interrupted run has no closing calibration
			t.calEnd.writeConfig(&b, "calib-end-")
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runWarnings are the loud warnings about t and the notes of its
// comparison: the host changed speed during the run (the calibration
// moved), and, with -compare, the earlier run is on another machine or
// recorded no calibration. They are derived here, for the summary and
// the HTML alike; the table keeps none.
func runWarnings(t *table) (warnings, notes []string, err error) {
	if m := moved(t.calStart.figures(), t.calEnd.figures(), calibMovedFraction); len(m) > 0 {
		warnings = append(warnings, fmt.Sprintf("THE HOST CHANGED SPEED DURING THE RUN: calibration moved by more than %.0f%%: %s. "+
			"Compare only ratios within a round, and rerun.", calibMovedFraction*100, strings.Join(m, ", ")))
	}
	if t.compare == "" {
		return warnings, nil, nil
	}
	old, err := os.ReadFile(filepath.Join(t.compare, rawFile))
	if err != nil {
		return nil, nil, fmt.Errorf("-compare: %w", err)
	}
	if m := moved(readCalib(old, "calib-"), t.calStart.figures(), calibCompareFactor-1); len(m) > 0 {
		warnings = append(warnings, fmt.Sprintf("-compare %s: THE TWO RUNS ARE ON DIFFERENT MACHINES (calibration differs by more than %.0fx: %s); "+
			"compare their ratios, not their figures.", t.compare, calibCompareFactor, strings.Join(m, ", ")))
	} else if len(readCalib(old, "calib-")) == 0 {
		notes = append(notes, fmt.Sprintf("-compare %s: that run recorded no calibration; it may be another machine.", t.compare))
	}
	return warnings, notes, nil
}

// writeSummary is the summary's text: the machine and its calibration
// once, warnings, notes and failures, then the blocks (the verdict first).
func writeSummary(t *table, blocks []block, warnings, notes []string) string {
	var b strings.Builder
	for _, l := range machineLines(t) {
		if len([]rune(l)) > summaryWidth {
			l = wrapText(l, summaryWidth, "  ")
		}
		b.WriteString(l + "\n")
	}
	for _, w := range warnings {
		b.WriteString("\n" + wrapText("*** WARNING: "+w, summaryWidth, "    ") + "\n")
	}
	for _, n := range append(slices.Clone(notes), t.plan.notes...) {
		b.WriteString(wrapText("Note: "+n, summaryWidth, "    ") + "\n")
	}
	if len(t.failures) > 0 {
		fmt.Fprintf(&b, "\n*** %d measurement(s) FAILED; they are missing below, and the run fails:\n", len(t.failures))
		for _, f := range t.failures {
			b.WriteString(wrapText("  "+firstLine(f), summaryWidth, "    ") + "\n")
		}
	}
	for _, s := range t.skipped {
		fmt.Fprintf(&b, "Skipped %s\n", s)
	}
	for _, bl := range blocks {
		writeBlock(&b, bl)
	}
	return b.String()
}

// machineLines are the machine and its calibration, said once.
func machineLines(t *table) []string {
	return []string{
		"Machine: " + t.calStart.machine(),
		"Calibration before: " + t.calStart.String(),
		"Calibration after:  " + t.calEnd.String(),
		"Placement: " + t.calStart.pinning,
		fmt.Sprintf("Order within rounds: random, seed %d (-seed).", t.seed),
	}
}

// benchstatFiles writes the benchstat tables of the run's cell files,
// which writeData wrote from the table: echo (tables.txt), net/http
// (tables-http.txt), the quota cell (tables-quota.txt) and the
// blocked-neighbour cell (tables-neighbour.txt), configurations in
// columns. It returns the files.
func benchstatFiles(ctx context.Context, root, dir string, t *table) ([]string, error) {
	has := func(f func(*cellPlan) bool) bool { return slices.ContainsFunc(t.plan.cells, f) }
	// The columns: every configuration of the cells of a file, in plan order.
	cols := func(f func(*cellPlan) bool) string {
		var srvs []server
		for _, cp := range t.plan.cells {
			if f(cp) {
				srvs = append(srvs, cp.srvs...)
			}
		}
		return cfgColumns(srvs)
	}
	var files []string
	for _, x := range []struct {
		file, head, raw string
		want            func(*cellPlan) bool
		args            []string
	}{
		{"tables.txt", "Echo, one server process per measurement, configurations in a random order within each round.", rawFile,
			func(c *cellPlan) bool { return c.file == rawFile && !c.http() }, []string{"-row", "/pin,/conns,/size", "-filter", "-/proto:http"}},
		{"tables-http.txt", "net/http plaintext over keep-alive (cmd/httpserver).", rawFile,
			func(c *cellPlan) bool { return c.kind == kindLoad && c.http() }, []string{"-row", "/pin,/conns", "-filter", "/proto:http"}},
		{"tables-quota.txt", "Echo with the server in a cgroup with a CPU quota; throttling counted over each measured window.", quotaFile,
			func(c *cellPlan) bool { return c.file == quotaFile }, []string{"-row", "/quota,/conns,/size"}},
		{"tables-neighbour.txt", "The blocked neighbour: the pinging connection's figures while the server holds the other's requests.", neighbourFile,
			func(c *cellPlan) bool { return c.file == neighbourFile }, []string{"-row", "/pin,/delay,/conns,/size"}},
	} {
		if !has(x.want) {
			continue
		}
		args := append([]string{"-ignore", "round"}, x.args...)
		tables, err := benchstat(ctx, root, append(args, "-col", cols(x.want), filepath.Join(dir, x.raw))...)
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, x.file)
		head := x.head + " Columns compare with the first. Raw: " + x.raw + "\n\n"
		if err := os.WriteFile(path, []byte(head+tables), 0o644); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

// compareIgnore lists the keys that differ between two runs by nature,
// for benchstat's -ignore: the calibration, the round and the order's seed.
func compareIgnore() string {
	keys := []string{"round", "order-seed"}
	for _, prefix := range []string{"calib-", "calib-end-"} {
		for _, k := range append([]string{"cpu", "kernel", "ncpu", "pinning", "go"}, calibKeys...) {
			keys = append(keys, prefix+k)
		}
	}
	return strings.Join(keys, ",")
}

// wrapText breaks s at spaces into lines of at most width columns, the later
// ones indented.
func wrapText(s string, width int, indent string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines = append(lines, line)
			line = indent + w
			continue
		}
		if line == "" {
			line = w
			if strings.HasPrefix(s, " ") {
				line = s[:len(s)-len(strings.TrimLeft(s, " "))] + w
			}
		} else {
			line += " " + w
		}
	}
	return strings.Join(append(lines, line), "\n")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// benchstat runs the module's pinned benchstat tool and returns its
// standard output (the go command's own messages, such as downloads, stay
// out of the tables).
func benchstat(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "benchstat"}, args...)...)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go tool benchstat: %v\n%s%s", err, out, stderr.String())
	}
	return string(out), nil
}

// cfgColumns is benchstat's -col for the configurations of srvs, in their
// order (package net first when it is there, the base of the comparison),
// whatever order the random rounds wrote them in.
func cfgColumns(srvs []server) string {
	var names []string
	for _, s := range srvs {
		if !slices.Contains(names, s.name) {
			names = append(names, s.name)
		}
	}
	return "/cfg@(" + strings.Join(names, " ") + ")"
}

// labels parses the key=value parts of a benchmark name.
func labels(line string) map[string]string {
	m := map[string]string{}
	name, _, _ := strings.Cut(line, "\t")
	for _, part := range strings.Split(strings.Fields(name)[0], "/") {
		if k, v, ok := strings.Cut(part, "="); ok {
			m[k] = v
		}
	}
	return m
}

// metrics parses the value-unit pairs of a benchmark line.
func metrics(line string) map[string]float64 {
	m := map[string]float64{}
	f := strings.Fields(line)
	for i := 2; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			m[f[i+1]] = v
		}
	}
	return m
}
