package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestIdle measures 200 idle connections on net, et and the on-demand
// echo servers, next to a server whose binary is not there and one that
// refuses its flags: those two are failures, shown as missing, never as
// zero.
func TestIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("builds echoserver and runs processes; skipped with -short")
	}
	const conns = 200
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // the watchdog
	defer cancel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	srvs, err := pickServers([]string{"net", "et", "ondemand", "ondemand-net"})
	if err != nil {
		t.Fatal(err)
	}
	bins, _, _, err := build(ctx, root, t.TempDir(), srvs, false, false, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	measured := len(srvs)
	bins["nothere"] = filepath.Join(t.TempDir(), "nothere")
	srvs = append(srvs,
		server{name: "nothere", label: "cfg=nothere", bin: "nothere"},
		server{name: "badflags", label: "cfg=badflags/impl=bogus", bin: "echoserver", args: []string{"-impl", "bogus"}})
	var stderr bytes.Buffer
	r := &runner{opts: &options{}, bins: bins, stderr: &stderr}

	rows, failures, err := runIdle(ctx, r, srvs, conns)
	if err != nil {
		t.Fatalf("runIdle: %v\n%s", err, stderr.String())
	}
	if len(rows) != len(srvs) {
		t.Fatalf("%d rows, want one per server (%d)", len(rows), len(srvs))
	}
	for _, row := range rows[:measured] {
		if row.err != nil {
			t.Errorf("%s: %v", row.cfg, row.err)
			continue
		}
		if row.conns != conns || row.buf != idleEchoBuf || row.rssBefore <= 0 || row.rssAfter <= row.rssBefore || row.perConn <= 0 {
			t.Errorf("%s: conns %d, buf %d, RSS %d -> %d, %.0f bytes/conn: want %d conns, buf %d, RSS growing",
				row.cfg, row.conns, row.buf, row.rssBefore, row.rssAfter, row.perConn, conns, idleEchoBuf)
		}
		want := "BenchmarkIdle/cfg=" + row.cfg + "/"
		if l := idleLine(row); !strings.HasPrefix(l, want) || !strings.Contains(l, "/buf=4096/conns=200\t1\t") || !strings.Contains(l, " rss-bytes/conn") {
			t.Errorf("%s: benchmark line %q", row.cfg, l)
		}
	}
	for _, row := range rows[measured:] {
		if row.err == nil {
			t.Errorf("%s: measured (RSS %d -> %d), want a failure", row.cfg, row.rssBefore, row.rssAfter)
		}
		if l := idleLine(row); l != "" {
			t.Errorf("%s: failed row has the benchmark line %q", row.cfg, l)
		}
	}
	if len(failures) != 2 || !strings.HasPrefix(failures[0], "idle nothere: ") || !strings.HasPrefix(failures[1], "idle badflags: ") {
		t.Errorf("failures %q: want one line for nothere, one for badflags", failures)
	}
	if len(failures) == 2 && !strings.Contains(failures[1], "-impl") {
		t.Errorf("badflags' failure %q does not pass on the server's complaint", failures[1])
	}
	table := checkIdleTable(t, rows)
	t.Logf("progress:\n%s\ntable:\n%s", stderr.String(), table)
	if !strings.Contains(table, "1.00x") {
		t.Errorf("no 1.00x for net in:\n%s", table)
	}
}

// TestWriteIdle tabulates rows without net's and with a long error: every
// figure that cannot be had says missing, and no line is over 120 columns.
func TestWriteIdle(t *testing.T) {
	rows := []idleRow{
		{cfg: "net", conns: 10000, err: errors.New("connection 4711 of 10000: " + strings.Repeat("dial tcp: connection refused; ", 10))},
		{cfg: "et", conns: 10000, rssBefore: 8 << 20, rssAfter: 100 << 20, perConn: 9646, unsettled: []string{"all conns"}},
	}
	table := checkIdleTable(t, rows)
	et := tableLine(table, "et ")
	if strings.Count(et, "missing") != 1 || !strings.Contains(et, "9.42") {
		t.Errorf("et: %q: want 9.42 KiB per conn, the ratio to net missing", et)
	}
	if !strings.Contains(table, "et: RSS (all conns) still moving") {
		t.Errorf("no note of et's unsettled RSS in:\n%s", table)
	}
}

func TestNewIdleRow(t *testing.T) {
	for _, tt := range []struct {
		name  string
		s     server
		args  string
		buf   int
		label string
	}{
		{"echoserver", server{"net", "cfg=net", "echoserver", []string{"-impl", "net"}, nil}, "-impl net -buf 4096", 4096, "cfg=net/buf=4096"},
		{"own -buf", server{"n", "cfg=n", "echoserver", []string{"-buf", "65536"}, nil}, "-buf 65536", 65536, "cfg=n/buf=65536"},
		{"own -buf=", server{"n", "cfg=n", "echoserver", []string{"-buf=1024"}, nil}, "-buf=1024", 1024, "cfg=n/buf=1024"},
		{"peer", server{"gnet", "cfg=gnet", "gnetecho", nil, nil}, "", 0, "cfg=gnet"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			row, args := newIdleRow(tt.s, 10)
			if strings.Join(args, " ") != tt.args || row.buf != tt.buf || row.label != tt.label || row.conns != 10 {
				t.Errorf("args %q, buf %d, label %q, conns %d; want %q, %d, %q, 10", args, row.buf, row.label, row.conns, tt.args, tt.buf, tt.label)
			}
		})
	}
}

// checkIdleTable writes rows and checks that no line is over 120 columns
// and that each failed row says missing in all four figures and shows no
// number but its connection count. It returns the table.
func checkIdleTable(t *testing.T, rows []idleRow) string {
	t.Helper()
	var b strings.Builder
	writeBlock(&b, idleBlock(rows))
	table := b.String()
	for _, l := range strings.Split(table, "\n") {
		if n := utf8.RuneCountInString(l); n > 120 {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
	for _, row := range rows {
		l := tableLine(table, row.cfg+" ")
		if row.err == nil {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 6 || strings.Join(f[2:6], " ") != "missing missing missing missing" {
			t.Errorf("failed %s: %q: want its figures missing", row.cfg, l)
		}
	}
	return table
}

// tableLine returns the table's line that starts with prefix.
func tableLine(table, prefix string) string {
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
