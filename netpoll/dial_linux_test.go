package netpoll_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

func TestDialErrors(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	// A port that was just free: nothing listens there now.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := l.Addr().String()
	l.Close()

	ctx := context.Background()
	for _, tt := range []struct {
		name, network, addr string
		is                  error
	}{
		{"refused", "tcp", closedPort, syscall.ECONNREFUSED},
		{"unix no such file", "unix", filepath.Join(t.TempDir(), "none"), syscall.ENOENT},
		{"unknown network", "udp", "127.0.0.1:1", nil},
		{"no port", "tcp", "127.0.0.1", nil},
		{"bad port", "tcp", "127.0.0.1:notaport", nil},
		{"unresolvable", "tcp", "no-such-host.invalid:80", nil},
		{"ipv6 literal on tcp4", "tcp4", "[::1]:80", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := g.Dial(ctx, tt.network, tt.addr)
			if err == nil {
				c.Close()
				t.Fatalf("Dial(%s, %s) succeeded", tt.network, tt.addr)
			}
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "dial" {
				t.Errorf("err = %v (%T), want a dial *net.OpError", err, err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.is)
			}
		})
	}
}

func TestListenErrors(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	taken := listen(t, g, "tcp")
	for _, tt := range []struct {
		name, network, addr string
		is                  error
	}{
		{"address in use", "tcp", taken.Addr().String(), syscall.EADDRINUSE},
		{"unknown network", "udp", "127.0.0.1:0", nil},
		{"unix empty path", "unix", "", nil},
		{"unix missing dir", "unix", filepath.Join(t.TempDir(), "no", "dir", "s"), syscall.ENOENT},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, err := g.Listen(context.Background(), tt.network, tt.addr)
			if err == nil {
				l.Close()
				t.Fatalf("Listen(%s, %q) succeeded", tt.network, tt.addr)
			}
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "listen" {
				t.Errorf("err = %v (%T), want a listen *net.OpError", err, err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.is)
			}
		})
	}
}

// TestDialContext: a cancelled context or a passed deadline ends a connect,
// including one in progress. A loopback listener with a full backlog that
// never accepts drops further SYNs, so a connect to it stays in progress.
func TestDialContext(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Dial(ctx, "tcp", "127.0.0.1:1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Dial with a cancelled context: %v, want context.Canceled", err)
	}

	addr := fullBacklog(t, g)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := g.Dial(ctx, "tcp", addr)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Dial in progress past its deadline: %v, want a timeout", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	parks := netpoll.Counters(g).Total.WriteParks
	errc := make(chan error, 1)
	go func() { _, err := g.Dial(ctx, "tcp", addr); errc <- err }()
	done, expired := watchdog(t, time.Minute)
	defer done()
	if !await(expired, func() bool { return netpoll.Counters(g).Total.WriteParks > parks }) {
		t.Fatal("connect never parked")
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Dial in progress, cancelled: %v, want context.Canceled", err)
		}
	case <-expired:
		t.Fatal("cancel did not end the connect")
	}
}

// fullBacklog returns the address of a loopback listener (backlog 0, never
// accepting) whose queue has been filled, so a further connect hangs.
func fullBacklog(t *testing.T, g *netpoll.Group) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		c, err := g.Dial(ctx, "tcp", addr)
		cancel()
		if err != nil {
			return addr // this one hung: the queue is full
		}
		t.Cleanup(func() { c.Close() })
		if i > 64 {
			t.Fatal("the backlog never filled")
		}
	}
}

// TestAddresses: each end's LocalAddr is the other's RemoteAddr, with the
// types package net uses.
func TestAddresses(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			g := newGroup(t, netpoll.Config{})
			l := listen(t, g, network)
			c, s := pipe(t, g, l)
			if network == "tcp" {
				if p := c.LocalAddr().(*net.TCPAddr).Port; p == 0 || c.LocalAddr().String() != s.RemoteAddr().String() {
					t.Errorf("client local %v, server remote %v", c.LocalAddr(), s.RemoteAddr())
				}
				if c.RemoteAddr().String() != l.Addr().String() || s.LocalAddr().String() != l.Addr().String() {
					t.Errorf("client remote %v, server local %v, listener %v", c.RemoteAddr(), s.LocalAddr(), l.Addr())
				}
				return
			}
			if _, ok := c.RemoteAddr().(*net.UnixAddr); !ok || c.RemoteAddr().String() != l.Addr().String() {
				t.Errorf("unix client remote %v (%T), listener %v", c.RemoteAddr(), c.RemoteAddr(), l.Addr())
			}
		})
	}
}
