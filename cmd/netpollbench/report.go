package main

import (
	"bufio"
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

// reportInput is what the run measured, for report.
type reportInput struct {
	srvs, httpSrvs   []server
	skipped          []string
	herd             []herdRow
	sweep            *sweep
	idle             []idleRow
	calStart, calEnd calibration
	warnings         []string // loud: the host changed speed, runs on different machines
	failures         []string
}

// report prints the calibration, the warnings, the failures and the
// summary (also in summary.txt), writes the full benchstat tables, the herd
// table, the sweep's tables and the plots to files whose names it prints,
// and compares with an earlier run if asked.
func report(ctx context.Context, root string, o *options, in reportInput, stdout, stderr io.Writer) error {
	raw, err := filepath.Abs(filepath.Join(o.out, "raw.txt"))
	if err != nil {
		return err
	}
	results, err := readResults(raw)
	if err != nil {
		return err
	}
	var compareNote []string
	if o.compare != "" {
		old, err := os.ReadFile(filepath.Join(o.compare, "raw.txt"))
		if err != nil {
			return fmt.Errorf("-compare: %w", err)
		}
		if m := moved(readCalib(old, "calib-"), in.calStart.figures(), calibCompareFactor-1); len(m) > 0 {
			in.warnings = append(in.warnings, fmt.Sprintf("-compare %s: THE TWO RUNS ARE ON DIFFERENT MACHINES (calibration differs by more than %.0fx: %s); "+
				"compare their ratios, not their figures.", o.compare, calibCompareFactor, strings.Join(m, ", ")))
		} else if len(readCalib(old, "calib-")) == 0 {
			compareNote = append(compareNote, fmt.Sprintf("-compare %s: that run recorded no calibration; it may be another machine.", o.compare))
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s\nPinning: %s\n", in.calStart.machine(), in.calStart.pinning)
	fmt.Fprintf(&b, "Calibration before: %s\nCalibration after:  %s\n", in.calStart, in.calEnd)
	for _, w := range in.warnings {
		b.WriteString("\n" + wrapText("*** WARNING: "+w, summaryWidth, "    ") + "\n")
	}
	for _, n := range compareNote {
		b.WriteString("\n" + wrapText("Note: "+n, summaryWidth, "    ") + "\n")
	}
	if len(in.failures) > 0 {
		fmt.Fprintf(&b, "\n*** %d measurement(s) FAILED; they are missing below, and the run fails:\n", len(in.failures))
		for _, f := range in.failures {
			b.WriteString(wrapText("  "+firstLine(f), summaryWidth, "    ") + "\n")
		}
	}
	for _, s := range in.skipped {
		fmt.Fprintf(&b, "Skipped %s\n", s)
	}
	fmt.Fprintf(&b, "\n%d rounds after a discarded warm-up round, %v measured per round after %v, configurations interleaved.\n",
		o.rounds, o.duration, o.warmup)
	sums := append(summarize(results, in.srvs, o.cells), summarize(results, in.httpSrvs, o.httpCells)...)
	writeSummary(&b, sums)
	if len(in.idle) > 0 {
		b.WriteString("\n")
		writeIdle(&b, in.idle)
	}
	summaryText := b.String()
	if err := os.WriteFile(filepath.Join(o.out, "summary.txt"), []byte(summaryText), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, "\n"+summaryText)

	// The full tables, to files.
	var files []string
	tables, err := benchstat(ctx, root, "-row", "/conns,/size", "-col", "/cfg", "-filter", "-/proto:http", raw)
	if err != nil {
		return err
	}
	path := filepath.Join(o.out, "tables.txt")
	head := fmt.Sprintf("Echo, one server process per measurement, %d rounds interleaved. Columns compare with the first (%s). Raw: %s\n\n", o.rounds, in.srvs[0].name, raw)
	if err := os.WriteFile(path, []byte(head+tables), 0o644); err != nil {
		return err
	}
	files = append(files, path)
	if len(o.httpCells) > 0 && len(in.httpSrvs) > 0 {
		tables, err := benchstat(ctx, root, "-row", "/conns", "-col", "/cfg", "-filter", "/proto:http", raw)
		if err != nil {
			return err
		}
		path := filepath.Join(o.out, "tables-http.txt")
		if err := os.WriteFile(path, []byte("net/http plaintext over keep-alive (cmd/httpserver).\n\n"+tables), 0o644); err != nil {
			return err
		}
		files = append(files, path)
	}
	var herdText string
	if len(in.herd) > 0 {
		var hb strings.Builder
		writeHerd(&hb, in.herd)
		herdText = hb.String()
		path := filepath.Join(o.out, "herd.txt")
		if err := os.WriteFile(path, []byte(herdText), 0o644); err != nil {
			return err
		}
		files = append(files, path)
	}
	fmt.Fprintf(stdout, "\nFull tables:\n  %s\n", strings.Join(files, "\n  "))

	plots, err := drawPlots(o.out, in.srvs, o.cells, results)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	if len(o.httpCells) > 0 && len(in.httpSrvs) > 0 {
		more, err := drawPlots(o.out, in.httpSrvs, o.httpCells, results)
		if err != nil {
			return fmt.Errorf("plots: %w", err)
		}
		plots = append(plots, more...)
	}
	var frontier []string
	if in.sweep != nil {
		if frontier, err = reportSweep(ctx, root, in.sweep, stdout); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		files = append(files, filepath.Join(o.out, "sweep-tables.txt"))
	}
	fmt.Fprintf(stdout, "Plots:\n  %s\n", strings.Join(append(slices.Clone(plots), frontier...), "\n  "))
	var seed string
	if len(in.herd) > 0 {
		seed = herdSeed(in.herd)
	}
	html := filepath.Join(o.out, "report.html")
	err = writeHTML(html, htmlReport{
		Title: "netpollbench, " + in.calStart.machine(),
		Machine: []string{"Machine: " + in.calStart.machine(), "Pinning: " + in.calStart.pinning,
			"Calibration before: " + in.calStart.String(), "Calibration after:  " + in.calEnd.String()},
		Warnings: in.warnings, Summary: summaryText, Plots: plots, Frontier: frontier,
		Herd: herdText, HerdSeed: seed, TableFiles: files,
	})
	if err != nil {
		return fmt.Errorf("report.html: %w", err)
	}
	fmt.Fprintf(stdout, "Report: %s\n", html)

	if o.compare != "" {
		old, err := filepath.Abs(filepath.Join(o.compare, "raw.txt"))
		if err != nil {
			return err
		}
		// The calibration lines differ between runs by nature: they must
		// not split the comparison into separate tables.
		cmp, err := benchstat(ctx, root, "-ignore", calibIgnore(), "-row", "/cfg,/proto,/conns,/size", "old="+old, "new="+raw)
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

// calibIgnore lists the calibration keys for benchstat's -ignore.
func calibIgnore() string {
	var keys []string
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

// benchstat runs the module's pinned benchstat tool.
func benchstat(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "benchstat"}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool benchstat: %v\n%s", err, out)
	}
	return string(out), nil
}

// result is one benchmark line: its labels and its metrics by unit.
type result struct {
	labels  map[string]string
	metrics map[string]float64
}

func readResults(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []result
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "Benchmark") {
			continue
		}
		rs = append(rs, result{labels: labels(l), metrics: metrics(l)})
	}
	return rs, sc.Err()
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

// medianOf returns the median of unit over the results that match, and
// whether there were any.
func medianOf(rs []result, unit string, match func(result) bool) (float64, bool) {
	vs := samplesOf(rs, unit, match)
	return med(vs), len(vs) > 0
}
