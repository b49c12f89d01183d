package netpoll_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// keepAlive is what a socket's keep-alive options read back as.
type keepAlive struct{ on, idle, intvl, cnt int }

func (k keepAlive) String() string {
	return fmt.Sprintf("SO_KEEPALIVE=%d TCP_KEEPIDLE=%d TCP_KEEPINTVL=%d TCP_KEEPCNT=%d", k.on, k.idle, k.intvl, k.cnt)
}

// keepAliveFD reads fd's keep-alive options with getsockopt.
func keepAliveFD(t testing.TB, fd int) keepAlive {
	t.Helper()
	var k keepAlive
	for _, o := range []struct {
		level, opt int
		v          *int
	}{
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, &k.on},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, &k.idle},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, &k.intvl},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, &k.cnt},
	} {
		v, err := unix.GetsockoptInt(fd, o.level, o.opt)
		if err != nil {
			t.Fatalf("getsockopt(%d, %d) on fd %d: %v", o.level, o.opt, fd, err)
		}
		*o.v = v
	}
	return k
}

// keepAliveOf reads a connection's keep-alive options through its
// SyscallConn, ours or package net's alike.
func keepAliveOf(t testing.TB, c net.Conn) keepAlive {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T is not a syscall.Conn", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var k keepAlive
	if err := rc.Control(func(fd uintptr) { k = keepAliveFD(t, int(fd)) }); err != nil {
		t.Fatal(err)
	}
	return k
}

// osKeepAlive is what a fresh TCP socket reads back: the sysctl defaults,
// which a negative KeepAliveConfig field leaves in place.
func osKeepAlive(t testing.TB) keepAlive {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return keepAliveFD(t, fd)
}

// keepAliveCases are configurations with what package net sets for them
// (want: -1 is the OS's value, osKeepAlive).
var keepAliveCases = []struct {
	name string
	ka   time.Duration
	kac  net.KeepAliveConfig
	want keepAlive
}{
	{"default", 0, net.KeepAliveConfig{}, keepAlive{1, 15, 15, 9}},
	{"off", -1, net.KeepAliveConfig{}, keepAlive{0, -1, -1, -1}},
	{"keepalive=30s", 30 * time.Second, net.KeepAliveConfig{}, keepAlive{1, 30, 15, 9}},
	{"keepalive=1500ms rounds up", 1500 * time.Millisecond, net.KeepAliveConfig{}, keepAlive{1, 2, 15, 9}},
	{"config", 0, net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}, keepAlive{1, 30, 5, 3}},
	{"config overrides off", -1, net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}, keepAlive{1, 30, 5, 3}},
	{"config zero fields", -1, net.KeepAliveConfig{Enable: true}, keepAlive{1, 15, 15, 9}},
	{"config negative fields", 0, net.KeepAliveConfig{Enable: true, Idle: -1, Interval: 7 * time.Second, Count: -1}, keepAlive{1, -1, 7, -1}},
	{"config not enabled is ignored", 0, net.KeepAliveConfig{Idle: 30 * time.Second, Count: 3}, keepAlive{1, 15, 15, 9}},
}

// resolve fills want's OS values in.
func resolveKeepAlive(want, os keepAlive) keepAlive {
	for _, p := range [][2]*int{{&want.idle, &os.idle}, {&want.intvl, &os.intvl}, {&want.cnt, &os.cnt}} {
		if *p[0] < 0 {
			*p[0] = *p[1]
		}
	}
	return want
}

