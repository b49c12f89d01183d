//go:build unix

package netpoll

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// These run waitReadable and readiness, how WaitRead and the Server's
// fallback wait on other Unix systems, on package net's sockets: on Linux
// as on those systems, since the calls (RawConn.Read, poll(2), FIONREAD)
// are the same.

// netPair returns the two ends of a package net connection on network
// (tcp or unix), closed when the test ends.
func netPair(t *testing.T, network string) (a, b net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = t.TempDir() + "/s"
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	a, err = net.Dial(network, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func rawOf(t *testing.T, c net.Conn) syscall.RawConn {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// readinessOf runs readiness on c's socket.
func readinessOf(t *testing.T, c net.Conn) (readable, hangUp bool) {
	t.Helper()
	var err error
	if cerr := rawOf(t, c).Control(func(fd uintptr) { readable, hangUp, err = readiness(int(fd)) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return readable, hangUp
}

// watchdog makes a wait that should end at once fail instead of hanging.
func watchdog(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReadable(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run("net="+network, func(t *testing.T) {
			t.Run("queued", func(t *testing.T) {
				// The reader's Read takes one byte of two after parking for
				// them: the runtime has had the edge, and the byte left
				// brings no other. The wait must see it.
				a, b := netPair(t, network)
				got := make(chan error, 1)
				go func() {
					_, err := b.Read(make([]byte, 1))
					got <- err
				}()
				if _, err := a.Write([]byte("xy")); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatal(err)
				}
				watchdog(t, b)
				if err := waitReadable(rawOf(t, b)); err != nil {
					t.Fatalf("waitReadable with a byte queued: %v", err)
				}
				if r, h := readinessOf(t, b); !r || h {
					t.Errorf("readiness with a byte queued = %v, %v; want readable, no hang-up", r, h)
				}
			})
			t.Run("arrives", func(t *testing.T) {
				a, b := netPair(t, network)
				if r, h := readinessOf(t, b); r || h {
					t.Errorf("readiness with nothing queued = %v, %v; want neither", r, h)
				}
				watchdog(t, b)
				got := make(chan error, 1)
				go func() { got <- waitReadable(rawOf(t, b)) }()
				if _, err := a.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("waitReadable: %v", err)
				}
				n, err := b.Read(make([]byte, 8))
				if n != 1 || err != nil {
					t.Errorf("Read after the wait = %d, %v; want 1, nil", n, err)
				}
			})
			t.Run("eof", func(t *testing.T) {
				a, b := netPair(t, network)
				watchdog(t, b)
				got := make(chan error, 1)
				go func() { got <- waitReadable(rawOf(t, b)) }()
				if err := a.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("waitReadable at EOF: %v", err)
				}
				if r, h := readinessOf(t, b); !r || !h {
					t.Errorf("readiness at EOF = %v, %v; want readable, hang-up", r, h)
				}
				if _, err := b.Read(make([]byte, 8)); err != io.EOF {
					t.Errorf("Read after the wait: %v, want io.EOF", err)
				}
			})
			t.Run("data-then-eof", func(t *testing.T) {
				a, b := netPair(t, network)
				if _, err := a.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if err := a.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				watchdog(t, b)
				if err := waitReadable(rawOf(t, b)); err != nil {
					t.Fatal(err)
				}
				if r, h := readinessOf(t, b); !r || h {
					t.Errorf("readiness with a byte before the FIN = %v, %v; want readable, no hang-up", r, h)
				}
			})
			t.Run("deadline", func(t *testing.T) {
				_, b := netPair(t, network)
				b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				if err := waitReadable(rawOf(t, b)); !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("waitReadable with nothing queued until the deadline: %v, want os.ErrDeadlineExceeded", err)
				}
			})
			t.Run("close", func(t *testing.T) {
				_, b := netPair(t, network)
				watchdog(t, b)
				rc := rawOf(t, b)
				got := make(chan error, 1)
				go func() { got <- waitReadable(rc) }()
				// The wait may begin before or after Close: either way it
				// ends with net.ErrClosed.
				b.Close()
				if err := <-got; !errors.Is(err, net.ErrClosed) {
					t.Errorf("waitReadable across Close: %v, want net.ErrClosed", err)
				}
			})
		})
	}
}

// TestReadinessReset: a reset is readable and a hang-up (nothing queued),
// and the error stays for the Read.
func TestReadinessReset(t *testing.T) {
	a, b := netPair(t, "tcp")
	if err := a.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	watchdog(t, b)
	got := make(chan error, 1)
	go func() { got <- waitReadable(rawOf(t, b)) }()
	a.Close() // with linger 0: a reset
	if err := <-got; err != nil {
		t.Fatalf("waitReadable on a reset: %v", err)
	}
	if r, h := readinessOf(t, b); !r || !h {
		t.Errorf("readiness after a reset = %v, %v; want readable, hang-up", r, h)
	}
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Read after the wait: %v, want ECONNRESET", err)
	}
}
