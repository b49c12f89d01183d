package netpoll_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// controlCall is one call of a Control hook, with what the socket showed.
type controlCall struct {
	network, address string
	bound            bool // getsockname showed a port or path already
}

// recorder is a Control hook that records its calls.
type recorder struct {
	mu    sync.Mutex
	calls []controlCall
	fds   []int
	err   func(n int) error // the error for the nth call (0-based), if set
}

func (r *recorder) control(network, address string, c syscall.RawConn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	call := controlCall{network: network, address: address}
	if err := c.Control(func(fd uintptr) {
		r.fds = append(r.fds, int(fd))
		sa, err := unix.Getsockname(int(fd))
		switch sa := sa.(type) {
		case *unix.SockaddrInet4:
			call.bound = sa.Port != 0
		case *unix.SockaddrInet6:
			call.bound = sa.Port != 0
		case *unix.SockaddrUnix:
			call.bound = sa.Name != "" && sa.Name != "@" // x/sys names an unbound socket "@"
		default:
			call.bound = err == nil
		}
	}); err != nil {
		return err
	}
	r.calls = append(r.calls, call)
	if r.err != nil {
		return r.err(len(r.calls) - 1)
	}
	return nil
}

func (r *recorder) recorded() []controlCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestControlArgs calls Listen and Dial with a Control hook and checks it
// ran once per socket, before bind, with the network and address package
// net passes its hook for the same call.
func TestControlArgs(t *testing.T) {
	addrs := []struct{ network, address string }{
		{"tcp", "127.0.0.1:0"},
		{"tcp4", "127.0.0.1:0"},
		{"tcp", ":0"},
		{"tcp6", "[::1]:0"},
		{"unix", ""}, // a fresh path
	}
	for _, a := range addrs {
		t.Run(a.network+"/"+a.address, func(t *testing.T) {
			if a.network == "tcp6" {
				if l, err := net.Listen("tcp6", "[::1]:0"); err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				} else {
					l.Close()
				}
			}
			address := a.address
			if a.network == "unix" {
				address = filepath.Join(t.TempDir(), "sock")
			}
			// Package net: the reference.
			var theirs recorder
			lc := net.ListenConfig{Control: theirs.control}
			nl, err := lc.Listen(context.Background(), a.network, address)
			if err != nil {
				t.Fatal(err)
			}
			nl.Close() // removes a unix path for ours
			var ours recorder
			g := newGroup(t, netpoll.Config{Control: ours.control})
			l, err := g.Listen(context.Background(), a.network, address)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			want := theirs.recorded()
			if len(want) != 1 || want[0].bound {
				t.Fatalf("package net's Listen: calls %+v, want one before bind", want)
			}
			if got := ours.recorded(); !slices.Equal(got, want) {
				t.Errorf("Listen(%q, %q): Control calls %+v, want %+v as package net's", a.network, address, got, want)
			}

			// Dial the listener, ours and net's way, with the network asked for.
			target := l.Addr().String()
			var dialTheirs, dialOurs recorder
			d := net.Dialer{Control: dialTheirs.control}
			nc, err := d.Dial(a.network, target)
			if err != nil {
				t.Fatal(err)
			}
			nc.Close()
			dg := newGroup(t, netpoll.Config{Control: dialOurs.control})
			c, err := dg.Dial(context.Background(), a.network, target)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			want = dialTheirs.recorded()
			if len(want) != 1 || want[0].bound && a.network != "unix" {
				t.Fatalf("package net's Dial: calls %+v, want one before connect", want)
			}
			if got := dialOurs.recorded(); !slices.Equal(got, want) {
				t.Errorf("Dial(%q, %q): Control calls %+v, want %+v as package net's", a.network, target, got, want)
			}
		})
	}
}

// TestControlSharing: the hook runs once per listening socket, before bind:
// once for Single, Exclusive and WakeAll (one socket), once per poller for
// ReusePort, naming the port the first socket got for the others.
func TestControlSharing(t *testing.T) {
	for _, sh := range sharings {
		t.Run("sharing="+sh, func(t *testing.T) {
			var r recorder
			cfg := cfgOf(t, "pollers=3,sharing="+sh)
			cfg.Control = r.control
			g := newGroup(t, cfg)
			l := listen(t, g, "tcp").(*netpoll.Listener)
			port := l.Addr().(*net.TCPAddr).Port
			want := []controlCall{{"tcp4", "127.0.0.1:0", false}}
			if sh == "reuseport" {
				for range 2 {
					want = append(want, controlCall{"tcp4", fmt.Sprintf("127.0.0.1:%d", port), false})
				}
			}
			if got := r.recorded(); !slices.Equal(got, want) {
				t.Errorf("Control calls %+v, want %+v", got, want)
			}
			fds := slices.Compact(slices.Sorted(slices.Values(netpoll.ListenerFDs(l))))
			if hooked := slices.Sorted(slices.Values(r.fds)); !slices.Equal(hooked, fds) {
				t.Errorf("Control saw sockets %v, the listener has %v", hooked, fds)
			}
		})
	}
}