// TestKeepAlive checks the keep-alive options of accepted and dialed TCP
// connections for each configuration, in every Sharing (Exclusive and
// WakeAll with two pollers sharing the one socket, ReusePort with a socket
// per poller): the values listed, the ones package net's ListenConfig and
// Dialer give the same configuration, and, on each listening socket, the
// values its connections inherit (sockopt_linux.go). Several connections
// are accepted so that each ReusePort socket is likely to serve one; the
// listening sockets themselves are read whichever served.
func TestKeepAlive(t *testing.T) {
	osKA := osKeepAlive(t)
	for _, tt := range keepAliveCases {
		want := resolveKeepAlive(tt.want, osKA)
		t.Run(tt.name, func(t *testing.T) {
			// Package net with the same configuration: the reference.
			lc := net.ListenConfig{KeepAlive: tt.ka, KeepAliveConfig: tt.kac}
			nl, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer nl.Close()
			d := net.Dialer{KeepAlive: tt.ka, KeepAliveConfig: tt.kac}
			nc, err := d.Dial("tcp", nl.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			ns, err := nl.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			if got := keepAliveOf(t, nc); got != want {
				t.Fatalf("package net dialed: %v, want %v (the table is wrong)", got, want)
			}
			if got := keepAliveOf(t, ns); got != want {
				t.Fatalf("package net accepted: %v, want %v (the table is wrong)", got, want)
			}

			for _, sh := range sharings {
				t.Run("sharing="+sh, func(t *testing.T) {
					pollers := "pollers=2"
					if sh == "single" {
						pollers = ""
					}
					cfg := cfgOf(t, join(pollers, "sharing="+sh))
					cfg.KeepAlive, cfg.KeepAliveConfig = tt.ka, tt.kac
					g := newGroup(t, cfg)
					l := listen(t, g, "tcp").(*netpoll.Listener)
					for i, fd := range netpoll.ListenerFDs(l) {
						if got := keepAliveFD(t, fd); got != want {
							t.Errorf("listening socket %d: %v, want %v", i, got, want)
						}
					}
					for i := range 4 {
						_, server := stdPipe(t, l)
						if got := keepAliveOf(t, server); got != want {
							t.Errorf("accepted %d: %v, want %v", i, got, want)
						}
					}
					client, err := g.Dial(context.Background(), "tcp", nl.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer client.Close()
					if s, err := nl.Accept(); err == nil {
						s.Close()
					}
					if got := keepAliveOf(t, client); got != want {
						t.Errorf("dialed: %v, want %v", got, want)
					}
				})
			}
		})
	}
}

// TestKeepAliveUnix shows unix sockets are left alone: no keep-alive on
// the listening socket or either end, and no error from setting it.
func TestKeepAliveUnix(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l := listen(t, g, "unix").(*netpoll.Listener)
	client, server := pipe(t, g, l)
	fds := append(netpoll.ListenerFDs(l), netpoll.FD(client), netpoll.FD(server))
	for _, fd := range fds {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE); err != nil || v != 0 {
			t.Errorf("unix socket %d: SO_KEEPALIVE = %d, %v; want 0", fd, v, err)
		}
	}
}

// keepAliveSetter is what *netpoll.Conn and *net.TCPConn share.
type keepAliveSetter interface {
	net.Conn
	SetKeepAlive(bool) error
	SetKeepAlivePeriod(time.Duration) error
	SetKeepAliveConfig(net.KeepAliveConfig) error
}

var _ keepAliveSetter = (*netpoll.Conn)(nil)

// TestConnSetKeepAlive makes the same calls on a Conn and a *net.TCPConn,
// each accepted with the default keep-alive, and checks both read back the
// values listed.
func TestConnSetKeepAlive(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	l := listen(t, g, "tcp")
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	period := func(d time.Duration) func(keepAliveSetter) error {
		return func(c keepAliveSetter) error { return c.SetKeepAlivePeriod(d) }
	}
	config := func(kc net.KeepAliveConfig) func(keepAliveSetter) error {
		return func(c keepAliveSetter) error { return c.SetKeepAliveConfig(kc) }
	}
	for _, tt := range []struct {
		name  string
		calls []func(keepAliveSetter) error
		want  keepAlive
	}{
		{"none", nil, keepAlive{1, 15, 15, 9}},
		{"SetKeepAlive(false)", []func(keepAliveSetter) error{func(c keepAliveSetter) error { return c.SetKeepAlive(false) }}, keepAlive{0, 15, 15, 9}},
		{"SetKeepAlivePeriod(40s) sets the idle time only", []func(keepAliveSetter) error{period(40 * time.Second)}, keepAlive{1, 40, 15, 9}},
		{"SetKeepAlivePeriod rounds up", []func(keepAliveSetter) error{period(2500 * time.Millisecond)}, keepAlive{1, 3, 15, 9}},
		{"SetKeepAlivePeriod(0) is the default", []func(keepAliveSetter) error{period(40 * time.Second), period(0)}, keepAlive{1, 15, 15, 9}},
		{"SetKeepAlivePeriod(-1) leaves it", []func(keepAliveSetter) error{period(40 * time.Second), period(-1)}, keepAlive{1, 40, 15, 9}},
		{"SetKeepAliveConfig", []func(keepAliveSetter) error{config(net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3})}, keepAlive{1, 30, 5, 3}},
		{"SetKeepAliveConfig negative fields leave them", []func(keepAliveSetter) error{
			config(net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}),
			config(net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}),
		}, keepAlive{1, 30, 5, 3}},
		{"SetKeepAliveConfig zero value turns off and resets", []func(keepAliveSetter) error{
			config(net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}),
			config(net.KeepAliveConfig{}),
		}, keepAlive{0, 15, 15, 9}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, ours := stdPipe(t, l)
			_, theirs := stdPipe(t, nl)
			for name, c := range map[string]keepAliveSetter{"netpoll": ours.(*netpoll.Conn), "net": theirs.(*net.TCPConn)} {
				for i, call := range tt.calls {
					if err := call(c); err != nil {
						t.Fatalf("%s: call %d: %v", name, i, err)
					}
				}
				if got := keepAliveOf(t, c); got != tt.want {
					t.Errorf("%s: %v, want %v", name, got, tt.want)
				}
			}
		})
	}
}

