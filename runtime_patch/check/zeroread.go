package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The zeroread check (GODEBUG=netpollzeroread=1, patch 006): a child runs
// zeroReadChild with the setting and without it, and each asserts what a
// Read of zero bytes from a stream socket does there, on TCP and on a unix
// stream socket:
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
//   - reset: after the peer resets the connection (TCP: a close with
//     SO_LINGER 0; unix: a close with data unread) it returns (0, nil),
//     and the next Read fails with ECONNRESET, not EOF: the check leaves
//     the pending error for it.
//   - pingpong: 300 round trips, each server Read preceded by a zero-byte
//     one, which must return with the socket readable (a peek finds the
//     byte).
//   - stale: the peer writes 4 MB in random bursts of up to 8 KiB while
//     the server alternates zero-byte Reads with Reads of random sizes,
//     so edges for data the server has already read may reach the poller
//     late; every zero-byte Read must return with the socket readable,
//     and every byte must arrive in order.
//
// The parent reads the runtime's counters (netpollstats=1): with the
// setting, some wakes were trusted without a second ppoll (zeroread-fresh,
// poll_runtime_pollReadFresh); without it, both counters stay 0.
func (c checker) zeroRead() error {
	for _, on := range []bool{false, true} {
		godebug := "netpollstats=1"
		args := []string{"zeroread"}
		if on {
			godebug = "netpollzeroread=1,netpollstats=1"
			args = append(args, "-on")
		}
		stdout, stderr, err := c.child(godebug, nil, nil, args...)
		if err != nil {
			return err
		}
		var st [2]uint64
		for i, name := range []string{"zeroread-fresh", "zeroread-checked"} {
			if st[i], err = stat(stderr, name); err != nil {
				return err
			}
		}
		switch {
		case on && st[0] == 0:
			return fmt.Errorf("zeroread: no wake was trusted without a second check (zeroread-fresh=0, checked=%d)", st[1])
		case !on && st[0]+st[1] != 0:
			return fmt.Errorf("zeroread: counters moved without the setting: fresh=%d checked=%d", st[0], st[1])
		}
		fmt.Fprintf(c.out, "zeroread: GODEBUG=%s zeroread-fresh=%d zeroread-checked=%d %s", godebug, st[0], st[1], stdout)
	}
	fmt.Fprintln(c.out, "zeroread: ok, zero-byte Reads wait under the setting and return at once without it")
	return nil
}

// zeroReadChild asserts the behaviours above, the setting on or off.
func zeroReadChild(on bool, stdout io.Writer) error {
	var results []string
	for _, network := range []string{"tcp", "unix"} {
		for _, tc := range []struct {
			name string
			f    func(network string, on bool) error
		}{
			{"waits", zeroReadWaits}, {"queued", zeroReadQueued}, {"deadline", zeroReadDeadline},
			{"close", zeroReadClose}, {"reset", zeroReadReset},
			{"pingpong", zeroReadPingPong}, {"stale", zeroReadStale},
		} {
			if !on && tc.name != "waits" && tc.name != "queued" {
				continue // a zero-byte Read returns at once: nothing to end
			}
			if err := tc.f(network, on); err != nil {
				return fmt.Errorf("zeroread %s %s (setting on: %v): %w", network, tc.name, on, err)
			}
			results = append(results, network+"-"+tc.name+"=ok")
		}
	}
	fmt.Fprintln(stdout, strings.Join(results, " "))
	return nil
}

