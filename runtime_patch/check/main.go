// Check proves that each edgepoll runtime setting is really active in a
// program built with the patched toolchain (runtime_patch/build.sh). It runs
// itself as a child with GODEBUG set and looks at what the child did:
//
//	check [-n rounds] [-shards n] [-spin µs] oneshot|spin|spinauto|spinquota|shards|shortread
//
// The checks:
//
//   - oneshot: the child ping-pongs over loopback TCP under strace. With
//     netpolloneshot=1 every park re-arms the fd with one EPOLL_CTL_MOD, so
//     the number of EPOLL_CTL_MOD calls must equal the number of parks: the
//     reads, writes and accepts that failed with EAGAIN plus the connects
//     that returned EINPROGRESS. Without the setting there must be none.
//   - spin: the child, pinned to CPU 0, ping-pongs with netpollspin=<µs>
//     and netpollstats=1 against an echo child pinned to CPU 1, so its
//     only goroutine parks on every round and its P has nothing to run
//     until the reply comes from the other CPU: the runtime's counters,
//     printed when main returns, must show goroutines found by the
//     spinning P. Without the setting, none. (With both ends in one
//     process the other P often runs the peer and readies the goroutine
//     itself; with both on one CPU the peer waits for the spinner's CPU
//     until the spin ends. Either way the count depended on scheduling.)
//   - spinauto: the same two pinned children with netpollspin=auto: the
//     spinning P must find goroutines during the traffic, and in an idle
//     window after it (sleeps, a parked reader, no network event) the
//     sessions started must stay within the bound the policy gives. See
//     spinauto.go.
//   - spinquota: the same ping-pong with netpollspin=auto, once in a
//     cgroup with a CPU quota of 0.5 CPU, which the child enters before
//     the runtime starts: the quota gate must refuse spins there, never
//     without the quota, where auto must spin. Skipped, with the reason,
//     where no such cgroup can be made, unless CI is set. See
//     spinquota.go.
//   - shards: the child, with one P, opens a listener and 160 loopback
//     connections (320 fds, more than one block of 256 fd numbers) and
//     reads /proc/self/fd and each eventpoll fd's /proc/self/fdinfo: with
//     netpollshards=n there must be n instances (the root is shard 0),
//     the other n-1 registered in the root, every connection fd
//     registered in exactly one instance, the fds of one block in the
//     same instance and those of different blocks in different ones, and
//     the listener in all n; without the setting, one instance holding
//     everything. Four concurrent ping-pongs with GOMAXPROCS=8 must show
//     Ms blocked in a single shard's epoll_wait (netpollstats). One
//     ping-pong with GOMAXPROCS=1 must show none (blocked pollers never
//     outnumber idle Ps, and the one blocking poller takes the only idle
//     P). Without the setting, none at all.
//   - shortread: the child ping-pongs 64-byte messages over loopback TCP,
//     read with a 4096-byte buffer so that every read is short, then
//     writes 16 MiB in one Write, under strace. With netpollshortread=1
//     the reads that fail with EAGAIN must fall to at most a tenth of
//     the stock count (about one per round per side), with read skips
//     and a write skip counted by the runtime; every byte is checked.
//     See shortread.go.
//
// Check fails unless runtime.Version names the patched toolchain, since a
// stock runtime ignores the settings. The child form is
// "check child pingpong|echo|epollfds|accept|idle|shortread [-n rounds] [-pairs n] [-peer addr] [-sleeps n]";
// it is for check's own use, and for measuring: "accept" dials n connections one
// after another to a listener that one goroutine accepts from, and prints
// the accepts and the process's context switches, for the runtime counters
// (GODEBUG=netpollstats=1) to be read per accept.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "child" {
		return child(args[1:], stdout)
	}
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rounds := fs.Int("n", 2000, "ping-pong round trips")
	shards := fs.Int("shards", 4, "netpollshards value for the shards check")
	spin := fs.Int("spin", 50, "netpollspin value (µs) for the spin check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: check [-n rounds] [-shards n] [-spin µs] oneshot|spin|spinauto|spinquota|shards|shortread")
	}
	if !strings.Contains(runtime.Version(), "edgepoll") {
		return fmt.Errorf("built with %s, not the patched toolchain: the settings would be ignored", runtime.Version())
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c := checker{self: self, rounds: *rounds, out: stdout}
	switch fs.Arg(0) {
	case "oneshot":
		return c.oneshot()
	case "spin":
		return c.spin(*spin)
	case "spinauto":
		return c.spinAuto()
	case "spinquota":
		return c.spinQuota()
	case "shards":
		return c.shards(*shards)
	case "shortread":
		return c.shortRead()
	}
	return fmt.Errorf("unknown check %q", fs.Arg(0))
}

