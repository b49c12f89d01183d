package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// The shortread check: with GODEBUG=netpollshortread=1 a Read that follows
// a short read from a TCP socket waits for readiness before its read
// syscall, so the read that would fail with EAGAIN is not made; a Write
// whose write was short waits the same way before its next write.
//
// The child ("check child shortread") runs, over loopback TCP in one
// process, rounds of a ping-pong of shortMsg-byte messages that each side
// reads with a shortBuf-byte buffer, so that every read is short, then
// one Write of shortBulk bytes, far more than a socket's send buffer, so
// that its writes are short. Every message and the bulk carry a pattern
// that the reader checks byte for byte; the child fails on any mismatch.
// It runs under strace -f, once with GODEBUG=netpollstats=1 and once with
// netpollshortread=1 added, and the check counts the read and write
// syscalls of the whole process, and those that failed with EAGAIN. It
// asserts, by counts and never by times:
//
//   - both runs completed every round and the bulk with the right bytes;
//   - stock: the runtime took no skip, and at least one read failed with
//     EAGAIN per round (the ping-pong parks on every round, about once per
//     side: what the setting exists to remove);
//   - netpollshortread=1: reads that failed with EAGAIN fell to at most a
//     tenth of the stock count, the runtime counted at least one read
//     skip per round (shortread-skips), and the bulk Write took a write
//     skip (shortwrite-skips > 0).
//
// Writes that fail with EAGAIN are printed, not asserted: in the stock
// run whether the write after a short write finds the buffer still full
// depends on how fast the reader drains it.

// The shortread workload.
const (
	shortMsg  = 64       // bytes per ping-pong message
	shortBuf  = 4096     // read buffer: every read of a message is short
	shortBulk = 16 << 20 // bytes of the one bulk Write, past any send buffer
)

func (c checker) shortRead() error {
	if _, err := exec.LookPath("strace"); err != nil {
		return fmt.Errorf("the shortread check needs strace: %v", err)
	}
	var stock syscallCounts
	for _, on := range []bool{false, true} {
		godebug := "netpollstats=1"
		if on {
			godebug = "netpollshortread=1,netpollstats=1"
		}
		var counts syscallCounts
		stdout, stderr, err := c.straced(godebug, "trace=read,write", func(trace string) (err error) {
			counts, err = countCalls(trace)
			return err
		}, "shortread", "-n", strconv.Itoa(c.rounds))
		if err != nil {
			return err
		}
		st := map[string]uint64{}
		for _, name := range []string{"shortread-skips", "shortwrite-skips", "shortread-refused", "shortread-sticky"} {
			if st[name], err = stat(stderr, name); err != nil {
				return err
			}
		}
		fmt.Fprintf(c.out, "shortread: GODEBUG=%s %s reads=%d eagain-reads=%d writes=%d eagain-writes=%d shortread-skips=%d shortwrite-skips=%d shortread-refused=%d shortread-sticky=%d\n",
			godebug, strings.TrimSpace(string(stdout)), counts.reads, counts.readAgain, counts.writes, counts.writeAgain,
			st["shortread-skips"], st["shortwrite-skips"], st["shortread-refused"], st["shortread-sticky"])
		if err := judgeShortRead(on, c.rounds, stdout, counts, stock, st); err != nil {
			return err
		}
		if !on {
			stock = counts
		}
	}
	fmt.Fprintln(c.out, "shortread: ok, no EAGAIN read after a short read")
	return nil
}

// judgeShortRead applies the check's assertions to one run: on tells
// whether the setting was, stdout is the child's report, counts the
// strace counts, stock the stock run's counts (when on) and st the
// runtime's shortread counters.
func judgeShortRead(on bool, rounds int, stdout []byte, counts, stock syscallCounts, st map[string]uint64) error {
	report, err := fields(string(stdout), "rounds", "bulk")
	if err != nil {
		return fmt.Errorf("shortread: child: %v", err)
	}
	switch {
	case report["rounds"] != rounds || report["bulk"] != shortBulk:
		return fmt.Errorf("shortread: the child completed %d of %d rounds and %d of %d bulk bytes", report["rounds"], rounds, report["bulk"], shortBulk)
	case !on && st["shortread-skips"]+st["shortwrite-skips"] != 0:
		return fmt.Errorf("shortread: %d read and %d write skips with the setting off, want 0", st["shortread-skips"], st["shortwrite-skips"])
	case !on && counts.readAgain < rounds:
		return fmt.Errorf("shortread: %d reads failed with EAGAIN in %d rounds without the setting, want at least one per round: the ping-pong did not park", counts.readAgain, rounds)
	case on && counts.readAgain*10 > stock.readAgain:
		return fmt.Errorf("shortread: %d reads failed with EAGAIN with the setting, %d without: want at most a tenth", counts.readAgain, stock.readAgain)
	case on && st["shortread-skips"] < uint64(rounds):
		return fmt.Errorf("shortread: %d read skips in %d rounds, want at least one per round", st["shortread-skips"], rounds)
	case on && st["shortwrite-skips"] == 0:
		return fmt.Errorf("shortread: no write skip in a Write of %d bytes", shortBulk)
	}
	return nil
}