// pair returns both ends of a connection over loopback TCP or a unix
// stream socket.
func pair(network string) (client, server net.Conn, err error) {
	addr := "127.0.0.1:0"
	if network == "unix" {
		dir, err := os.MkdirTemp("", "edgepoll-zeroread")
		if err != nil {
			return nil, nil, err
		}
		defer os.RemoveAll(dir)
		addr = filepath.Join(dir, "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	client, err = net.Dial(network, ln.Addr().String())
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

func zeroReadWaits(network string, on bool) error {
	client, server, err := pair(network)
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

func zeroReadQueued(network string, on bool) error {
	client, server, err := pair(network)
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

func zeroReadDeadline(network string, _ bool) error {
	client, server, err := pair(network)
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

func zeroReadClose(network string, on bool) error {
	client, server, err := pair(network)
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

func zeroReadReset(network string, on bool) error {
	client, server, err := pair(network)
	if err != nil {
		return err
	}
	defer server.Close()
	res, err := zeroReadAsync(server, on)
	if err != nil {
		client.Close()
		return err
	}
	if tc, ok := client.(*net.TCPConn); ok {
		tc.SetLinger(0)
	} else if _, err := server.Write([]byte{1}); err != nil {
		return err // unix: the peer closes with this byte unread
	}
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

func zeroReadPingPong(network string, _ bool) error {
	client, server, err := pair(network)
	if err != nil {
		return err
	}
	defer client.Close()
	defer server.Close()
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		for {
			if _, err := server.Read(nil); err != nil {
				done <- err
				return
			}
			if err := peekReadable(server); err != nil {
				done <- err
				return
			}
			if _, err := server.Read(b[:]); err != nil {
				done <- err
				return
			}
			if _, err := server.Write(b[:]); err != nil {
				done <- err
				return
			}
		}
	}()
	var b [1]byte
	for i := range 300 {
		if _, err := client.Write([]byte{byte(i)}); err != nil {
			return err
		}
		if _, err := io.ReadFull(client, b[:]); err != nil || b[0] != byte(i) {
			return fmt.Errorf("round trip %d: %d %v", i, b[0], err)
		}
	}
	client.Close()
	if err := <-done; err != io.EOF {
		return fmt.Errorf("server: %v, want EOF after the last round trip", err)
	}
	return nil
}

func zeroReadStale(network string, _ bool) error {
	const total = 4 << 20
	client, server, err := pair(network)
	if err != nil {
		return err
	}
	defer client.Close()
	defer server.Close()
	wrote := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(1, 2))
		const most = 8 << 10
		buf := make([]byte, most+251) // byte i of the stream is i%251
		for i := range buf {
			buf[i] = byte(i % 251)
		}
		for n := 0; n < total; {
			k := min(1+rng.IntN(most), total-n)
			if _, err := client.Write(buf[n%251 : n%251+k]); err != nil {
				client.Close() // the reader sees EOF short of total
				wrote <- err
				return
			}
			n += k
			if rng.IntN(2) == 0 {
				runtime.Gosched() // let the reader catch up and park
			}
		}
		wrote <- client.(interface{ CloseWrite() error }).CloseWrite()
	}()
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 64<<10)
	got, waits := 0, 0
	for {
		if _, err := server.Read(nil); err != nil {
			return fmt.Errorf("zero-byte Read after %d bytes: %v", got, err)
		}
		waits++
		if err := peekReadable(server); err != nil {
			return fmt.Errorf("after %d bytes and %d zero-byte Reads: %v", got, waits, err)
		}
		n, err := server.Read(buf[:1+rng.IntN(len(buf))])
		for i := range n {
			if buf[i] != byte((got+i)%251) {
				return fmt.Errorf("byte %d is %d, want %d", got+i, buf[i], (got+i)%251)
			}
		}
		got += n
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if got != total {
		return fmt.Errorf("got %d bytes, want %d", got, total)
	}
	return <-wrote
}

// peekReadable returns an error unless a read of c would not block: it
// peeks at one byte without waiting (the peer never resets c here, so the
// peek consumes no error a Read should see).
func peekReadable(c net.Conn) error {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	if err := rc.Control(func(fd uintptr) {
		var b [1]byte
		_, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return err
	}
	if perr == syscall.EAGAIN {
		return errors.New("a zero-byte Read returned with nothing to read")
	}
	return perr
}
