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

// report writes and prints the benchstat tables, the herd table, the
// sweep's tables (sw, if it ran) and the plots, and the comparison with an
// earlier run if asked.
func report(ctx context.Context, root string, o *options, srvs []server, skipped []string, herd []herdRow, sw *sweep, stdout, stderr io.Writer) error {
	raw, err := filepath.Abs(filepath.Join(o.out, "raw.txt"))
	if err != nil {
		return err
	}
	tables, err := benchstat(ctx, root, "-row", "/conns,/size", "-col", "/cfg", raw)
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Echo, one server process per measurement, configurations interleaved over %d rounds.\n", o.rounds)
	fmt.Fprintf(&b, "Columns compare with the first (%s). Raw: %s\n", srvs[0].name, raw)
	for _, s := range skipped {
		fmt.Fprintf(&b, "Skipped %s\n", s)
	}
	b.WriteString("\n" + tables)
	if err := os.WriteFile(filepath.Join(o.out, "tables.txt"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, b.String())

	if len(herd) > 0 {
		var hb strings.Builder
		writeHerd(&hb, herd)
		if err := os.WriteFile(filepath.Join(o.out, "herd.txt"), []byte(hb.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprint(stdout, "\n"+hb.String())
	}

	results, err := readResults(raw)
	if err != nil {
		return err
	}
	plots, err := drawPlots(o.out, srvs, o.cells, results)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	if sw != nil {
		files, err := reportSweep(ctx, root, sw, stdout)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		plots = append(plots, files...)
	}
	fmt.Fprintf(stdout, "\nPlots: %s\n", strings.Join(plots, ", "))

	if o.compare != "" {
		old, err := filepath.Abs(filepath.Join(o.compare, "raw.txt"))
		if err != nil {
			return err
		}
		cmp, err := benchstat(ctx, root, "-row", "/cfg,/conns,/size", "old="+old, "new="+raw)
		if err != nil {
			return fmt.Errorf("compare with %s: %w", o.compare, err)
		}
		if err := os.WriteFile(filepath.Join(o.out, "compare.txt"), []byte(cmp), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nCompared with %s:\n%s", o.compare, cmp)
	}
	return nil
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

// median returns the median of unit over the results of cfg in cell c,
// and whether there were any.
func median(rs []result, cfg string, c cell, unit string) (float64, bool) {
	return medianOf(rs, unit, func(r result) bool {
		return r.labels["cfg"] == cfg && r.labels["conns"] == strconv.Itoa(c.conns) && r.labels["size"] == strconv.Itoa(c.size)
	})
}

// medianOf returns the median of unit over the results that match, and
// whether there were any.
func medianOf(rs []result, unit string, match func(result) bool) (float64, bool) {
	var vs []float64
	for _, r := range rs {
		if v, ok := r.metrics[unit]; ok && match(r) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}
