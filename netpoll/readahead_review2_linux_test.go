package netpoll_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Second review of the read-ahead fixes (commit 20d902e). Each test
// asserts what package net, io.Copy or the design promises, and fails on
// the code as it stands.

// writerFunc is an io.Writer made of a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// aheadCommand runs cmd in a hot connection's handler with input read
// ahead pending: heatAhead, then "X"+rest written at once, which the hot
// wait reads ahead whole; the handler's Read takes the "X", leaving rest.
// It returns what cmd sent on its channel.
func aheadCommand(t *testing.T, rest string, cmd func(c net.Conn) string) string {
	t.Helper()
	out := make(chan string, 1)
	h := firstByteHandler(map[byte]func(net.Conn) error{'X': func(c net.Conn) error {
		if n, _ := netpoll.ReadAhead(c); n != len(rest) {
			out <- fmt.Sprintf("%d bytes read ahead when the command began, want %d: the test shows nothing", n, len(rest))
			return io.EOF
		}
		out <- cmd(c)
		return io.EOF
	}})
	_, s, c, stop := hotFixture(t, h)
	heatAhead(t, s, c, stop)
	write(t, c, "X"+rest)
	select {
	case r := <-out:
		return r
	case <-stop:
		t.Fatal("the handler never ran the command")
		return ""
	}
}

// TestReadAheadReview2FlushHoldsRead: flushAhead now holds the source's
// read direction lock while the destination's Write runs, and WriteTo's
// destination is any io.Writer: one that blocks (a slow client's
// http.ResponseWriter, a pipe) holds every other Read of the connection
// behind a plain sync.Mutex, which neither the read deadline nor Close
// reaches. Package net's Read with a past deadline fails at once whatever
// another goroutine's io.Copy is doing ("A deadline is an absolute time
// after which I/O operations fail instead of blocking"), as this package's
// does cold, and as it did before the fix (flushAhead took the buffer and
// released the lock before it wrote). Here the writer waits for such a
// Read; with the lock held it waits until the watchdog.
func TestReadAheadReview2FlushHoldsRead(t *testing.T) {
	got := aheadCommand(t, "rest", func(c net.Conn) string {
		done, expired := watchdog(t, 10*time.Second)
		defer done()
		probed := false
		var verdict string
		w := writerFunc(func(p []byte) (int, error) {
			if probed {
				return len(p), nil
			}
			probed = true
			if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
				verdict = "SetReadDeadline: " + err.Error()
				return len(p), nil
			}
			res := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 8))
				res <- err
			}()
			select {
			case err := <-res:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					verdict = fmt.Sprintf("a Read with a past deadline, during WriteTo's write: %v, want os.ErrDeadlineExceeded", err)
				}
			case <-expired:
				verdict = "a Read with a past deadline, from another goroutine during WriteTo's write of the input read ahead, blocked until that write returned (flushAhead holds the read direction's lock across w.Write)"
			}
			return len(p), errors.New("stop") // ends WriteTo
		})
		c.(io.WriterTo).WriteTo(w)
		return verdict
	})
	if got != "" {
		t.Error(got)
	}
}

// TestReadAheadReview2InvalidWrite: flushAhead advances the buffer by
// what w.Write says it wrote without checking it against what it was
// given, as io.Copy does (errInvalidWrite: "invalid write result"). A
// Writer that reports more than len(p) (a buggy one, which io.Copy turns
// into an error) leaves lo past hi: WriteTo then goes on to copy through
// Read, whose takeAhead slices buf[lo:hi] and panics in the handler. A
// negative count would send the same bytes again. Before the fix the
// buffer was taken whole before the write, and no count could corrupt it.
func TestReadAheadReview2InvalidWrite(t *testing.T) {
	got := aheadCommand(t, "rest", func(c net.Conn) (verdict string) {
		defer func() {
			if r := recover(); r != nil {
				verdict = fmt.Sprintf("WriteTo to a Writer that over-reports its count panicked: %v; want an error, as io.Copy's \"invalid write result\"", r)
			}
		}()
		calls := 0
		w := writerFunc(func(p []byte) (int, error) {
			calls++
			if calls == 1 {
				return len(p) + 1, nil
			}
			return 0, errors.New("stop")
		})
		n, err := c.(io.WriterTo).WriteTo(w)
		if err == nil || n > int64(len("rest")) {
			return fmt.Sprintf("WriteTo to a Writer that over-reports its count: %d, %v; want at most %d and an error", n, err, len("rest"))
		}
		return ""
	})
	if got != "" {
		t.Error(got)
	}
}
