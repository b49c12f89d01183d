package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readResults reads the benchmark lines of a file the render stage wrote,
// with the round of the "round: N" line before them; they belong to no
// cell (the file does not say which).
func readResults(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []result
	round := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, "round: "); ok {
			round, _ = strconv.Atoi(strings.TrimSpace(v))
			continue
		}
		if strings.HasPrefix(l, "Benchmark") {
			rs = append(rs, newResult(nil, round, l))
		}
	}
	return rs, sc.Err()
}

// addResult adds to tb a measurement of configuration cfg in cp in round,
// as a benchmark line of the cell's kind with the metrics m (units in
// order, so that the line is the same for the same figures).
func addResult(tb *table, cp *cellPlan, cfg string, round int, m map[string]float64) {
	name := map[kind]string{kindLoad: "BenchmarkEcho", kindIdle: "BenchmarkIdle", kindHerd: "BenchmarkHerd"}[cp.kind]
	if cp.http() {
		name = "BenchmarkHTTP"
	}
	line := name + "/cfg=" + cfg + "/" + strings.TrimPrefix(strings.TrimPrefix(cp.String(), "idle/"), "herd/") + "\t1000"
	units := make([]string, 0, len(m))
	for u := range m {
		units = append(units, u)
	}
	slices.Sort(units)
	for _, u := range units {
		line += fmt.Sprintf("\t%s %s", strconv.FormatFloat(m[u], 'g', -1, 64), u)
	}
	tb.results = append(tb.results, newResult(cp, round, line))
}

// mustServers returns the configurations names, or fails the test.
func mustServers(t *testing.T, names ...string) []server {
	t.Helper()
	srvs, err := pickServers(names)
	if err != nil {
		t.Fatal(err)
	}
	return srvs
}

// idleCell is p's echo idle cell, or nil.
func idleCell(p *plan) *cellPlan {
	for _, cp := range p.cells {
		if cp.kind == kindIdle && !cp.http() {
			return cp
		}
	}
	return nil
}

// httpIdleCell is p's net/http idle cell, or nil.
func httpIdleCell(p *plan) *cellPlan {
	for _, cp := range p.cells {
		if cp.kind == kindIdle && cp.http() {
			return cp
		}
	}
	return nil
}
