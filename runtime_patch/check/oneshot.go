package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

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
