package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The results table: every measurement of a run, one row each, with the
// cell of the plan it was measured in, its round and its benchmark line
// (labels, and metrics by unit), beside the plan itself, the machine's
// calibration before and after, and what failed. The runner fills it;
// the render stage reads nothing else. table.json holds it whole, so that
// a run can be rendered again from its directory (readTable).

// result is one measurement: a benchmark line of a cell in a round.
type result struct {
	cell    *cellPlan
	round   int    // 1..; 0 for the warm-up round, set aside
	line    string // the line as measured
	labels  map[string]string
	metrics map[string]float64
}

// newResult parses a benchmark line measured in cell cp in round.
func newResult(cp *cellPlan, round int, line string) result {
	return result{cell: cp, round: round, line: line, labels: labels(line), metrics: metrics(line)}
}

// table is what a run measured.
type table struct {
	plan             *plan
	results          []result // in the order measured, the warm-up round's too
	calStart, calEnd calibration
	seed             uint64       // the shuffle's seed: the order within rounds
	before           beforeCommit // the before configurations' commit (-before); zero without
	skipped          []string     // configurations the build dropped, with the reason
	failures         []string     // measurements that failed; they have no result
	compare          string       // an earlier run's output directory to compare with (-compare); "" for none
}

// byRound returns unit's value for configuration cfg in cell cp, indexed
// by round (1..cp.rounds at index 0..cp.rounds-1); NaN where it is
// missing.
func (t *table) byRound(cp *cellPlan, cfg, unit string) []float64 {
	vs := make([]float64, cp.rounds)
	for i := range vs {
		vs[i] = math.NaN()
	}
	for _, r := range t.results {
		if v, ok := value(r, unit); ok && r.cell == cp && r.round >= 1 && r.round <= cp.rounds && r.labels["cfg"] == cfg {
			vs[r.round-1] = v
		}
	}
	return vs
}

// measured returns the results of cp's rounds (not the warm-up round).
func (t *table) measured(cp *cellPlan) []result {
	var rs []result
	for _, r := range t.results {
		if r.cell == cp && r.round >= 1 {
			rs = append(rs, r)
		}
	}
	return rs
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

// tableFile is the table as table.json holds it.
type tableFile struct {
	Seed             uint64
	Before           beforeCommitJSON `json:",omitzero"`
	CalStart, CalEnd calibrationJSON
	Skipped          []string
	Failures         []string
	Compare          string `json:",omitempty"`
	Notes            []string
	Cells            []cellJSON
	Results          []resultJSON
}

type beforeCommitJSON struct{ Ref, Rev string }

type calibrationJSON struct {
	CPU, Kernel                        string
	NCPU                               int
	SyscallNs, SameCoreUs, CrossCoreUs float64
	Pinning, Go                        string
}

type cellJSON struct {
	Kind             string
	Proto            string `json:",omitempty"`
	Conns, Size      int
	Rate             float64
	Unpinned         bool
	Quota            float64
	Blocked          int
	Delay            time.Duration
	Source           string `json:",omitempty"`
	Events           int    `json:",omitempty"`
	Servers          []serverJSON
	Rounds           int
	Warm             bool
	Warmup, Duration time.Duration
	File             string
	Sweep            bool
}

type serverJSON struct {
	Name, Label, Bin string
	Args, Env        []string
}

type resultJSON struct {
	Cell, Round int
	Line        string
}

// tableFileName is the table's file in the output directory.
const tableFileName = "table.json"

// marshal is t as table.json holds it.
func (t *table) marshal() ([]byte, error) {
	f := tableFile{Seed: t.seed, Before: beforeCommitJSON{t.before.ref, t.before.rev},
		CalStart: t.calStart.toJSON(), CalEnd: t.calEnd.toJSON(),
		Skipped: t.skipped, Failures: t.failures, Compare: t.compare, Notes: t.plan.notes}
	index := map[*cellPlan]int{}
	for i, cp := range t.plan.cells {
		index[cp] = i
		c := cellJSON{Kind: cp.kind.String(), Proto: cp.proto, Conns: cp.conns, Size: cp.size, Rate: cp.rate, Unpinned: cp.unpinned,
			Quota: cp.quota, Blocked: cp.blocked, Delay: cp.delay, Source: cp.source, Events: cp.events,
			Rounds: cp.rounds, Warm: cp.warm, Warmup: cp.warmup, Duration: cp.duration, File: cp.file, Sweep: cp.sweep}
		for _, s := range cp.srvs {
			c.Servers = append(c.Servers, serverJSON{s.name, s.label, s.bin, s.args, s.env})
		}
		f.Cells = append(f.Cells, c)
	}
	for _, r := range t.results {
		i, ok := index[r.cell]
		if !ok {
			return nil, fmt.Errorf("a result of a cell not in the plan: %s", r.line)
		}
		f.Results = append(f.Results, resultJSON{i, r.round, r.line})
	}
	b, err := json.MarshalIndent(f, "", "\t")
	return append(b, '\n'), err
}

// readTable reads the table of the run in dir back from its table.json.
func readTable(dir string) (*table, error) {
	b, err := os.ReadFile(filepath.Join(dir, tableFileName))
	if err != nil {
		return nil, err
	}
	var f tableFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", tableFileName, err)
	}
	t := &table{plan: &plan{notes: f.Notes}, seed: f.Seed, before: beforeCommit{f.Before.Ref, f.Before.Rev},
		calStart: f.CalStart.calibration(), calEnd: f.CalEnd.calibration(),
		skipped: f.Skipped, failures: f.Failures, compare: f.Compare}
	for _, c := range f.Cells {
		k := kindLoad
		for i, name := range kindNames {
			if name == c.Kind {
				k = kind(i)
			}
		}
		if kindNames[k] != c.Kind {
			return nil, fmt.Errorf("%s: a cell of kind %q", tableFileName, c.Kind)
		}
		cp := &cellPlan{cell: cell{kind: k, proto: c.Proto, conns: c.Conns, size: c.Size, rate: c.Rate, unpinned: c.Unpinned,
			quota: c.Quota, blocked: c.Blocked, delay: c.Delay, source: c.Source, events: c.Events},
			rounds: c.Rounds, warm: c.Warm, warmup: c.Warmup, duration: c.Duration, file: c.File, sweep: c.Sweep}
		for _, s := range c.Servers {
			cp.srvs = append(cp.srvs, server{s.Name, s.Label, s.Bin, s.Args, s.Env})
		}
		t.plan.cells = append(t.plan.cells, cp)
	}
	for _, r := range f.Results {
		if r.Cell < 0 || r.Cell >= len(t.plan.cells) {
			return nil, fmt.Errorf("%s: a result of cell %d, of %d", tableFileName, r.Cell, len(t.plan.cells))
		}
		t.results = append(t.results, newResult(t.plan.cells[r.Cell], r.Round, r.Line))
	}
	return t, nil
}

func (c calibration) toJSON() calibrationJSON {
	return calibrationJSON{c.cpu, c.kernel, c.ncpu, c.syscallNs, c.sameCoreUs, c.crossCoreUs, c.pinning, c.toolVer}
}

func (c calibrationJSON) calibration() calibration {
	return calibration{cpu: c.CPU, kernel: c.Kernel, ncpu: c.NCPU, syscallNs: c.SyscallNs, sameCoreUs: c.SameCoreUs,
		crossCoreUs: c.CrossCoreUs, pinning: c.Pinning, toolVer: c.Go}
}
