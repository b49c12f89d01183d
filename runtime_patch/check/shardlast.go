package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The shardlast check: with netpollshards=2, an M blocked in epoll_wait
// on shard 1 must not stay there once the shard's last fd is closed.
//
// A shard waiter blocks without a timeout, and netpollShardWait looks at
// the shard's fd count only before it blocks: a shard that loses its last
// fd while an M waits on it would keep that M asleep until some later fd
// of the shard has an event, which may be never.
//
// The child ("check child shardlast"), GOMAXPROCS=4, opens fds up to
// past 256, so that a UDP socket lands in shard 1 (fd numbers 256 to
// 511) as its only fd, and keeps a goroutine parked on a connection in the root
// (so that there are network waiters, which shard waiters need). It
// makes bursts of parallel work until /proc/self/task shows a thread in
// epoll_wait on shard 1's epoll fd (found through /proc/self/fdinfo: the
// instance holding the socket), closes the socket (no event: nothing but
// the runtime's own wake can end that epoll_wait), and
// then waits, up to shardLastWatchdog, for no thread to be left in
// epoll_wait on that fd; the runtime must have counted the wake
// (shard-lastfd-wakes). Without the setting there is no shard and the
// child reports a skip. Only linux/amd64's syscall numbers are known;
// elsewhere it reports a skip too.

const shardLastWatchdog = 5 * time.Second

func (c checker) shardLast() error {
	stdout, stderr, err := c.child("netpollshards=2,netpollstats=1", []string{"GOMAXPROCS=4"}, nil, "shardlast")
	if err != nil {
		return err
	}
	report := strings.TrimSpace(string(stdout))
	wakes, err := stat(stderr, "shard-lastfd-wakes")
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "shardlast: GODEBUG=netpollshards=2 %s shard-lastfd-wakes=%d\n", report, wakes)
	switch {
	case strings.HasPrefix(report, "skip"):
	case !strings.HasPrefix(report, "left"):
		return fmt.Errorf("shardlast: unexpected report %q", report)
	case wakes == 0:
		return errors.New("shardlast: the waiter left, but the runtime woke none for a shard's last fd (shard-lastfd-wakes=0)")
	}
	fmt.Fprintln(c.out, "shardlast: ok, no M waits on a shard without fds")
	return nil
}

// epollWaitCalls are the amd64 numbers of epoll_wait, epoll_pwait and
// epoll_pwait2.
var epollWaitCalls = map[string]bool{"232": true, "281": true, "441": true}

// shardLastChild runs the child's part and returns its report.
func shardLastChild() (string, error) {
	if runtime.GOARCH != "amd64" {
		return "skip: the epoll_wait syscall numbers are known for amd64 only", nil
	}
	// Fill fds 0 to 255 and some: the next sockets are in shard 1.
	var fill []*os.File
	defer func() {
		for _, f := range fill {
			f.Close()
		}
	}()
	for range shardFill {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return "", err
		}
		fill = append(fill, f)
	}
	// A connection in the root with a reader parked on it: network
	// waiters, without which no M waits on a shard. Three low fds are
	// freed for it (its listener, then both ends); the listener's is
	// free again afterwards and takes the next listener, so that the
	// shard-1 connection's ends get the first fds past the filler.
	for _, f := range fill[:3] {
		f.Close()
	}
	fill = fill[3:]
	ra, rb, err := loopbackPair(nil, nil)
	if err != nil {
		return "", err
	}
	defer ra.Close()
	defer rb.Close()
	if fd, _ := connFD(ra); fd >= 256 {
		return "", fmt.Errorf("the root connection's fd is %d, want one below 256", fd)
	}
	parked := make(chan error, 1)
	go func() {
		_, err := ra.Read(make([]byte, 1))
		parked <- err
	}()
	// The root connection's listener left a low fd free: fill it, so
	// that the next socket gets the first fd past the filler.
	f, err := os.Open(os.DevNull)
	if err != nil {
		return "", err
	}
	fill = append(fill, f)
	// Shard 1's only fd: a UDP socket, which no event will ever wake
	// a waiter for, before or after it is closed (a TCP connection's
	// close would post its peer an event on the way).
	u, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	fu, err := connFD(u.(net.Conn))
	if err != nil {
		u.Close()
		return "", err
	}
	if fu < 256 || fu >= 512 {
		u.Close()
		return "", fmt.Errorf("the UDP socket's fd is %d, want one in 256-511 (shard 1)", fu)
	}
	epfd, err := epollHolding(fu)
	if err != nil {
		u.Close()
		return "", err
	}
	if epfd < 0 {
		u.Close()
		return "skip: no epoll instance holds the socket (netpollshards off?)", nil
	}
	// Bursts of parallel work until an M waits on the shard.
	deadline := time.Now().Add(shardLastWatchdog)
	tries := 0
	for {
		n, err := waitersOn(epfd)
		if err != nil {
			return "", err
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			u.Close()
			return fmt.Sprintf("skip: no M waited on shard 1 in %d bursts", tries), nil
		}
		tries++
		burst()
	}
	// The shard loses its last fd.
	u.Close()
	closed := time.Now()
	for {
		n, err := waitersOn(epfd)
		if err != nil {
			return "", err
		}
		if n == 0 {
			break
		}
		if time.Since(closed) > shardLastWatchdog {
			return "", fmt.Errorf("%d threads still in epoll_wait on shard 1 (epfd %d) %v after its last fd was closed", n, epfd, shardLastWatchdog)
		}
		// A wait for the kernel's view of the threads, which no channel
		// can signal.
		time.Sleep(time.Millisecond)
	}
	rb.Write([]byte{1})
	if err := <-parked; err != nil {
		return "", err
	}
	return fmt.Sprintf("left: no M in epoll_wait on shard 1 after its last fd was closed (bursts=%d)", tries), nil
}

// burst runs GOMAXPROCS goroutines for a moment and waits for them, so
// that several Ms go idle together afterwards.
func burst() {
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end := time.Now().Add(200 * time.Microsecond)
			for time.Now().Before(end) {
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Millisecond)
}

// connFD returns c's fd number.
func connFD(c net.Conn) (int, error) {
	var fd int
	err := rawControl(mustRaw(c), func(s int) error { fd = s; return nil })
	return fd, err
}

func mustRaw(c net.Conn) syscall.RawConn {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		panic(err)
	}
	return rc
}

// epollHolding returns the eventpoll fd of this process whose fdinfo
// lists fd as a target, or -1.
func epollHolding(fd int) (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf("tfd: %8d ", fd)
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		if strings.Contains(string(info), want) {
			return strconv.Atoi(e.Name())
		}
	}
	return -1, nil
}

// waitersOn counts this process's threads blocked in an epoll_wait
// syscall on epfd (/proc/self/task/*/syscall: the number, then the
// arguments in hex).
func waitersOn(epfd int) (int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", t.Name(), "syscall"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) < 2 || !epollWaitCalls[f[0]] {
			continue
		}
		if arg, err := strconv.ParseInt(strings.TrimPrefix(f[1], "0x"), 16, 64); err == nil && int(arg) == epfd {
			n++
		}
	}
	return n, nil
}
