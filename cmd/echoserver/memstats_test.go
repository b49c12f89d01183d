package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var memstatsRE = regexp.MustCompile(`^echoserver: memstats heap-live=(\d+) heap-objects=(\d+) goroutines=(\d+) stacks=(\d+)$`)

// parseMemstats returns the four numbers of a memstats line, in its order.
func parseMemstats(t *testing.T, line string) [4]int64 {
	t.Helper()
	m := memstatsRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("%q is not a memstats line", line)
	}
	var v [4]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	return v
}

// TestMemstatsLine: the line has every figure, each read from
// runtime/metrics, none zero in a running program that has collected
// (heap-live is the last collection's).
func TestMemstatsLine(t *testing.T) {
	runtime.GC()
	v := parseMemstats(t, memstatsLine())
	for i, name := range []string{"heap-live", "heap-objects", "goroutines", "stacks"} {
		if v[i] <= 0 {
			t.Errorf("%s = %d, want more than 0", name, v[i])
		}
	}
}

// TestReportMemstats: each value on the channel writes one line, and
// closing quit ends the loop.
func TestReportMemstats(t *testing.T) {
	sigs, quit, done := make(chan os.Signal), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var b bytes.Buffer
	go func() {
		defer close(done)
		reportMemstats(sigs, quit, &lockedWriter{w: writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return b.Write(p)
		})})
	}()
	sigs <- syscall.SIGUSR1
	sigs <- syscall.SIGUSR1 // taken once the first line is written
	close(quit)
	<-done
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) < 1 || len(lines) > 2 {
		t.Fatalf("%d lines, want 1 or 2 (the second may race quit):\n%s", len(lines), b.String())
	}
	for _, l := range lines {
		parseMemstats(t, l)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestMemstatsSignal runs the echoserver (this binary, see TestMain) on
// package net, a goroutine per connection, and sends it SIGUSR1 before and
// after it has 20 connections: each signal writes one memstats line to
// stderr, the second with at least 20 goroutines more, and the server
// goes on serving; SIGINT then ends it cleanly.
func TestMemstatsSignal(t *testing.T) {
	const conns = 20
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperArgs+"=-impl\tnet\t-lifetime\t1m")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("no announcement: %v", sc.Err())
	}
	m := regexp.MustCompile(`^echoserver listening on (\S+) `).FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("announcement %q", sc.Text())
	}
	go io.Copy(io.Discard, out)
	memstats := func() [4]int64 {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("stderr closed: the server exited on SIGUSR1")
			}
			return parseMemstats(t, l)
		case <-time.After(30 * time.Second):
			t.Fatal("no memstats line 30 s after SIGUSR1")
		}
		return [4]int64{}
	}
	before := memstats()
	var cs []net.Conn
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	msg, got := []byte("ping"), make([]byte, 4)
	for range conns {
		c, err := net.Dial("tcp", m[1])
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
	}
	after := memstats()
	t.Logf("memstats with 0 and %d connections: %v, %v", conns, before, after)
	if after[2]-before[2] < conns {
		t.Errorf("goroutines %d -> %d with %d connections on package net: want one more each at least", before[2], after[2], conns)
	}
	if after[0] <= before[0] {
		t.Errorf("heap-live %d -> %d with %d connections: want growth", before[0], after[0], conns)
	}
	// Still serving.
	if _, err := cs[0].Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cs[0], got); err != nil {
		t.Fatalf("echo after the signals: %v", err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for l := range lines { // until the server exits and closes stderr
		t.Errorf("unexpected stderr line %q", l)
	}
	exited = true
	if err := cmd.Wait(); err != nil {
		t.Errorf("server after SIGINT: %v", err)
	}
}
