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

// report renders t: the summary (stdout and summary.txt), the benchstat
// tables of each cell file, the herd table, the sweep's tables, the plots,
// report.html, and a comparison with an earlier run if asked.
func report(ctx context.Context, root string, o *options, t *table, stdout io.Writer) error {
	var compareNote []string
	if o.compare != "" {
		old, err := os.ReadFile(filepath.Join(o.compare, rawFile))
		if err != nil {
			return fmt.Errorf("-compare: %w", err)
		}
		if m := moved(readCalib(old, "calib-"), t.calStart.figures(), calibCompareFactor-1); len(m) > 0 {
			t.warnings = append(t.warnings, fmt.Sprintf("-compare %s: THE TWO RUNS ARE ON DIFFERENT MACHINES (calibration differs by more than %.0fx: %s); "+
				"compare their ratios, not their figures.", o.compare, calibCompareFactor, strings.Join(m, ", ")))
		} else if len(readCalib(old, "calib-")) == 0 {
			compareNote = append(compareNote, fmt.Sprintf("-compare %s: that run recorded no calibration; it may be another machine.", o.compare))
		}
	}
	verdicts := judge(t, t.calStart.ncpu)
	blocks := summaryBlocks(t, verdicts)

	summaryText := writeSummary(t, blocks, compareNote)
	if err := os.WriteFile(filepath.Join(o.out, "summary.txt"), []byte(summaryText), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, summaryText)

	// The full tables, to files.
	files, err := benchstatFiles(ctx, root, o.out, t)
	if err != nil {
		return err
	}
	var herdText string
	if len(t.herd) > 0 {
		var hb strings.Builder
		writeHerd(&hb, t.herd)
		herdText = hb.String()
		path := filepath.Join(o.out, "herd.txt")
		if err := os.WriteFile(path, []byte(herdText), 0o644); err != nil {
			return err
		}
		files = append(files, path)
	}
	fmt.Fprintf(stdout, "\nFull tables:\n  %s\n", strings.Join(files, "\n  "))

	var plots []string
	for _, cp := range t.plan.cells {
		if cp.rate > 0 {
			continue // the sweep's plots
		}
		more, err := drawPlots(o.out, cp, t.results)
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		plots = append(plots, more...)
	}
	if more, err := drawScaling(o.out, t.plan, t.results); err != nil {
		return fmt.Errorf("plots: %w", err)
	} else {
		plots = append(plots, more...)
	}
	var frontier []string
	if sw := t.plan.sweep; sw != nil {
		if frontier, err = reportSweep(ctx, root, o.out, sw, t, stdout); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		files = append(files, filepath.Join(o.out, "sweep-tables.txt"))
	}
	fmt.Fprintf(stdout, "Plots:\n  %s\n", strings.Join(append(slices.Clone(plots), frontier...), "\n  "))
	var seed string
	if len(t.herd) > 0 {
		seed = herdSeed(t.herd)
	}
	html := filepath.Join(o.out, "report.html")
	err = writeHTML(html, htmlReport{
		Title: "netpollbench, " + t.calStart.machine(), Machine: machineLines(t),
		Warnings: t.warnings, Notes: append(compareNote, t.plan.notes...), Failures: t.failures,
		Blocks: blocks, Plots: plots, Frontier: frontier,
		Herd: herdText, HerdSeed: seed, TableFiles: files,
	})
	if err != nil {
		return fmt.Errorf("report.html: %w", err)
	}
	fmt.Fprintf(stdout, "Report: %s\n", html)

	if o.compare != "" {
		old, err := filepath.Abs(filepath.Join(o.compare, rawFile))
		if err != nil {
			return err
		}
		// The calibration lines differ between runs by nature: they must
		// not split the comparison into separate tables.
		cmp, err := benchstat(ctx, root, "-ignore", compareIgnore(), "-row", "/cfg,/proto,/pin,/conns,/size", "old="+old, "new="+filepath.Join(o.out, rawFile))
		if err != nil {
			return fmt.Errorf("compare with %s: %w", o.compare, err)
		}
		path := filepath.Join(o.out, "compare.txt")
		if err := os.WriteFile(path, []byte(cmp), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Compared with %s: %s\n", o.compare, path)
	}
	return nil
}

// writeSummary is the summary's text: the machine and its calibration
// once, warnings, notes and failures, then the blocks (the verdict first)
// and the idle table.
func writeSummary(t *table, blocks []block, notes []string) string {
	var b strings.Builder
	for _, l := range machineLines(t) {
		if len([]rune(l)) > summaryWidth {
			l = wrapText(l, summaryWidth, "  ")
		}
		b.WriteString(l + "\n")
	}
	for _, w := range t.warnings {
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

// benchstatFiles writes the benchstat tables of the run's cell files:
// echo (tables.txt), net/http (tables-http.txt) and the quota cell
// (tables-quota.txt), configurations in columns. It returns the files.
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
	raw := filepath.Join(dir, rawFile)
	var files []string
	for _, x := range []struct {
		file, head string
		want       func(*cellPlan) bool
		args       []string
	}{
		{"tables.txt", "Echo, one server process per measurement, configurations in a random order within each round.", func(c *cellPlan) bool { return c.file == rawFile && !c.http() },
			[]string{"-row", "/pin,/conns,/size", "-col", "/cfg", "-filter", "-/proto:http", raw}},
		{"tables-http.txt", "net/http plaintext over keep-alive (cmd/httpserver).", func(c *cellPlan) bool { return c.http() },
			[]string{"-row", "/pin,/conns", "-col", "/cfg", "-filter", "/proto:http", raw}},
		{"tables-quota.txt", "Echo with the server in a cgroup with a CPU quota; throttling counted over each measured window.", func(c *cellPlan) bool { return c.file == quotaFile },
			[]string{"-row", "/quota,/conns,/size", "-col", "/cfg", filepath.Join(dir, quotaFile)}},
	} {
		if !has(x.want) {
			continue
		}
		args := slices.Clone(x.args)
		args[slices.Index(args, "-col")+1] = cols(x.want)
		tables, err := benchstat(ctx, root, append([]string{"-ignore", "round"}, args...)...)
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, x.file)
		head := x.head + " Columns compare with the first. Raw: " + x.args[len(x.args)-1] + "\n\n"
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
