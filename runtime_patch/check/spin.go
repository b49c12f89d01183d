package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

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
