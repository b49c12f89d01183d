package cref

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/testtool"
)

// watchdog bounds every wait: a server that hangs fails the test instead.
const watchdog = 30 * time.Second

// binary builds echo.c into a directory of the test's, skipping the test
// without a compiler or off Linux.
func binary(t *testing.T) string {
	t.Helper()
	path, err := Build(t.TempDir())
	if errors.Is(err, ErrNoCompiler) {
		testtool.Missing(t, "a C compiler", err)
	}
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	path, err := Build(dir)
	if errors.Is(err, ErrNoCompiler) {
		testtool.Missing(t, "a C compiler", err)
	}
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(again)
	if err != nil {
		t.Fatal(err)
	}
	if again != path || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("second Build gave %s (modified %v), want the cached %s (modified %v)", again, after.ModTime(), path, before.ModTime())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the build directory, want only the binary", len(ents))
	}

	t.Setenv("PATH", t.TempDir())
	_, err = Build(t.TempDir())
	if !errors.Is(err, ErrNoCompiler) || !strings.Contains(err.Error(), "no C compiler (cc) on PATH") {
		t.Errorf("Build without cc on PATH: %v, want an error wrapping ErrNoCompiler", err)
	}
}

// TestEcho checks every byte of messages of 1 byte to 64 KiB over several
// connections at once, then of 1 MiB messages written back to back before
// any echo is read. Those add up to more than the largest send buffer
// (loopback's MSS of 64 KiB lets one grow to MiBs: a single 1 MiB message
// fits), so the server's writes come up short and the echo has to go
// through the pending buffer and EPOLLOUT. SIGTERM then stops the server,
// whose counters must match.
func TestEcho(t *testing.T) {
	s := start(t, "-lifetime", "1m") // the bound if the test dies: SIGTERM stops it below
	const conns, rounds = 8, 3
	sizes := []int{1, 2, 15, 16, 17, 100, 1000, 1460, 4096, 10000, 16384, 65535, 65536}
	total := 0
	for _, n := range sizes {
		total += conns * rounds * n
	}
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := roundTrips(s.addr, uint64(i), rounds, sizes); err != nil {
				t.Errorf("conn %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	const big = 1 << 20
	count := maxSendBuffer(t)/big + 2
	if err := writeThenRead(s.addr, count, big); err != nil {
		t.Errorf("%d messages of %d bytes written whole: %v", count, big, err)
	}
	total += count * big

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.wait(t); err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, s.stderr.String())
	}
	st := s.stats(t)
	if st["accepted"] != conns+1 || st["bytes"] != total || st["partial_writes"] == 0 {
		t.Errorf("counters %v, want accepted=%d bytes=%d partial_writes>0", st, conns+1, total)
	}
}

// TestLifetime: the server exits by itself, with status 0, once -lifetime
// passes.
func TestLifetime(t *testing.T) {
	s := start(t, "-lifetime", "200ms")
	if err := s.wait(t); err != nil {
		t.Fatalf("%v\n%s", err, s.stderr.String())
	}
	if st := s.stats(t); st["accepted"] != 0 {
		t.Errorf("counters %v, want nothing accepted", st)
	}
}

func TestFlags(t *testing.T) {
	path := binary(t)
	for _, tt := range []struct {
		name   string
		args   []string
		status int
		output string // in stdout or stderr
	}{
		{"help", []string{"-h"}, 0, "usage: echo"},
		{"equals", []string{"-addr=127.0.0.1:0", "--lifetime=1ms"}, 0, "echoserver listening on 127.0.0.1:"},
		{"seconds", []string{"-lifetime", "0.001"}, 0, "(impl=c-epoll-et)\n"},
		{"bad lifetime", []string{"-lifetime", "soon"}, 2, `"soon"`},
		{"lifetime without unit", []string{"-lifetime", "1m5"}, 2, `"1m5"`},
		{"bad addr", []string{"-addr", "nohost"}, 2, "nohost"},
		{"missing value", []string{"-addr"}, 2, "needs an argument"},
		{"unknown flag", []string{"-port", "1"}, 2, "not defined: -port"},
		{"extra", []string{"extra"}, 2, "unexpected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), watchdog)
			defer cancel()
			out, err := exec.CommandContext(ctx, path, tt.args...).CombinedOutput()
			status := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				status = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tt.status || !strings.Contains(string(out), tt.output) {
				t.Errorf("exit status %d with output %q, want %d with %q", status, out, tt.status, tt.output)
			}
		})
	}
}