// TestConnSetKeepAliveConfigError: a value the kernel refuses is a
// *net.OpError wrapping setsockopt's EINVAL, as package net's.
func TestConnSetKeepAliveConfigError(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	_, server := stdPipe(t, listen(t, g, "tcp"))
	err := server.(*netpoll.Conn).SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Count: 1000})
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "set" || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("SetKeepAliveConfig(Count: 1000) = %v, want a set *net.OpError wrapping EINVAL", err)
	}
}

// TestKeepAliveConfigErrors: values Linux refuses are a *ConfigError from
// New naming the field; fields package net ignores are not checked.
func TestKeepAliveConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  netpoll.Config
		key  string // "" for valid
	}{
		{"idle too long", netpoll.Config{KeepAlive: 32768 * time.Second}, "KeepAlive"},
		{"idle at the limit", netpoll.Config{KeepAlive: 32767 * time.Second}, ""},
		{"config idle too long", netpoll.Config{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 32768 * time.Second}}, "KeepAliveConfig.Idle"},
		{"interval too long", netpoll.Config{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Interval: 32767*time.Second + 1}}, "KeepAliveConfig.Interval"},
		{"count too high", netpoll.Config{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Count: 128}}, "KeepAliveConfig.Count"},
		{"count at the limit", netpoll.Config{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Count: 127}}, ""},
		{"negative leaves the OS's", netpoll.Config{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: -5, Interval: -1, Count: -1}}, ""},
		{"config not enabled is ignored", netpoll.Config{KeepAliveConfig: net.KeepAliveConfig{Count: 1000}}, ""},
		{"off ignores the config", netpoll.Config{KeepAlive: -1, KeepAliveConfig: net.KeepAliveConfig{Idle: 1e6 * time.Second}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := netpoll.New(tt.cfg)
			if g != nil {
				g.Close()
			}
			var ce *netpoll.ConfigError
			switch {
			case tt.key == "" && err != nil:
				t.Fatalf("New: %v, want no error", err)
			case tt.key != "" && !errors.As(err, &ce):
				t.Fatalf("New: %v, want a *ConfigError for %s", err, tt.key)
			case tt.key != "" && ce.Key != tt.key:
				t.Fatalf("New: %v names %q, want %q", err, ce.Key, tt.key)
			}
		})
	}
}
