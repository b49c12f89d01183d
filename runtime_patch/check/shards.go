package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

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
