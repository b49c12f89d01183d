package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The herd experiment (cmd/herd): 100 epoll waiters on one wakeup source,
// woken all at once or exclusively, beside the Linux EPOLLEXCLUSIVE
// patch's pipe test. Its cells are herdCells (plan.go); each mode is a
// configuration, measured once.

// herdRow is one run of cmd/herd (its -format json).
type herdRow struct {
	Source  string        `json:"source"`
	Mode    string        `json:"mode"`
	Waiters int           `json:"waiters"`
	Events  int           `json:"events"`
	Wall    time.Duration `json:"wall_ns"`
	CPU     time.Duration `json:"cpu_ns"`
	Ctxsw   int64         `json:"ctxsw"`
	Empty   int64         `json:"empty_wakeups"`
	Min     int64         `json:"min"`
	Median  float64       `json:"median"`
	Max     int64         `json:"max"`
	Zero    int           `json:"zero_waiters"`
}

// The seed's figures: the Linux EPOLLEXCLUSIVE patch's pipe test, 2015.
const (
	seedWakeAllCtxsw   = 2047108
	seedExclusiveCtxsw = 40308
)

// herdRun runs cmd/herd once with s's flags and returns its run as a
// benchmark line (herdLine).
func (r *runner) herdRun(ctx context.Context, s server, cp *cellPlan) (string, error) {
	cmd := exec.CommandContext(ctx, r.bins[s.bin], slices.Concat(s.args, []string{"-format", "json"})...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", s.name, cp, err, lastLines(errb.String(), 3))
	}
	var row herdRow
	if err := json.Unmarshal(out.Bytes(), &row); err != nil {
		return "", fmt.Errorf("%s %s: bad json %q: %v", s.name, cp, out.String(), err)
	}
	return herdLine(s.label, row), nil
}

// herdLine is a herd run as a benchmark line: its events as iterations,
// and its totals.
func herdLine(label string, row herdRow) string {
	return fmt.Sprintf("BenchmarkHerd/%s/waiters=%d\t%d\t%d wall-ns\t%d cpu-ns\t%d ctxsw\t%d empty-wakeups\t%d min-events\t%g median-events\t%d max-events\t%d idle-waiters",
		label, row.Waiters, row.Events, row.Wall.Nanoseconds(), row.CPU.Nanoseconds(), row.Ctxsw, row.Empty, row.Min, row.Median, row.Max, row.Zero)
}

// herdRows are the herd runs of t, in plan order.
func herdRows(t *table) []herdRow {
	var rows []herdRow
	for _, cp := range t.plan.cells {
		if cp.kind != kindHerd {
			continue
		}
		for _, r := range t.measured(cp) {
			m := r.metrics
			rows = append(rows, herdRow{Source: cp.source, Mode: r.labels["cfg"], Events: int(benchN(r.line)),
				Wall: time.Duration(m["wall-ns"]), CPU: time.Duration(m["cpu-ns"]), Ctxsw: int64(m["ctxsw"]), Empty: int64(m["empty-wakeups"]),
				Min: int64(m["min-events"]), Median: m["median-events"], Max: int64(m["max-events"]), Zero: int(m["idle-waiters"])})
		}
	}
	return rows
}

// writeHerd tabulates the herd runs beside the seed's numbers.
func writeHerd(w io.Writer, rows []herdRow) {
	fmt.Fprintf(w, "Thundering herd: %d epoll waiters (threads), one source (cmd/herd)\n\n", herdWaiters)
	fmt.Fprintf(w, "%-7s %-10s %7s %10s %12s %9s %9s %7s  %s\n", "source", "mode", "events", "ctxsw", "ctxsw/event", "cpu", "wall", "empty", "events per waiter: min/median/max, idle waiters")
	for _, r := range rows {
		fmt.Fprintf(w, "%-7s %-10s %7d %10d %12.1f %9s %9s %7d  %d/%.0f/%d, %d idle\n", r.Source, r.Mode, r.Events, r.Ctxsw,
			float64(r.Ctxsw)/float64(r.Events), r.CPU.Round(time.Millisecond), r.Wall.Round(time.Millisecond), r.Empty, r.Min, r.Median, r.Max, r.Zero)
	}
	fmt.Fprintf(w, "\n%s", herdSeed(rows))
}

// herdSeed sets the seed's figure beside ours: the EPOLLEXCLUSIVE patch's
// pipe test, wake-all against exclusive context switches.
func herdSeed(rows []herdRow) string {
	s := fmt.Sprintf("Seed (Linux EPOLLEXCLUSIVE patch, pipe test): wakeall %d vs exclusive %d context switches (%.0fx).\n",
		seedWakeAllCtxsw, seedExclusiveCtxsw, float64(seedWakeAllCtxsw)/seedExclusiveCtxsw)
	var wa, ex int64
	for _, r := range rows {
		if r.Source == "pipe" && r.Mode == "wakeall" {
			wa = r.Ctxsw
		}
		if r.Source == "pipe" && r.Mode == "exclusive" {
			ex = r.Ctxsw
		}
	}
	if wa > 0 && ex > 0 {
		s += fmt.Sprintf("Here, pipe: wakeall %d vs exclusive %d (%.0fx).\n", wa, ex, float64(wa)/float64(ex))
	}
	return s
}

// herdText is the herd's table and the seed's line apart, for the
// report; both "" without herd runs.
func herdText(t *table) (text, seed string) {
	rows := herdRows(t)
	if len(rows) == 0 {
		return "", ""
	}
	var b strings.Builder
	writeHerd(&b, rows)
	return b.String(), herdSeed(rows)
}
