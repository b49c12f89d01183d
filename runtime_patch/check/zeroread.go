package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The zeroread check (GODEBUG=netpollzeroread=1, patch 006): a child runs
// zeroReadChild with the setting and without it, and each asserts what a
// Read of zero bytes from a TCP socket does there:
//
//   - waits: with nothing queued it parks (the goroutine is seen in IO
//     wait in waitReadable) until the peer writes, then returns (0, nil),
//     and the next Read gets the byte. Without the setting it returns
//     (0, nil) at once.
//   - queued: with a byte queued and its edge already consumed (a first
//     zero-byte Read returned for it), a second one returns at once: the
//     socket is asked after the readiness is reset (CL 22031's hazard).
//   - deadline: with nothing queued and a read deadline 50ms away it
//     fails with os.ErrDeadlineExceeded.
//   - close: a parked zero-byte Read fails with net.ErrClosed when the
//     conn is closed.
//   - reset: after the peer resets the connection it returns (0, nil),
//     and the next Read fails with ECONNRESET, not EOF: the check leaves
//     the pending error for it.
func (c checker) zeroRead() error {
	for _, on := range []bool{false, true} {
		godebug := ""
		args := []string{"zeroread"}
		if on {
			godebug = "netpollzeroread=1"
			args = append(args, "-on")
		}
		stdout, _, err := c.child(godebug, nil, nil, args...)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "zeroread: GODEBUG=%s %s", godebug, stdout)
	}
	fmt.Fprintln(c.out, "zeroread: ok, zero-byte Reads wait under the setting and return at once without it")
	return nil
}

// zeroReadChild asserts the behaviours above, the setting on or off.
func zeroReadChild(on bool, stdout io.Writer) error {
	var results []string
	for _, tc := range []struct {
		name string
		f    func(on bool) error
	}{
		{"waits", zeroReadWaits}, {"queued", zeroReadQueued}, {"deadline", zeroReadDeadline},
		{"close", zeroReadClose}, {"reset", zeroReadReset},
	} {
		if !on && tc.name != "waits" && tc.name != "queued" {
			continue // a zero-byte Read returns at once: nothing to end
		}
		if err := tc.f(on); err != nil {
			return fmt.Errorf("zeroread %s (setting on: %v): %w", tc.name, on, err)
		}
		results = append(results, tc.name+"=ok")
	}
	fmt.Fprintln(stdout, strings.Join(results, " "))
	return nil
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair() (client, server net.Conn, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	if server, err = ln.Accept(); err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, server, nil
}

// zeroReadAsync starts a zero-byte Read of c and returns its result's
// channel once the Read is parked in waitReadable (with the setting), or
// has returned (without it).
func zeroReadAsync(c net.Conn, on bool) (<-chan error, error) {
	res := make(chan error, 1)
	go func() {
		_, err := c.Read(nil)
		res <- err
	}()
	if !on {
		return res, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for !parkedInWaitReadable() {
		if time.Now().After(deadline) {
			return nil, errors.New("the zero-byte Read never parked in waitReadable")
		}
		runtime.Gosched()
	}
	return res, nil
}

// parkedInWaitReadable reports whether some goroutine is parked in IO wait
// inside internal/poll's waitReadable.
func parkedInWaitReadable() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("[IO wait")) && bytes.Contains(g, []byte("poll.(*FD).waitReadable")) {
			return true
		}
	}
	return false
}

func zeroReadWaits(on bool) error {
	client, server, err := tcpPair()
	if err != nil {
		return err
	}
	defer client.Close()
	defer server.Close()
	res, err := zeroReadAsync(server, on)
	if err != nil {
		return err
	}
	if !on {
		select {
		case err := <-res:
			return err // (0, nil) at once, as stock Go
		case <-time.After(10 * time.Second):
			return errors.New("a zero-byte Read waited without the setting")
		}
	}
	select {
	case err := <-res:
		return fmt.Errorf("the zero-byte Read returned %v with nothing queued", err)
	default:
	}
	if _, err := client.Write([]byte{7}); err != nil {
		return err
	}
	if err := <-res; err != nil {
		return fmt.Errorf("after the peer wrote: %v", err)
	}
	var b [1]byte
	if n, err := server.Read(b[:]); n != 1 || b[0] != 7 {
		return fmt.Errorf("the Read after it: %d %v, want the byte", n, err)
	}
	return nil
}

func zeroReadQueued(on bool) error {
	client, server, err := tcpPair()
	if err != nil {
		return err
	}
	defer client.Close()
	defer server.Close()
	if _, err := client.Write([]byte{7}); err != nil {
		return err
	}
	// The byte is queued and its edge has reached the poller once the
	// first zero-byte Read returns (with the setting it waits for that);
	// the second finds no new edge.
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range 2 {
		if _, err := server.Read(nil); err != nil {
			return fmt.Errorf("zero-byte Read %d with a byte queued: %v", i+1, err)
		}
	}
	var b [1]byte
	if n, err := server.Read(b[:]); n != 1 || b[0] != 7 {
		return fmt.Errorf("the Read after them: %d %v, want the byte", n, err)
	}
	return nil
}

func zeroReadDeadline(bool) error {
	client, server, err := tcpPair()
	if err != nil {
		return err
	}
	defer client.Close()
	defer server.Close()
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := server.Read(nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("got %v, want a deadline error", err)
	}
	return nil
}

func zeroReadClose(on bool) error {
	client, server, err := tcpPair()
	if err != nil {
		return err
	}
	defer client.Close()
	res, err := zeroReadAsync(server, on)
	if err != nil {
		server.Close()
		return err
	}
	server.Close()
	if err := <-res; !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("got %v, want net.ErrClosed", err)
	}
	return nil
}

func zeroReadReset(on bool) error {
	client, server, err := tcpPair()
	if err != nil {
		return err
	}
	defer server.Close()
	res, err := zeroReadAsync(server, on)
	if err != nil {
		client.Close()
		return err
	}
	client.(*net.TCPConn).SetLinger(0)
	client.Close() // a reset
	if err := <-res; err != nil {
		return fmt.Errorf("after the reset: %v, want (0, nil)", err)
	}
	var b [1]byte
	if _, err := server.Read(b[:]); !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("the Read after it: %v, want ECONNRESET (the check must leave the error)", err)
	}
	return nil
}