type checker struct {
	self   string
	rounds int
	out    io.Writer
}

// child runs itself with GODEBUG=godebug and env added to its environment,
// and returns its stdout and stderr.
func (c checker) child(godebug string, env, wrap []string, args ...string) (stdout, stderr []byte, err error) {
	argv := append(wrap, c.self, "child")
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env...), "GODEBUG="+godebug)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("%q: %v\n%s", argv, err, e.Bytes())
	}
	return o.Bytes(), e.Bytes(), nil
}

// straced runs a child workload under strace -f with the given -e
// expression and hands the trace file to count before removing it.
func (c checker) straced(godebug, expr string, count func(trace string) error, args ...string) (stdout, stderr []byte, err error) {
	dir, err := os.MkdirTemp("", "edgepoll-check")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	trace := filepath.Join(dir, "strace.out")
	wrap := []string{"strace", "-f", "-qq", "-o", trace, "-e", expr}
	if stdout, stderr, err = c.child(godebug, nil, wrap, args...); err != nil {
		return nil, nil, err
	}
	return stdout, stderr, count(trace)
}

func (c checker) oneshot() error {
	if _, err := exec.LookPath("strace"); err != nil {
		return fmt.Errorf("the oneshot check needs strace: %v", err)
	}
	for _, on := range []bool{false, true} {
		godebug := "netpollstats=1"
		if on {
			godebug = "netpolloneshot=1,netpollstats=1"
		}
		var mods, parks int
		_, stderr, err := c.straced(godebug, "trace=epoll_ctl,read,write,accept4,connect", func(trace string) (err error) {
			mods, parks, err = countTrace(trace)
			return err
		}, "pingpong", "-n", strconv.Itoa(c.rounds))
		if err != nil {
			return err
		}
		arms, err := stat(stderr, "oneshot-arms")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "oneshot: GODEBUG=%s rounds=%d parks=%d epoll_ctl_mod=%d runtime-arms=%d\n", godebug, c.rounds, parks, mods, arms)
		switch {
		case !on && (mods != 0 || arms != 0):
			return fmt.Errorf("oneshot: %d EPOLL_CTL_MOD calls (%d counted) with the setting off, want 0", mods, arms)
		case on && parks == 0:
			return fmt.Errorf("oneshot: no park in %d round trips: the workload did not block", c.rounds)
		case on && (mods != parks || arms != uint64(mods)):
			return fmt.Errorf("oneshot: %d EPOLL_CTL_MOD calls (%d counted by the runtime) for %d parks, want exactly one per park", mods, arms, parks)
		}
	}
	fmt.Fprintln(c.out, "oneshot: ok, one EPOLL_CTL_MOD per park")
	return nil
}

// countTrace counts EPOLL_CTL_MOD calls and parks in an strace -f log.
// A park is a read, write or accept that failed with EAGAIN, or a connect
// that returned EINPROGRESS: internal/poll waits on the poller after each.
// With -f a call may be split into "<unfinished ...>" and "<... resumed>"
// lines; the operation name is on the first and the result on the last, so
// each call is counted once.
func countTrace(path string) (mods, parks int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "EPOLL_CTL_MOD"):
			mods++
		case strings.Contains(line, "= -1 EAGAIN"), strings.Contains(line, "= -1 EINPROGRESS"):
			parks++
		}
	}
	return mods, parks, sc.Err()
}

var statRE = regexp.MustCompile(`(?m)^edgepoll:.*$`)

// stat returns the named counter from the runtime's first netpollstats
// line.
func stat(stderr []byte, name string) (uint64, error) {
	lines := statLines(stderr)
	if len(lines) == 0 {
		return 0, fmt.Errorf("no edgepoll line in the child's stderr (is netpollstats=1 honoured?):\n%s", stderr)
	}
	return statIn(lines[0], name)
}

// statLines returns the runtime's netpollstats lines, in order: one when
// main returns, and one before it at each runtime.ReadMemStats.
func statLines(stderr []byte) []string {
	var lines []string
	for _, l := range statRE.FindAll(stderr, -1) {
		lines = append(lines, string(l))
	}
	return lines
}

// statIn returns the named counter from one netpollstats line.
func statIn(line, name string) (uint64, error) {
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %q", name, line)
}

