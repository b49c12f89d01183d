package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The benchmarks that need many connections open their clients in child
// processes: this test binary again, entered from TestMain when the
// environment names a role. Each process then holds one fd per
// connection, under the 20,000-fd limit, and the clients' CPU is not in
// the server's figures.

// childRoles maps the environment variable that starts a child to what
// the child does with its value. A role returns once its stdin closes.
var childRoles = map[string]func(arg string) error{
	idleClientsEnv: holdIdleClients,
	dialClientsEnv: churnClients,
}

// TestMain runs the test binary as one of childRoles when the environment
// says so, and as the tests otherwise.
func TestMain(m *testing.M) {
	for env, role := range childRoles {
		if v := os.Getenv(env); v != "" {
			if err := role(v); err != nil {
				fmt.Fprintf(os.Stderr, "%s=%s: %v\n", env, v, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

// child is a running child process. It has said "ready" on its stdout;
// closing its stdin asks it to exit.
type child struct {
	stdin  io.Closer
	exited chan struct{} // closed once the process has exited; err is set then
	err    error
}

// startChild starts this test binary with env=arg and waits for the child
// to say "ready".
func startChild(tb testing.TB, env, arg string) *child {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env+"="+arg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	line, rerr := bufio.NewReader(out).ReadString('\n')
	// Wait only once the reads from out are done, as exec.Cmd asks.
	c := &child{stdin: stdin, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	if rerr != nil || line != "ready\n" {
		c.stop()
		tb.Fatalf("%s=%s: %q, %v", env, arg, line, rerr)
	}
	return c
}

// stop closes the child's stdin and returns how it exited.
func (c *child) stop() error {
	c.stdin.Close()
	<-c.exited
	return c.err
}

// idleConns is how many idle connections BenchmarkIdleGC and
// BenchmarkStatsAccept hold unless NETPOLL_IDLE_CONNS says otherwise: as
// many as the 20,000-fd limit leaves room for with a margin, in one
// process and in the child that holds the other ends.
const idleConns = 18000

// idleConnCount is NETPOLL_IDLE_CONNS, or def when it is unset.
func idleConnCount(def int) (int, error) {
	s := os.Getenv("NETPOLL_IDLE_CONNS")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("NETPOLL_IDLE_CONNS=%q: not a count", s)
	}
	return n, nil
}

// idleClientsEnv starts the test binary as idle clients: "port,count".
const idleClientsEnv = "NETPOLL_IDLE_CLIENTS"

// idleClients starts a child process (holdIdleClients) that opens n
// connections to port, each echoing one byte, and holds them until the
// returned function ends it.
func idleClients(tb testing.TB, port, n int) (stop func()) {
	if err := raiseNoFile(n + 200); err != nil {
		tb.Fatal(err)
	}
	c := startChild(tb, idleClientsEnv, strconv.Itoa(port)+","+strconv.Itoa(n))
	return func() { c.stop() }
}

// holdIdleClients is the idle clients' child process: it opens the
// connections v ("port,count") asks for, one after another, each writing
// one byte and reading the server's echo of it, says "ready", and holds
// them until its stdin closes.
func holdIdleClients(v string) error {
	port, n, err := portCount(v)
	if err != nil {
		return err
	}
	if err := raiseNoFile(n + 200); err != nil {
		return err
	}
	sa := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
		if err := unix.Connect(fd, sa); err != nil {
			return err
		}
		var one [1]byte
		if _, err := unix.Write(fd, one[:]); err != nil {
			return err
		}
		if k, err := unix.Read(fd, one[:]); k != 1 || err != nil {
			return fmt.Errorf("idle client's echo: %d, %v", k, err)
		}
	}
	fmt.Println("ready")
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// portCount parses a child's "port,count".
func portCount(v string) (port, n int, err error) {
	ps, ns, _ := strings.Cut(v, ",")
	port, err1 := strconv.Atoi(ps)
	n, err2 := strconv.Atoi(ns)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q: want port,count", v)
	}
	return port, n, nil
}

// errFewFiles says RLIMIT_NOFILE's hard limit is below what a benchmark
// needs: no retry helps, so the benchmark skips.
var errFewFiles = errors.New("RLIMIT_NOFILE too low")

// raiseNoFile raises RLIMIT_NOFILE's soft limit to its hard limit, and
// says so (errFewFiles) if that is below need.
func raiseNoFile(need int) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if int(lim.Cur) < need {
		return fmt.Errorf("%w: %d, below the %d fds wanted", errFewFiles, lim.Cur, need)
	}
	return nil
}
