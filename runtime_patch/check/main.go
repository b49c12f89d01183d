// Check proves that each edgepoll runtime setting is really active in a
// program built with the patched toolchain (runtime_patch/build.sh). It runs
// itself as a child with GODEBUG set and looks at what the child did:
//
//	check [-n rounds] [-shards n] [-spin µs] oneshot|spin|spinauto|spinquota|spinpoller|shards|shardlast|shortread|shortsafe|shortload|zeroread|httpidle
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
//   - spinpoller: four in-process ping-pongs with GOMAXPROCS=4 and
//     netpollspin=50: no M may block in netpoll while a session runs
//     (spin-beside-poller=0), the spinner holding the poller role. See
//     spinpoller.go.
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
//   - shardlast: with netpollshards=2 and GOMAXPROCS=4, a child waits
//     until /proc/self/task shows an M in epoll_wait on shard 1, closes
//     the shard's last fds, and wants no M left in epoll_wait on it
//     within 5 s. See shardlast.go.
//   - shortread: the child ping-pongs 64-byte messages over loopback TCP,
//     read with a 4096-byte buffer so that every read is short, then
//     writes 16 MiB in one Write, under strace. With netpollshortread=1
//     the reads that fail with EAGAIN must fall to at most a tenth of
//     the stock count (about one per round per side), with read skips
//     and a write skip counted by the runtime; every byte is checked.
//     See shortread.go.
//   - shortsafe: the reads netpollshortread=1 must not skip, each in a
//     child with and without the setting: SO_RCVLOWAT=64 set through a
//     connection's RawConn, through Dialer.Control, through
//     ListenConfig.Control (inherited by the accepted connection) and on
//     a socket that net only meets through FileConn; the urgent byte
//     taken through RawRead. Each reads 10 bytes that stock Go reads at
//     once, after a short read, and must get them before a 5 s watchdog
//     instead of waiting for an edge that does not come. A ping-pong of
//     short reads over MPTCP must take no skip, one over TCP must. See
//     shortsafe.go.
//   - shortload: a child with GOMAXPROCS=1 and netpollshortread=1 reads a
//     stream of short messages while goroutines keep the run queue busy:
//     the runtime must take no skip with a run queue non-empty
//     (shortread-runq-skips), must decline some for it, and must still
//     skip in a ping-pong with nothing else to run. See shortload.go.
//   - zeroread: a child, with netpollzeroread=1 and without, asserts what a
//     Read of zero bytes from a TCP or unix stream socket does: with the
//     setting it waits for a later write (parked in waitReadable), returns
//     at once for a byte queued before it with no new edge, fails with the
//     deadline and with Close, after a reset returns with the reset left
//     for the next Read, and under a ping-pong and a stream of random
//     bursts returns only with the socket readable; the runtime must have
//     trusted some wakes without a second check (zeroread-fresh); without
//     it, it returns at once and the counters stay 0. See zeroread.go.
//   - httpidle: an unmodified http.Server with 200 idle keep-alive
//     connections over TCP and over a unix socket, in a child with
//     netpollzeroread=1,httpidlezeroread=1, with httpidlezeroread=1 alone
//     and with neither: under both, every server connection waits in
//     net/http's zero-byte Read (goroutine stacks) and the runtime/metrics
//     counter of the setting counts one wait each, and the live heap per
//     connection is at least 6 KiB below the other two runs', where every
//     connection waits in bufio's Peek and nothing is counted. See
//     httpidle.go.
//
// Check fails unless runtime.Version names the patched toolchain, since a
// stock runtime ignores the settings. The child form is
// "check child pingpong|echo|epollfds|accept|idle|shardlast|shortread|shortsafe|shortload|zeroread|httpidle [-n rounds] [-pairs n] [-peer addr] [-sleeps n] [-case name] [-on]";
// it is for check's own use, and for measuring: "accept" dials n connections one
// after another to a listener that one goroutine accepts from, and prints
// the accepts and the process's context switches, for the runtime counters
// (GODEBUG=netpollstats=1) to be read per accept.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
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
		return errors.New("usage: check [-n rounds] [-shards n] [-spin µs] oneshot|spin|spinauto|spinquota|spinpoller|shards|shardlast|shortread|shortsafe|shortload|zeroread|httpidle")
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
	case "spinpoller":
		return c.spinPoller()
	case "shards":
		return c.shards(*shards)
	case "shortread":
		return c.shortRead()
	case "zeroread":
		return c.zeroRead()
	case "httpidle":
		return c.httpIdle()
	case "shortsafe":
		return c.shortSafe()
	case "shortload":
		return c.shortLoad()
	case "shardlast":
		return c.shardLast()
	}
	return fmt.Errorf("unknown check %q", fs.Arg(0))
}