// fields parses the named key=value integers of line.
func fields(line string, names ...string) (map[string]int, error) {
	kv := map[string]int{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%s in %q: %v", k, line, err)
			}
			kv[k] = n
		}
	}
	for _, name := range names {
		if _, ok := kv[name]; !ok {
			return nil, fmt.Errorf("no %s in %q", name, line)
		}
	}
	return kv, nil
}

func (c checker) spin(us int) error {
	for _, on := range []bool{false, true} {
		godebug := "netpollstats=1"
		if on {
			godebug = fmt.Sprintf("netpollspin=%d,netpollstats=1", us)
		}
		stderr, err := c.pinnedToEcho(godebug, "pingpong", "-n", strconv.Itoa(c.rounds))
		if err != nil {
			return err
		}
		found, err := stat(stderr, "spin-found")
		if err != nil {
			return err
		}
		polls, err := stat(stderr, "spin-polls")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "spin: GODEBUG=%s rounds=%d spin-polls=%d spin-found=%d\n", godebug, c.rounds, polls, found)
		switch {
		case !on && (found != 0 || polls != 0):
			return fmt.Errorf("spin: %d polls, %d goroutines found with the setting off, want 0", polls, found)
		case on && found == 0:
			return fmt.Errorf("spin: the spinning P found no goroutine in %d round trips (%d polls)", c.rounds, polls)
		}
	}
	fmt.Fprintln(c.out, "spin: ok, the spinning P finds goroutines")
	return nil
}

// pinnedToEcho runs the child workload (pingpong or idle) with godebug
// pinned to CPU 0 against an echo child pinned to CPU 1, and returns the
// workload child's stderr. The pinning is what makes the check
// deterministic: a spinning M keeps its CPU for the whole budget, so a
// peer queued behind it on the same CPU answers only after the spin has
// ended, and the spinning P finds nothing however well it works.
func (c checker) pinnedToEcho(godebug string, workload ...string) ([]byte, error) {
	return c.pinnedToEchoIn(nil, godebug, workload...)
}

// pinnedToEchoIn is pinnedToEcho with the workload child started through
// enter (a command that ends by executing its arguments, such as
// cpuGroup.enter's), and the echo child as before.
func (c checker) pinnedToEchoIn(enter []string, godebug string, workload ...string) ([]byte, error) {
	if _, err := exec.LookPath("taskset"); err != nil {
		return nil, fmt.Errorf("the spin check pins its two processes with taskset: %v", err)
	}
	if runtime.NumCPU() < 2 {
		return nil, fmt.Errorf("the spin check needs 2 CPUs, one per process; this process may use %d", runtime.NumCPU())
	}
	peer := exec.Command("taskset", "-c", "1", c.self, "child", "echo")
	peer.Env = append(os.Environ(), "GODEBUG=")
	var perr bytes.Buffer
	peer.Stderr = &perr
	out, err := peer.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := peer.Start(); err != nil {
		return nil, err
	}
	// The echo child ends by itself once the ping-pong child's connection
	// does; on any failure before that, kill it.
	stop := func() { peer.Process.Kill(); peer.Wait() }
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return nil, fmt.Errorf("echo child: no address: %v\n%s", err, perr.Bytes())
	}
	args := append(workload, "-peer", strings.TrimSpace(addr))
	wrap := append(append([]string(nil), enter...), "taskset", "-c", "0")
	_, stderr, err := c.child(godebug, nil, wrap, args...)
	if err != nil {
		stop()
		return nil, err
	}
	if err := peer.Wait(); err != nil {
		return nil, fmt.Errorf("echo child: %v\n%s", err, perr.Bytes())
	}
	return stderr, nil
}