// TestControlKeepAliveOrder: keep-alive is set after the hook, so a hook's
// keep-alive options are overridden while keep-alive is on and kept while
// it is off, on accepted and dialed connections alike, as package net's.
func TestControlKeepAliveOrder(t *testing.T) {
	hook := func(network, address string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) {
			if err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1); err == nil {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 99)
			}
		})
		return err
	}
	for _, tt := range []struct {
		name string
		ka   time.Duration
		want keepAlive
	}{
		{"on", 0, keepAlive{1, 15, 15, 9}},
		{"off", -1, keepAlive{1, 99, -1, -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := resolveKeepAlive(tt.want, osKeepAlive(t))
			lc := net.ListenConfig{Control: hook, KeepAlive: tt.ka}
			nl, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer nl.Close()
			d := net.Dialer{Control: hook, KeepAlive: tt.ka}
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
			for name, c := range map[string]net.Conn{"net dialed": nc, "net accepted": ns} {
				if got := keepAliveOf(t, c); got != want {
					t.Fatalf("%s: %v, want %v (the table is wrong)", name, got, want)
				}
			}
			g := newGroup(t, netpoll.Config{Control: hook, KeepAlive: tt.ka})
			client, server := pipe(t, g, listen(t, g, "tcp"))
			for name, c := range map[string]net.Conn{"dialed": client, "accepted": server} {
				if got := keepAliveOf(t, c); got != want {
					t.Errorf("%s: %v, want %v", name, got, want)
				}
			}
		})
	}
}

// TestControlError: a hook's error fails Listen and Dial as package net's
// does (a *net.OpError, "listen" or "dial", whose Err is the hook's error
// itself), and every socket made is closed: with ReusePort the hook fails
// on the third socket, after two were made, bound and registered.
func TestControlError(t *testing.T) {
	initRuntimePoller(t)
	errBoom := errors.New("boom")
	failAt := func(n int) func(int) error {
		return func(i int) error {
			if i == n {
				return errBoom
			}
			return nil
		}
	}
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	// Package net's Listen error, for its shape.
	lc := net.ListenConfig{Control: func(string, string, syscall.RawConn) error { return errBoom }}
	_, netErr := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	var netOp *net.OpError
	if !errors.As(netErr, &netOp) || netOp.Err != errBoom || netOp.Op != "listen" {
		t.Fatalf("package net: %#v, want a listen *net.OpError of the hook's error", netErr)
	}
	for _, tt := range []struct {
		name    string
		sharing netpoll.Sharing
		failAt  int
		network string
	}{
		{"single", netpoll.Single, 0, "tcp"},
		{"exclusive", netpoll.Exclusive, 0, "tcp"},
		{"reuseport third socket", netpoll.ReusePort, 2, "tcp"},
		{"unix", netpoll.Single, 0, "unix"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := recorder{err: failAt(tt.failAt)}
			g := newGroup(t, netpoll.Config{Sharing: tt.sharing, Pollers: 3, Control: r.control})
			address := "127.0.0.1:0"
			if tt.network == "unix" {
				address = filepath.Join(t.TempDir(), "sock")
			}
			dialTo := target.Addr().String()
			if tt.network == "unix" {
				dialTo = filepath.Join(t.TempDir(), "target")
				ul, err := net.Listen("unix", dialTo)
				if err != nil {
					t.Fatal(err)
				}
				defer ul.Close()
			}
			fds := countFDs(t)
			l, err := g.Listen(context.Background(), tt.network, address)
			var op *net.OpError
			if err == nil {
				l.Close()
				t.Fatal("Listen succeeded despite the hook's error")
			}
			if !errors.As(err, &op) || op.Op != "listen" || op.Net != tt.network || op.Err != errBoom {
				t.Errorf("Listen: %#v, want a listen *net.OpError whose Err is the hook's error", err)
			}
			if n := len(r.recorded()); n != tt.failAt+1 {
				t.Errorf("Control ran %d times, want %d", n, tt.failAt+1)
			}
			if n := countFDs(t); n != fds {
				t.Errorf("open fds %d after the failed Listen, want %d as before", n, fds)
			}

			r = recorder{err: failAt(0)}
			c, err := g.Dial(context.Background(), tt.network, dialTo)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded despite the hook's error")
			}
			if !errors.As(err, &op) || op.Op != "dial" || op.Err != errBoom {
				t.Errorf("Dial: %#v, want a dial *net.OpError whose Err is the hook's error", err)
			}
			if n := countFDs(t); n != fds {
				t.Errorf("open fds %d after the failed Dial, want %d as before", n, fds)
			}
		})
	}
}