// server is a running echo binary.
type server struct {
	cmd    *exec.Cmd
	addr   string       // announced
	stderr bytes.Buffer // complete once exited is closed
	exited chan struct{}
	err    error // what Wait returned; set before exited is closed
}

var announce = regexp.MustCompile(`^echoserver listening on (127\.0\.0\.1:\d+) \(impl=c-epoll-et\)$`)

// start runs the binary with args and waits for its announce line. The
// test's cleanup kills the server if it still runs.
func start(t *testing.T, args ...string) *server {
	t.Helper()
	s := &server{cmd: exec.Command(binary(t), args...), exited: make(chan struct{})}
	s.cmd.Stderr = &s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout) // all read before Wait closes the pipe
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
	select {
	case line, ok := <-lines:
		if !ok {
			<-s.exited
			t.Fatalf("server exited before announcing: %v\n%s", s.err, s.stderr.String())
		}
		m := announce.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first line %q is not the announce line", line)
		}
		s.addr = m[1]
	case <-time.After(watchdog):
		t.Fatal("server never announced its address")
	}
	return s
}

// wait waits for the server to exit and returns what exec's Wait did.
func (s *server) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-s.exited:
		return s.err
	case <-time.After(watchdog):
		t.Fatal("server did not exit")
		return nil
	}
}

var counters = regexp.MustCompile(`(?m)^echo: accepted=(\d+) bytes=(\d+) partial_writes=(\d+)$`)

// stats are the counters the server printed on exit.
func (s *server) stats(t *testing.T) map[string]int {
	t.Helper()
	m := counters.FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no counters on stderr:\n%s", s.stderr.String())
	}
	st := map[string]int{}
	for i, k := range []string{"accepted", "bytes", "partial_writes"} {
		st[k], _ = strconv.Atoi(m[i+1])
	}
	return st
}

// roundTrips sends rounds messages of every size in sizes over one
// connection, each written in up to three pieces of random length while
// its echo is read, and checks every echo byte for byte before the next
// message.
func roundTrips(addr string, seed uint64, rounds int, sizes []int) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 0x63726566)) // "cref"
	for r := range rounds {
		for _, n := range sizes {
			msg := random(rng, n)
			cut1, cut2 := rng.IntN(n+1), rng.IntN(n+1)
			if cut1 > cut2 {
				cut1, cut2 = cut2, cut1
			}
			wrote := make(chan error, 1)
			go func() {
				for _, piece := range [][]byte{msg[:cut1], msg[cut1:cut2], msg[cut2:]} {
					if _, err := c.Write(piece); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			}()
			if err := readEcho(c, msg); err != nil {
				return fmt.Errorf("round %d, %d bytes: %w", r, n, err)
			}
			if err := <-wrote; err != nil {
				return fmt.Errorf("round %d, %d bytes: write: %w", r, n, err)
			}
		}
	}
	return nil
}

// writeThenRead writes count messages of n bytes back to back, then reads
// their echoes, over a connection whose receive buffer is set small before
// it connects, so that the echoes wait in the server's send buffer.
func writeThenRead(addr string, count, n int) error {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(watchdog)); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(n), 0))
	msgs := make([][]byte, count)
	for i := range msgs {
		msgs[i] = random(rng, n)
		if _, err := c.Write(msgs[i]); err != nil {
			return fmt.Errorf("write %d: %w", i, err)
		}
	}
	for i, msg := range msgs {
		if err := readEcho(c, msg); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
	}
	return nil
}

// maxSendBuffer is the most a TCP send buffer can grow to, tcp_wmem's
// third field (4 MiB by default).
func maxSendBuffer(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("tcp_wmem %q: %v", b, err)
	}
	return n
}

func dial(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return c, c.SetDeadline(time.Now().Add(watchdog))
}

func random(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// readEcho reads len(msg) bytes and checks they are msg.
func readEcho(c net.Conn, msg []byte) error {
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, msg) {
		i := 0
		for got[i] == msg[i] {
			i++
		}
		return fmt.Errorf("echo differs from byte %d on", i)
	}
	return nil
}
