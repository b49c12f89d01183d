package netpoll_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestUnknownNetworks: networks other than tcp, tcp4, tcp6 and unix are
// refused by Listen and Dial, on a group and at package level, with a
// *net.OpError wrapping net.UnknownNetworkError that names the network
// (dial_linux_test.go covers udp on a group).
func TestUnknownNetworks(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	netpoll.ResetDefault()
	defer netpoll.ResetDefault()
	t.Setenv(netpoll.EnvVar, "")
	addr := "127.0.0.1:0"
	for _, network := range []string{"", "TCP", "tcp5", "udp4", "ip", "ip4:icmp", "unixgram", "unixpacket"} {
		t.Run("net="+network, func(t *testing.T) {
			ctx := context.Background()
			_, gl := g.Listen(ctx, network, addr)
			_, gd := g.Dial(ctx, network, addr)
			_, pl := netpoll.Listen(network, addr)
			_, pd := netpoll.Dial(network, addr)
			for what, err := range map[string]error{"Group.Listen": gl, "Group.Dial": gd, "Listen": pl, "Dial": pd} {
				var oe *net.OpError
				var unknown net.UnknownNetworkError
				if !errors.As(err, &oe) || !errors.As(err, &unknown) || string(unknown) != network {
					t.Errorf("%s(%q): %v (%T); want a *net.OpError wrapping net.UnknownNetworkError(%q)", what, network, err, err, network)
				}
			}
		})
	}
}

// TestBadAddresses: addresses that cannot be resolved or used, for Listen
// and Dial, fail with a *net.OpError whose message names the address or the
// part of it that is wrong (dial_linux_test.go covers a missing port, a bad
// port name, an unresolvable host and an IPv6 literal on tcp4 for Dial).
func TestBadAddresses(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("x", 120)) // past sun_path's 108 bytes
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, op, network, addr string
		names                   string // in the message
		is                      error  // wrapped, if not nil
	}{
		{"unresolvable host", "listen", "tcp", "no-such-host.invalid:0", "no-such-host.invalid", nil},
		{"port past 65535", "listen", "tcp", "127.0.0.1:65536", "65536", nil},
		{"port past 65535", "dial", "tcp", "127.0.0.1:65536", "65536", nil},
		{"negative port", "dial", "tcp", "127.0.0.1:-1", "-1", nil},
		{"unknown service", "listen", "tcp", "127.0.0.1:no-such-service", "no-such-service", nil},
		{"empty", "dial", "tcp", "", "missing port", nil},
		{"unclosed bracket", "dial", "tcp", "[::1:80", "[::1:80", nil},
		{"address not on this host", "listen", "tcp", "192.0.2.1:0", "192.0.2.1", syscall.EADDRNOTAVAIL},
		{"ipv4 literal on tcp6", "listen", "tcp6", "127.0.0.1:0", "127.0.0.1", nil},
		{"ipv4 literal on tcp6", "dial", "tcp6", "127.0.0.1:80", "127.0.0.1", nil},
		{"ipv6 literal on tcp4", "listen", "tcp4", "[::1]:0", "::1", nil},
		{"unix path too long", "listen", "unix", long, long, syscall.EINVAL},
		{"unix path too long", "dial", "unix", long, long, syscall.EINVAL},
		{"unix path under a file", "listen", "unix", filepath.Join(file, "s"), filepath.Join(file, "s"), syscall.ENOTDIR},
		{"unix path under a file", "dial", "unix", filepath.Join(file, "s"), filepath.Join(file, "s"), syscall.ENOTDIR},
	} {
		t.Run(tt.op+"/"+tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			if tt.op == "listen" {
				var l net.Listener
				if l, err = g.Listen(ctx, tt.network, tt.addr); err == nil {
					l.Close()
				}
			} else {
				var c net.Conn
				if c, err = g.Dial(ctx, tt.network, tt.addr); err == nil {
					c.Close()
				}
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != tt.op {
				t.Fatalf("%s(%s, %q) = %v (%T), want a %s *net.OpError", tt.op, tt.network, tt.addr, err, err, tt.op)
			}
			if !strings.Contains(err.Error(), tt.names) {
				t.Errorf("%q does not name %q", err, tt.names)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%v does not wrap %v", err, tt.is)
			}
		})
	}
}

// TestAcceptedLocalAddrs: connections accepted on a wildcard listener at
// two local addresses, in turns, each report the address they arrived at
// (the listener shares one copy of each between its connections).
func TestAcceptedLocalAddrs(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l, err := g.Listen(context.Background(), "tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	for i, host := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.1"} {
		c, err := net.Dial("tcp4", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got, want := s.LocalAddr().String(), c.RemoteAddr().String(); got != want {
			t.Errorf("connection %d: LocalAddr %s, want %s", i, got, want)
		}
		if got, want := s.RemoteAddr().String(), c.LocalAddr().String(); got != want {
			t.Errorf("connection %d: RemoteAddr %s, want %s", i, got, want)
		}
	}
}