func (c checker) shards(n int) error {
	for _, shards := range []int{0, n} {
		godebug := "netpollstats=1"
		want := 1
		if shards > 1 {
			godebug = fmt.Sprintf("netpollshards=%d,netpollstats=1", shards)
			want = shards // the root instance is shard 0
		}
		// With one P no M waits on a shard (which takes the shard out
		// of the root) while the child reads its fdinfo.
		stdout, _, err := c.child(godebug, []string{"GOMAXPROCS=1"}, nil, "epollfds")
		if err != nil {
			return err
		}
		reg, err := fields(string(stdout), "eventpoll", "nested", "conns", "once", "listener", "blocks", "splits", "used")
		if err != nil {
			return fmt.Errorf("shards: epollfds child: %v", err)
		}
		got := reg["eventpoll"]
		if got != want {
			return fmt.Errorf("shards: %d eventpoll fds with GODEBUG=%s, want %d", got, godebug, want)
		}
		wantListener, wantUsed := 1, 1
		if shards > 1 {
			wantListener, wantUsed = shards, min(reg["blocks"], shards)
		}
		switch {
		case reg["once"] != reg["conns"]:
			return fmt.Errorf("shards: %d of %d connection fds registered in exactly one epoll instance", reg["once"], reg["conns"])
		case reg["listener"] != wantListener:
			return fmt.Errorf("shards: listener registered in %d epoll instances, want %d", reg["listener"], wantListener)
		case reg["blocks"] < 2:
			return fmt.Errorf("shards: connection fds span %d blocks of 256, want 2 or more", reg["blocks"])
		case reg["splits"] != 0:
			return fmt.Errorf("shards: %d connection fds not in their block's instance", reg["splits"])
		case reg["used"] != wantUsed:
			return fmt.Errorf("shards: connection fds in %d epoll instances, want %d", reg["used"], wantUsed)
		case reg["nested"] != want-1:
			return fmt.Errorf("shards: %d epoll instances registered in another, want %d (every shard but the root, in the root)", reg["nested"], want-1)
		}
		fmt.Fprintf(c.out, "shards: GODEBUG=%s %s", godebug, stdout)
		// Whether an M waits on a shard depends on how the scheduler
		// interleaves; with idle Ps to spare, a few concurrent ping-pongs
		// make it all but certain, and a few tries make the check
		// deterministic in practice. The ping-pongs' fds must be in a
		// shard that can be waited on, not in the root (shard 0, fds 0
		// to 255): shardStats opens filler fds first.
		var waits uint64
		for try := 0; try < 3 && (try == 0 || shards > 1 && waits == 0); try++ {
			st, err := c.shardStats(godebug, 8, 4, "shard-waits")
			if err != nil {
				return err
			}
			waits = st[0]
		}
		one, err := c.shardStats(godebug, 1, 1, "shard-waits")
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "shards: GODEBUG=%s eventpoll-fds=%d shard-waits=%d (GOMAXPROCS=8, 4 pairs) shard-waits=%d (GOMAXPROCS=1, 1 pair)\n",
			godebug, got, waits, one[0])
		switch {
		case shards <= 1 && waits+one[0] != 0:
			return fmt.Errorf("shards: %d shard waits with the setting off, want 0", waits+one[0])
		case shards > 1 && waits == 0:
			return fmt.Errorf("shards: no M ever blocked in a shard's epoll_wait in %d round trips with GOMAXPROCS=8", c.rounds)
		case shards > 1 && one[0] != 0:
			return fmt.Errorf("shards: %d shard waits with GOMAXPROCS=1, want 0: blocked pollers outnumbered the idle Ps", one[0])
		}
	}
	fmt.Fprintln(c.out, "shards: ok")
	return nil
}

// shardStats runs pairs concurrent ping-pongs in a child with GOMAXPROCS=procs
// and returns the named netpollstats counters. The child first opens
// shardFill fds, so that the ping-pongs' fds are past the root's block.
func (c checker) shardStats(godebug string, procs, pairs int, names ...string) ([]uint64, error) {
	env := []string{"GOMAXPROCS=" + strconv.Itoa(procs)}
	_, stderr, err := c.child(godebug, env, nil, "pingpong", "-n", strconv.Itoa(c.rounds), "-pairs", strconv.Itoa(pairs), "-fill", strconv.Itoa(shardFill))
	if err != nil {
		return nil, err
	}
	vals := make([]uint64, len(names))
	for i, name := range names {
		if vals[i], err = stat(stderr, name); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

func child(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("child: no workload")
	}
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	rounds := fs.Int("n", 2000, "ping-pong round trips")
	pairs := fs.Int("pairs", 1, "concurrent ping-pong connections")
	peer := fs.String("peer", "", "ping-pong against this echo address instead of an in-process peer")
	fill := fs.Int("fill", 0, "open this many fds (of /dev/null) before the ping-pongs")
	sleeps := fs.Int("sleeps", idleSleeps, "idle: sleeps in the idle window after the ping-pong")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "pingpong":
		for range *fill {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return err
			}
			defer f.Close()
		}
		errc := make(chan error, *pairs)
		for range *pairs {
			go func() { errc <- pingpong(*rounds, *peer) }()
		}
		for range *pairs {
			if err := <-errc; err != nil {
				return err
			}
		}
		return nil
	case "accept":
		ctxsw, err := acceptStream(*rounds)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "accepts=%d ctxsw=%d\n", *rounds, ctxsw)
		return nil
	case "echo":
		return echoOne(stdout)
	case "idle":
		return idleAfterPingPong(*rounds, *sleeps, *peer)
	case "shortread":
		line, err := shortReadPingPong(*rounds)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	case "epollfds":
		line, err := epollFDs()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, line)
		return nil
	}
	return fmt.Errorf("child: unknown workload %q", args[0])
}

