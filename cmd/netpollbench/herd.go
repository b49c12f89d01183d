package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"
)

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

// runHerd runs the herd experiment: 100 waiters on a pipe (wakeall,
// exclusive) and on a listening socket (wakeall, exclusive, reuseport).
// Default: 5,000 pipe events and 1,000 connections; -full: the seed's
// 20,000 pipe events, 2,000 connections. Not pinned: the waiters are
// threads on every CPU, as in the seed.
func runHerd(ctx context.Context, r *runner, o *options, stderr io.Writer) ([]herdRow, error) {
	pipeEvents, acceptEvents := 5000, 1000
	if o.full {
		pipeEvents, acceptEvents = 20000, 2000
	}
	var rows []herdRow
	for _, x := range []struct {
		source, mode string
		events       int
	}{
		{"pipe", "wakeall", pipeEvents}, {"pipe", "exclusive", pipeEvents},
		{"accept", "wakeall", acceptEvents}, {"accept", "exclusive", acceptEvents}, {"accept", "reuseport", acceptEvents},
	} {
		fmt.Fprintf(stderr, "netpollbench: herd %s %s, 100 waiters, %d events\n", x.source, x.mode, x.events)
		cmd := exec.CommandContext(ctx, r.bins["herd"], "-source", x.source, "-mode", x.mode,
			"-waiters", "100", "-events", strconv.Itoa(x.events), "-format", "json")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return rows, fmt.Errorf("%s %s: %v: %s", x.source, x.mode, err, errb.String())
		}
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			var row herdRow
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				return rows, fmt.Errorf("%s %s: bad json %q: %v", x.source, x.mode, sc.Text(), err)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// writeHerd tabulates the herd runs beside the seed's numbers.
func writeHerd(w io.Writer, rows []herdRow) {
	fmt.Fprintf(w, "Thundering herd: 100 epoll waiters (threads), one source (cmd/herd)\n\n")
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