// TestListenErrorClosesSocket: a Listen that fails at bind (the address in
// use) closes the socket it made.
func TestListenErrorClosesSocket(t *testing.T) {
	initRuntimePoller(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, sh := range sharings {
		t.Run("sharing="+sh, func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "pollers=2,sharing="+sh))
			fds := countFDs(t)
			l, err := g.Listen(context.Background(), "tcp", busy.Addr().String())
			if err == nil {
				l.Close()
				t.Fatal("Listen on an address in use succeeded")
			}
			if !errors.Is(err, unix.EADDRINUSE) {
				t.Errorf("Listen: %v, want EADDRINUSE", err)
			}
			if n := countFDs(t); n != fds {
				t.Errorf("open fds %d after the failed Listen, want %d as before", n, fds)
			}
		})
	}
}

// TestControlShortRead: a hook that sets SO_RCVLOWAT 64 (on the listening
// socket, which accepted sockets inherit, or on the dialed socket) makes a
// Read below the mark park for good if the connection skipped its syscall
// after a short read. Connections of a listener made with a hook, and
// dialed ones, carry the raw bit and skip nothing (shortReadBelowMark
// fails at its deadline instead of hanging if they do).
func TestControlShortRead(t *testing.T) {
	const lowat = 64
	hook := func(network, address string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, lowat) })
		return err
	}
	for _, sh := range []string{"single", "exclusive", "reuseport"} {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("sharing=%s/mode=%s", sh, mode), func(t *testing.T) {
				pollers := "pollers=2"
				if sh == "single" {
					pollers = ""
				}
				cfg := cfgOf(t, join(pollers, "sharing="+sh, "mode="+mode, "shortread=on"))
				cfg.Control = hook
				g := newGroup(t, cfg)
				done, expired := watchdog(t, time.Minute)
				defer done()

				l := listen(t, g, "tcp")
				peer, server := stdPipe(t, l)
				checkLowat(t, "accepted", server, lowat)
				shortReadBelowMark(t, g, mode, peer, server, expired)

				nl, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer nl.Close()
				dialed, err := g.Dial(context.Background(), "tcp", nl.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer dialed.Close()
				npeer, err := nl.Accept()
				if err != nil {
					t.Fatal(err)
				}
				defer npeer.Close()
				checkLowat(t, "dialed", dialed, lowat)
				shortReadBelowMark(t, g, mode, npeer, dialed, expired)

				if s := netpoll.Counters(g).Total.ShortSkips; s != 0 {
					t.Errorf("ShortSkips = %d, want 0", s)
				}
				for name, c := range map[string]net.Conn{"accepted": server, "dialed": dialed} {
					if netpoll.Sticky(c)&netpoll.StickyRaw == 0 {
						t.Errorf("%s: StickyRaw not kept (sticky %#x)", name, netpoll.Sticky(c))
					}
				}
			})
		}
	}
}

// checkLowat reads c's SO_RCVLOWAT on its fd directly (RawConn would turn
// skipping off itself).
func checkLowat(t *testing.T, name string, c net.Conn, want int) {
	t.Helper()
	if v, err := unix.GetsockoptInt(netpoll.FD(c), unix.SOL_SOCKET, unix.SO_RCVLOWAT); err != nil || v != want {
		t.Fatalf("%s: SO_RCVLOWAT = %d, %v; want %d", name, v, err, want)
	}
}

// TestControlRawConn: the hook's RawConn runs Control's f on the socket,
// runs a raw Read's or Write's f once and fails if it is not done (nothing
// can wait on a socket not yet registered), and fails every method once
// the hook has returned.
func TestControlRawConn(t *testing.T) {
	var kept syscall.RawConn
	var notDone, readDone, writeDone error
	hook := func(network, address string, c syscall.RawConn) error {
		kept = c
		readDone = c.Read(func(uintptr) bool { return true })
		writeDone = c.Write(func(uintptr) bool { return true })
		notDone = c.Read(func(uintptr) bool { return false })
		return nil
	}
	g := newGroup(t, netpoll.Config{Control: hook})
	listen(t, g, "tcp")
	if readDone != nil || writeDone != nil {
		t.Errorf("Read, Write with f done: %v, %v; want nil", readDone, writeDone)
	}
	if notDone == nil {
		t.Error("Read with f not done: nil error, want one")
	}
	ran := false
	if err := kept.Control(func(uintptr) { ran = true }); err == nil || ran {
		t.Errorf("Control after the hook returned: %v, f ran %v; want an error and f not run", err, ran)
	}
	if err := kept.Read(func(uintptr) bool { ran = true; return true }); err == nil || ran {
		t.Errorf("Read after the hook returned: %v, f ran %v; want an error and f not run", err, ran)
	}
}