// pingpong sends one byte back and forth rounds times over loopback TCP,
// so both sides park on every round. The other side is an echo goroutine
// in this process, or the echo server at peer if peer is not empty.
func pingpong(rounds int, peer string) error {
	if peer != "" {
		c, err := net.Dial("tcp", peer)
		if err != nil {
			return err
		}
		defer c.Close()
		return ping(c, rounds)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 1)
		for range rounds {
			if _, err := io.ReadFull(c, buf); err != nil {
				errc <- err
				return
			}
			if _, err := c.Write(buf); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ping(c, rounds); err != nil {
		return err
	}
	return <-errc
}

// ping writes one byte to c and reads it back, rounds times.
func ping(c net.Conn, rounds int) error {
	buf := []byte{'x'}
	for range rounds {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
	}
	return nil
}

// echoOne accepts one connection on a loopback listener whose address it
// has printed to stdout, echoes what it sends until it ends, and returns.
func echoOne(stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Fprintln(stdout, ln.Addr()); err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.Copy(c, c)
	return err
}

// acceptStream dials n connections over loopback TCP one after another
// while a goroutine accepts and closes them, and returns the process's
// context switches over the stream.
func acceptStream(n int) (int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		for range n {
			c, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			c.Close()
		}
		errc <- nil
	}()
	before := contextSwitches()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return 0, err
		}
		c.Close()
	}
	if err := <-errc; err != nil {
		return 0, err
	}
	return contextSwitches() - before, nil
}

func contextSwitches() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Nvcsw + ru.Nivcsw
}

// epollFDs starts the runtime's poller with a listener and counts the
// eventpoll instances among the process's fds.
func epollFDs() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	// Enough connections that their fds span more than one block of 256
	// fd numbers, the unit netpollshards deals fds to shards in.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range spreadPairs {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return "", err
		}
		conns = append(conns, c)
		s, err := ln.Accept()
		if err != nil {
			return "", err
		}
		conns = append(conns, s)
	}
	lfd, err := sysFD(ln.(*net.TCPListener))
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return "", err
	}
	// in[fd] lists the eventpoll instances a socket fd is registered in.
	in := map[int][]int{}
	instances, nested := 0, 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != "anon_inode:[eventpoll]" {
			continue
		}
		instances++
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			return "", err
		}
		epfd, _ := strconv.Atoi(e.Name())
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "tfd:" {
				continue
			}
			tfd, err := strconv.Atoi(f[1])
			if err != nil {
				return "", fmt.Errorf("fdinfo %s: %q", e.Name(), line)
			}
			switch t, _ := os.Readlink(filepath.Join("/proc/self/fd", f[1])); {
			case strings.HasPrefix(t, "socket:"):
				in[tfd] = append(in[tfd], epfd)
			case t == "anon_inode:[eventpoll]":
				nested++
			}
		}
	}
	// once: connection fds registered in exactly one instance.
	// splits: fds of one block that sit in different instances.
	// instancesUsed: distinct instances holding connection fds.
	once, splits := 0, 0
	blockHome := map[int]int{}
	used := map[int]bool{}
	for fd, eps := range in {
		if fd == lfd {
			continue
		}
		if len(eps) == 1 {
			once++
		}
		used[eps[0]] = true
		if h, ok := blockHome[fd/256]; ok && h != eps[0] {
			splits++
		}
		blockHome[fd/256] = eps[0]
	}
	return fmt.Sprintf("eventpoll=%d nested=%d conns=%d once=%d listener=%d blocks=%d splits=%d used=%d",
		instances, nested, len(conns), once, len(in[lfd]), len(blockHome), splits, len(used)), nil
}

// shardFill is how many fds the shard ping-pongs open before they start:
// their fds then start at about 300, in the second block of 256 fd numbers,
// which is shard 1.
const shardFill = 300

// spreadPairs is how many loopback connections the epollfds child opens.
const spreadPairs = 160

// sysFD returns the fd number of a listener.
func sysFD(ln *net.TCPListener) (int, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		return 0, err
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return 0, err
	}
	return fd, nil
}
