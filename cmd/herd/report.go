package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is one run's figures, measured from the first event sent to the last
// one taken. Durations encode as nanoseconds.
type result struct {
	Source   string        `json:"source"`
	Mode     string        `json:"mode"`
	Waiters  int           `json:"waiters"`
	Events   int           `json:"events"`
	Interval time.Duration `json:"interval_ns"`

	Wall        time.Duration `json:"wall_ns"`
	User        time.Duration `json:"user_ns"`
	Sys         time.Duration `json:"sys_ns"`
	CPU         time.Duration `json:"cpu_ns"` // User + Sys
	Voluntary   int64         `json:"ctxsw_voluntary"`
	Involuntary int64         `json:"ctxsw_involuntary"`
	Ctxsw       int64         `json:"ctxsw"` // Voluntary + Involuntary

	Got     []int64 `json:"events_by_waiter"`
	EmptyBy []int64 `json:"empty_by_waiter"` // wakeups that found nothing
	Empty   int64   `json:"empty_wakeups"`   // sum of EmptyBy

	// The spread of Got.
	Min    int64   `json:"min"`
	Median float64 `json:"median"`
	Max    int64   `json:"max"`
	Zero   int     `json:"zero_waiters"` // waiters that took no event
}

// summarize fills in the fields derived from the others.
func (r *result) summarize() {
	r.CPU = r.User + r.Sys
	r.Ctxsw = r.Voluntary + r.Involuntary
	r.Empty = 0
	for _, n := range r.EmptyBy {
		r.Empty += n
	}
	got := slices.Sorted(slices.Values(r.Got))
	if len(got) == 0 {
		return
	}
	r.Min, r.Max = got[0], got[len(got)-1]
	r.Median = float64(got[(len(got)-1)/2]+got[len(got)/2]) / 2
	r.Zero = 0
	for _, n := range got {
		if n == 0 {
			r.Zero++
		}
	}
}

// perEvent is x divided by the number of events.
func (r *result) perEvent(x float64) float64 { return x / float64(r.Events) }

// report writes results in one of the formats as they come.
type report struct {
	w      io.Writer
	format string
	tw     *tabwriter.Writer // text: the table, written out by flush
	json   *json.Encoder
}

func newReport(w io.Writer, format string, cfg config) (*report, error) {
	r := &report{w: w, format: format}
	switch format {
	case formatText:
		r.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		_, err := fmt.Fprintln(r.tw, "source\tmode\twaiters\tevents\twall\tcpu\tctxsw\tctxsw/event\tempty\tempty/event\tmin\tmedian\tmax\tidle waiters\t")
		return r, err
	case formatBench:
		// The header go test -bench prints, so benchstat labels the runs.
		var b strings.Builder
		fmt.Fprintf(&b, "goos: %s\ngoarch: %s\npkg: github.com/edgepoll/edgepoll/cmd/herd\n", runtime.GOOS, runtime.GOARCH)
		if cpu := cpuModel(); cpu != "" {
			fmt.Fprintf(&b, "cpu: %s\n", cpu)
		}
		fmt.Fprintf(&b, "interval: %v\n", cfg.interval)
		_, err := io.WriteString(w, b.String())
		return r, err
	case formatJSON:
		r.json = json.NewEncoder(w)
		return r, nil
	}
	panic("herd: unchecked format " + format)
}

func (r *report) add(res *result) error {
	switch r.format {
	case formatText:
		_, err := fmt.Fprintf(r.tw, "%s\t%s\t%d\t%d\t%v\t%v\t%d\t%.1f\t%d\t%.2f\t%d\t%g\t%d\t%d\t\n",
			res.Source, res.Mode, res.Waiters, res.Events,
			res.Wall.Round(time.Millisecond), res.CPU.Round(time.Millisecond),
			res.Ctxsw, res.perEvent(float64(res.Ctxsw)),
			res.Empty, res.perEvent(float64(res.Empty)),
			res.Min, res.Median, res.Max, res.Zero)
		return err
	case formatBench:
		return r.benchLine(res)
	default:
		return r.json.Encode(res)
	}
}

// benchLine writes one line in the benchmark format, with key=value names so
// that benchstat -col /mode compares the modes.
func (r *report) benchLine(res *result) error {
	name := fmt.Sprintf("BenchmarkHerd/source=%s/mode=%s/waiters=%d", res.Source, res.Mode, res.Waiters)
	if procs := runtime.GOMAXPROCS(0); procs != 1 {
		name += fmt.Sprintf("-%d", procs) // as go test does
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\t%8d", name, res.Events)
	for _, m := range res.metrics() {
		fmt.Fprintf(&b, "\t%s %s", number(m.value), m.unit)
	}
	b.WriteByte('\n')
	_, err := io.WriteString(r.w, b.String())
	return err
}

// metric is one figure of a run in the benchmark format: an op is an event.
type metric struct {
	value float64
	unit  string
}

// metrics are the figures of the bench format's line, which BenchmarkHerd
// reports too.
func (r *result) metrics() []metric {
	return []metric{
		{r.perEvent(float64(r.Wall)), "ns/op"},
		{r.perEvent(float64(r.Ctxsw)), "ctxsw/op"},
		{r.perEvent(float64(r.CPU)), "cpu-ns/op"},
		{r.perEvent(float64(r.Empty)), "empty/op"},
		{r.perEvent(float64(r.Max)), "max-share"}, // of the events, taken by the busiest waiter
		{float64(r.Zero), "idle-waiters"},
	}
}

// number formats x with about four significant digits and no exponent.
func number(x float64) string {
	digits := 0
	if y := math.Abs(x); y != 0 && y < 1000 {
		digits = 3 - int(math.Floor(math.Log10(y)))
	}
	return fmt.Sprintf("%10.*f", digits, x)
}

func (r *report) flush() error {
	if r.tw != nil {
		return r.tw.Flush()
	}
	return nil
}

// cpuModel is the processor's name as go test prints it, or "" if unknown.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if key, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}
