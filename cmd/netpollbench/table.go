package main

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
)

// The results table: every measurement of a run, one row each, with its
// labels (configuration and cell), its round and its metrics by unit. The
// runner fills it; the files hold it too (raw.txt, quota.txt, sweep.txt:
// benchmark lines, each round's after a "round: N" line), so that a run
// can be read back. The renderers read only the table.

// result is one benchmark line: its labels, metrics by unit and round.
type result struct {
	labels  map[string]string
	metrics map[string]float64
	round   int    // 1..; 0 where the file did not say
	line    string // the line as written
}

// newResult parses a benchmark line of round.
func newResult(line string, round int) result {
	return result{labels: labels(line), metrics: metrics(line), round: round, line: line}
}

// table is what a run measured.
type table struct {
	plan             *plan
	results          []result // the cells' rounds (not the warm-up round)
	idle             []idleRow
	herd             []herdRow
	calStart, calEnd calibration
	seed             uint64       // the shuffle's seed: the order within rounds
	before           beforeCommit // the before configurations' commit (-before); zero without
	skipped          []string     // configurations the build dropped, with the reason
	warnings         []string     // loud: the host changed speed, runs on different machines
	failures         []string
}

// byRound returns unit's value for configuration cfg in cell c, indexed by
// round (1..rounds at index 0..rounds-1); NaN where it is missing.
func (t *table) byRound(c cell, cfg, unit string, rounds int) []float64 {
	vs := make([]float64, rounds)
	for i := range vs {
		vs[i] = math.NaN()
	}
	for _, r := range t.results {
		if v, ok := value(r, unit); ok && r.round >= 1 && r.round <= rounds && r.labels["cfg"] == cfg && c.matches(r) {
			vs[r.round-1] = v
		}
	}
	return vs
}

// value is r's figure in unit; "req/s" is derived from ns/op and
// "client-cpu-util" and "server-cpu-util" from the CPU per request.
func value(r result, unit string) (float64, bool) {
	m := r.metrics
	switch unit {
	case "req/s":
		if v := m["ns/op"]; v > 0 {
			return 1e9 / v, true
		}
		return 0, false
	case "client-cpu-util", utilUnit:
		cpu, ok := m[strings.TrimSuffix(unit, "-util")+"-ns/op"]
		if v := m["ns/op"]; ok && v > 0 {
			return cpu / v, true
		}
		return 0, false
	}
	v, ok := m[unit]
	return v, ok
}

// readResults reads the benchmark lines of a file, with the round of the
// "round: N" line before them.
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
			rs = append(rs, newResult(l, round))
		}
	}
	return rs, sc.Err()
}
