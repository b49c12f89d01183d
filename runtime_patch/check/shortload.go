package main

import (
	"bytes"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
)

// The shortload check: netpollshortread=1 under load.
//
// A skip parks the reader until a poll harvests the socket's next edge.
// With every P busy no M sits in epoll_wait and findRunnable polls only
// once the run queues are empty (sysmon after 10 ms), so data that came
// after the short read, whose edge no poll has harvested, would wait
// behind the queued goroutines where stock Go's read returns it at once.
// The runtime therefore declines the skip while this P's run queue or
// the global one holds goroutines (shortread-runq-declined), and counts
// skips taken with either non-empty (shortread-runq-skips), which must
// stay 0.
//
// The child ("check child shortload"), with GOMAXPROCS=1 (where the
// setting pays, and where a guard of "no idle P" would turn it off for
// good), runs over loopback TCP:
//
//  1. a ping-pong of rounds short reads with nothing else to run, then
//     runtime.ReadMemStats, which prints the counters: the skips must be
//     taken (at least one per round), none with a run queue non-empty;
//  2. a stream of shortLoadMsgs messages of shortMsg bytes, read with a
//     shortBuf-byte buffer (every read short, the next message often
//     queued already), while shortLoadBusy goroutines yield in a loop so
//     that the run queue is rarely empty; every byte is checked. When
//     main returns the counters must show no skip taken with a run queue
//     non-empty over both phases and, in phase 2, skips declined for it.
//
// Counts, never times. Without the setting all three counters are 0.

const (
	shortLoadMsgs = 100000 // messages streamed in phase 2
	shortLoadBusy = 3      // goroutines keeping the run queue non-empty
)

func (c checker) shortLoad() error {
	for _, on := range []bool{false, true} {
		godebug := "netpollstats=1"
		if on {
			godebug = "netpollshortread=1,netpollstats=1"
		}
		stdout, stderr, err := c.child(godebug, []string{"GOMAXPROCS=1"}, nil, "shortload", "-n", fmt.Sprint(c.rounds))
		if err != nil {
			return err
		}
		lines := statLines(stderr)
		if len(lines) != 2 {
			return fmt.Errorf("shortload: %d netpollstats lines from the child, want 2 (after the ping-pong and at exit):\n%s", len(lines), stderr)
		}
		var st [2]map[string]uint64
		for i, l := range lines {
			st[i] = map[string]uint64{}
			for _, name := range []string{"shortread-skips", "shortread-runq-skips", "shortread-runq-declined"} {
				if st[i][name], err = statIn(l, name); err != nil {
					return fmt.Errorf("shortload: %v", err)
				}
			}
		}
		fmt.Fprintf(c.out, "shortload: GODEBUG=%s %s pingpong: skips=%d runq-skips=%d runq-declined=%d; total: skips=%d runq-skips=%d runq-declined=%d\n",
			godebug, strings.TrimSpace(string(stdout)),
			st[0]["shortread-skips"], st[0]["shortread-runq-skips"], st[0]["shortread-runq-declined"],
			st[1]["shortread-skips"], st[1]["shortread-runq-skips"], st[1]["shortread-runq-declined"])
		if err := judgeShortLoad(on, c.rounds, stdout, st); err != nil {
			return err
		}
	}
	fmt.Fprintln(c.out, "shortload: ok, no skip taken with a run queue non-empty")
	return nil
}

// judgeShortLoad applies the assertions to one run: st[0] holds the
// counters after the ping-pong, st[1] at exit.
func judgeShortLoad(on bool, rounds int, stdout []byte, st [2]map[string]uint64) error {
	report, err := fields(string(stdout), "rounds", "msgs")
	if err != nil {
		return fmt.Errorf("shortload: child: %v", err)
	}
	total := st[1]
	switch {
	case report["rounds"] != rounds || report["msgs"] != shortLoadMsgs:
		return fmt.Errorf("shortload: the child completed %d of %d rounds and %d of %d messages", report["rounds"], rounds, report["msgs"], shortLoadMsgs)
	case !on && total["shortread-skips"]+total["shortread-runq-skips"]+total["shortread-runq-declined"] != 0:
		return fmt.Errorf("shortload: counters %v without the setting, want all 0", total)
	case on && total["shortread-runq-skips"] != 0:
		return fmt.Errorf("shortload: %d skips taken with a run queue non-empty, want 0: the P runs other work before it polls, so the read waits where stock Go reads at once", total["shortread-runq-skips"])
	case on && st[0]["shortread-skips"] < uint64(rounds):
		return fmt.Errorf("shortload: %d skips in a ping-pong of %d rounds with nothing else to run, want at least one per round", st[0]["shortread-skips"], rounds)
	case on && total["shortread-runq-declined"] == st[0]["shortread-runq-declined"]:
		return fmt.Errorf("shortload: no skip declined for a non-empty run queue while %d goroutines kept it busy", shortLoadBusy)
	}
	return nil
}

// shortLoadChild runs the two phases and returns its report,
// "rounds=N msgs=M".
func shortLoadChild(rounds int) (string, error) {
	r, w, err := loopbackPair(nil, nil)
	if err != nil {
		return "", err
	}
	defer r.Close()
	defer w.Close()
	if _, err := shortPingPong(r, w, rounds); err != nil {
		return "", err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms) // prints the counters after phase 1

	var stop atomic.Bool
	busy := make(chan struct{})
	for range shortLoadBusy {
		go func() {
			defer func() { busy <- struct{}{} }()
			for !stop.Load() {
				runtime.Gosched()
			}
		}()
	}
	errc := make(chan error, 1)
	go func() {
		for i := range shortLoadMsgs {
			if _, err := w.Write(shortPattern('l', i, shortMsg)); err != nil {
				errc <- err
				return
			}
			// Let the reader run between messages, so that its reads
			// are short and the next message comes after them.
			runtime.Gosched()
		}
		errc <- nil
	}()
	msgs, err := readStream(r, shortLoadMsgs)
	stop.Store(true)
	for range shortLoadBusy {
		<-busy
	}
	if werr := <-errc; err == nil {
		err = werr
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("rounds=%d msgs=%d", rounds, msgs), nil
}

// readStream reads n messages of shortMsg bytes from c with a shortBuf
// buffer and checks each against its pattern.
func readStream(c net.Conn, n int) (int, error) {
	buf := make([]byte, shortBuf)
	var pending []byte
	msgs := 0
	for msgs < n {
		k, err := c.Read(buf)
		pending = append(pending, buf[:k]...)
		for len(pending) >= shortMsg && msgs < n {
			if !bytes.Equal(pending[:shortMsg], shortPattern('l', msgs, shortMsg)) {
				return msgs, fmt.Errorf("stream: message %d has the wrong bytes", msgs)
			}
			pending = pending[shortMsg:]
			msgs++
		}
		if err != nil && msgs < n {
			return msgs, fmt.Errorf("stream: after %d messages: %v", msgs, err)
		}
	}
	return msgs, nil
}