// syscallCounts counts read and write syscalls in an strace log, and
// those that failed with EAGAIN.
type syscallCounts struct {
	reads, readAgain   int
	writes, writeAgain int
}

var (
	callRE    = regexp.MustCompile(`^\d+\s+(\w+)\(`)
	resumedRE = regexp.MustCompile(`<\.\.\. (\w+) resumed>`)
)

// countCalls counts the read and write calls in an strace -f log. With
// -f a call may be split into "<unfinished ...>" and "<... resumed>"
// lines; it is counted once, on the line that has its result.
func countCalls(path string) (syscallCounts, error) {
	var n syscallCounts
	f, err := os.Open(path)
	if err != nil {
		return n, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, "<unfinished ...>") {
			continue
		}
		var name string
		if m := resumedRE.FindStringSubmatch(line); m != nil {
			name = m[1]
		} else if m := callRE.FindStringSubmatch(line); m != nil {
			name = m[1]
		} else {
			continue
		}
		again := strings.Contains(line, "= -1 EAGAIN")
		switch name {
		case "read":
			n.reads++
			if again {
				n.readAgain++
			}
		case "write":
			n.writes++
			if again {
				n.writeAgain++
			}
		}
	}
	return n, sc.Err()
}

// shortReadPingPong is the shortread child: rounds of a ping-pong of
// shortMsg-byte messages, each read with a shortBuf-byte buffer, then one
// Write of shortBulk bytes, over loopback TCP with the peer in this
// process. It checks every byte it receives and returns its report,
// "rounds=N bulk=B".
func shortReadPingPong(rounds int) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	type result struct {
		rounds, bulk int
		err          error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()
		c, err := ln.Accept()
		if err != nil {
			r.err = err
			return
		}
		defer c.Close()
		buf := make([]byte, shortBuf)
		for round := range rounds {
			if r.err = readMsg(c, buf, 'c', round); r.err != nil {
				return
			}
			if _, r.err = c.Write(shortPattern('s', round, shortMsg)); r.err != nil {
				return
			}
			r.rounds++
		}
		// The bulk: read it all with the same buffer and check it.
		want := shortPattern('b', 0, shortBulk)
		for r.bulk < shortBulk {
			n, err := c.Read(buf)
			if n > shortBulk-r.bulk || !bytes.Equal(buf[:n], want[r.bulk:r.bulk+n]) {
				r.err = fmt.Errorf("bulk: wrong bytes at %d", r.bulk)
				return
			}
			r.bulk += n
			if err != nil {
				r.err = fmt.Errorf("bulk: after %d bytes: %v", r.bulk, err)
				return
			}
		}
		_, r.err = c.Write([]byte{'k'})
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	buf := make([]byte, shortBuf)
	for round := range rounds {
		if _, err := c.Write(shortPattern('c', round, shortMsg)); err != nil {
			return "", err
		}
		if err := readMsg(c, buf, 's', round); err != nil {
			return "", err
		}
	}
	if _, err := c.Write(shortPattern('b', 0, shortBulk)); err != nil {
		return "", err
	}
	if _, err := io.ReadFull(c, buf[:1]); err != nil || buf[0] != 'k' {
		return "", fmt.Errorf("no acknowledgement of the bulk: %q, %v", buf[:1], err)
	}
	r := <-done
	if r.err != nil {
		return "", r.err
	}
	return fmt.Sprintf("rounds=%d bulk=%d", r.rounds, r.bulk), nil
}

// readMsg reads one shortMsg-byte message from c with buf, which is
// larger, and checks it against the pattern of side and round.
func readMsg(c net.Conn, buf []byte, side byte, round int) error {
	got := 0
	for got < shortMsg {
		n, err := c.Read(buf[got:])
		got += n
		if err != nil {
			return fmt.Errorf("round %d: after %d bytes: %v", round, got, err)
		}
	}
	if got != shortMsg || !bytes.Equal(buf[:got], shortPattern(side, round, shortMsg)) {
		return fmt.Errorf("round %d: got %d bytes %q, want the %d of side %c", round, got, buf[:got], shortMsg, side)
	}
	return nil
}

// shortPattern returns n bytes that name side and round, different from
// one round to the next and along the message.
func shortPattern(side byte, round, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = side ^ byte(round) ^ byte(i*7+i>>8)
	}
	return b
}
