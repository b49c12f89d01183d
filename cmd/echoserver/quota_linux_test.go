package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/cpuquota"
	"github.com/edgepoll/edgepoll/internal/testtool"
)

// helperArgs, when set in the environment, makes this test binary the
// echoserver with those arguments (tab-separated): TestQuotaGate runs it
// inside a cgroup made by the test.
const helperArgs = "ECHOSERVER_HELPER_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(helperArgs); ok {
		if err := run(strings.Split(args, "\t"), os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuotaGate runs the netpoll echo server with its defaults (adaptive
// spinning), its reads on the poller (-hotread off), as a container with a CPU limit would: in a cgroup with a 0.5
// CPU quota made by the test, the server started inside it. A closed loop
// on one connection needs more than 0.5 CPU, so the server is at its quota
// throughout, and SpinAuto must read the limit (0.5 CPUs) and refuse the
// spins it would make; outside the group it sees no limit and refuses
// none. What the gate saves (throttled time, the tail) is measured in
// netpollbench's quota cell, not here.
func TestQuotaGate(t *testing.T) {
	g, err := cpuquota.New(0.5)
	if errors.Is(err, cpuquota.ErrUnavailable) {
		testtool.Missing(t, "a writable cgroup cpu controller", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, tt := range []struct {
		name  string
		group *cpuquota.Group
	}{
		{"quota 0.5", g},
		{"no quota", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := quotaRun(t, tt.group)
			t.Logf("server: %v", st)
			limit, refused := st["/netpoll/spin/cpu-limit:millicpus"], st["/netpoll/spin/refused:periods"]
			if tt.group == nil {
				if limit != 0 || refused != 0 {
					t.Errorf("no quota: cpu-limit %v, %v spins refused; want 0 and 0", limit, refused)
				}
				return
			}
			if limit != 500 {
				t.Errorf("cpu-limit %v millicpus, want 500", limit)
			}
			if refused == 0 {
				t.Errorf("no spin refused by a server at its quota (%v spins decided)", st["/netpoll/spin/decisions:periods"])
			}
		})
	}
}

// quotaRun starts the echoserver (this binary, see TestMain) in group, or
// in none, drives one connection back to back for a second and a half,
// and returns the server's netpoll counters (its -stats line).
func quotaRun(t *testing.T, group *cpuquota.Group) map[string]float64 {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name, args := self, []string{}
	if group != nil {
		name, args = group.Command(self)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	// Cold reads: the gate is the poller's, and a busy connection's hot
	// reads (the default while GOMAXPROCS > 1, which Go sets to 2 under a
	// 0.5 CPU limit) never reach the poller, so nothing would spin.
	cmd.Env = append(os.Environ(), helperArgs+"=-impl\tnetpoll\t-hotread\toff\t-stats\t-lifetime\t3s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 256)
	n, err := out.Read(line)
	m := regexp.MustCompile(`echoserver listening on (\S+) `).FindSubmatch(line[:n])
	if err != nil || m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server did not announce its address: %q, %v (stderr %q)", line[:n], err, stderr.String())
	}
	go io.Copy(io.Discard, out)
	c, err := net.Dial("tcp", string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	msg, got := make([]byte, 64), make([]byte, 64)
	rounds := 0
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); rounds++ {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server: %v (stderr %q)", err, stderr.String())
	}
	t.Logf("%d round trips", rounds)
	return parseStats(t, stderr.String())
}

// parseStats reads the name=value pairs of a "netpoll stats:" line.
func parseStats(t *testing.T, s string) map[string]float64 {
	t.Helper()
	_, line, ok := strings.Cut(s, "netpoll stats: ")
	if !ok {
		t.Fatalf("no netpoll stats in the server's stderr: %q", s)
	}
	line, _, _ = strings.Cut(line, "\n")
	st := map[string]float64{}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			st[k] = f
		}
	}
	return st
}
