package netpoll_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// listeningFile returns a listening socket of network as an *os.File and
// its address, made as a socket-activating parent would: through package
// net (File of a net.Listener, which is then closed) or with raw syscalls.
func listeningFile(t *testing.T, network, via string) (*os.File, net.Addr) {
	t.Helper()
	address := "127.0.0.1:0"
	if network == "unix" {
		address = filepath.Join(t.TempDir(), "sock")
	}
	switch via {
	case "net":
		nl, err := net.Listen(network, address)
		if err != nil {
			t.Fatal(err)
		}
		if ul, ok := nl.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false) // the path outlives the parent's copy
		}
		f, err := nl.(interface{ File() (*os.File, error) }).File()
		if err != nil {
			t.Fatal(err)
		}
		addr := nl.Addr()
		nl.Close()
		return f, addr
	case "raw":
		var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
		family := unix.AF_INET
		if network == "unix" {
			sa, family = &unix.SockaddrUnix{Name: address}, unix.AF_UNIX
		}
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, sa); err != nil {
			t.Fatal(err)
		}
		if err := unix.Listen(fd, 16); err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "activated")
		lsa, err := unix.Getsockname(fd)
		if err != nil {
			t.Fatal(err)
		}
		if sa, ok := lsa.(*unix.SockaddrInet4); ok {
			return f, &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: sa.Port}
		}
		return f, &net.UnixAddr{Name: address, Net: "unix"}
	}
	t.Fatalf("via %q", via)
	return nil, nil
}

// TestFileListener serves an inherited listening socket (socket
// activation) in every Sharing, from package net's File and from a raw
// socket, TCP and unix: FileListener, the caller closes its file, every
// connection echoes, the Listener's address is the socket's, its
// registrations are as documented (ReusePort served as Single), accepted
// connections carry the raw bit and, on TCP, keep-alive while the
// listening socket's own options are left alone; closing the Listener
// leaves no fd.
func TestFileListener(t *testing.T) {
	initRuntimePoller(t)
	osKA := osKeepAlive(t)
	for _, network := range []string{"tcp", "unix"} {
		for _, via := range []string{"net", "raw"} {
			for _, sh := range sharings {
				t.Run(fmt.Sprintf("%s/%s/sharing=%s", network, via, sh), func(t *testing.T) {
					g := newGroup(t, cfgOf(t, "pollers=2,sharing="+sh))
					fds := countFDs(t)
					f, addr := listeningFile(t, network, via)
					l, err := g.FileListener(f)
					if err != nil {
						t.Fatalf("FileListener: %v", err)
					}
					f.Close() // the parent's copy: ours serves alone
					if l.Addr().Network() != addr.Network() || l.Addr().String() != addr.String() {
						t.Errorf("Addr = %s %s, want %s %s", l.Addr().Network(), l.Addr(), addr.Network(), addr)
					}
					regs := netpoll.ListenerFDs(l)
					wantRegs := 1
					if sh == "exclusive" || sh == "wakeall" {
						wantRegs = 2
					}
					if len(regs) != wantRegs || len(slices.Compact(slices.Clone(regs))) != 1 {
						t.Errorf("registrations on sockets %v, want the one socket %d times", regs, wantRegs)
					}
					if network == "tcp" {
						// The group's keep-alive is not set on a socket it shares.
						if got := keepAliveFD(t, regs[0]); got != osKA {
							t.Errorf("listening socket: %v, want the OS's %v", got, osKA)
						}
					}
					done, expired := watchdog(t, time.Minute)
					defer done()
					for i := range 4 {
						echoOnce(t, l, addr, i, expired)
					}
					l.Close()
					if n := countFDs(t); n != fds {
						t.Errorf("open fds %d after Close, want %d as before", n, fds)
					}
				})
			}
		}
	}
}

// echoOnce dials addr with package net, accepts on l, checks the accepted
// connection and echoes one line through it.
func echoOnce(t *testing.T, l *netpoll.Listener, addr net.Addr, i int, expired <-chan struct{}) {
	t.Helper()
	client, err := net.Dial(addr.Network(), addr.String())
	if err != nil {
		t.Fatalf("dial %d: %v", i, err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept %d: %v", i, err)
	}
	defer server.Close()
	if netpoll.Sticky(server)&netpoll.StickyRaw == 0 {
		t.Errorf("conn %d: StickyRaw not kept (sticky %#x)", i, netpoll.Sticky(server))
	}
	if addr.Network() == "tcp" {
		if got, want := keepAliveOf(t, server), (keepAlive{1, 15, 15, 9}); got != want {
			t.Errorf("conn %d: %v, want %v", i, got, want)
		}
	}
	echoed := make(chan error, 1)
	go func() {
		b := make([]byte, 64)
		n, err := server.Read(b)
		if err == nil {
			_, err = server.Write(b[:n])
		}
		echoed <- err
	}()
	msg := fmt.Sprintf("hello %d", i)
	if _, err := client.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(client, b); err != nil || string(b) != msg {
		t.Fatalf("conn %d echoed %q, %v; want %q", i, b, err, msg)
	}
	select {
	case err := <-echoed:
		if err != nil {
			t.Fatalf("conn %d: server: %v", i, err)
		}
	case <-expired:
		t.Fatal("the echo never finished")
	}
}

// TestFileListenerCopy: closing the Listener closes only its copy; the
// socket it was made from still accepts.
func TestFileListenerCopy(t *testing.T) {
	g := newGroup(t, netpoll.Config{})
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	f, err := nl.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := g.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", nl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := nl.Accept()
	if err != nil {
		t.Fatalf("the original socket after the Listener closed: %v", err)
	}
	s.Close()
}

// TestFileListenerNoControl: Config.Control is not called for an
// inherited socket, bound already, as package net's FileListener calls
// none.
func TestFileListenerNoControl(t *testing.T) {
	called := false
	g := newGroup(t, netpoll.Config{Control: func(string, string, syscall.RawConn) error {
		called = true
		return errors.New("not for an inherited socket")
	}})
	f, _ := listeningFile(t, "tcp", "net")
	defer f.Close()
	l, err := g.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if called {
		t.Error("Control was called")
	}
}

// TestFileListenerDefault: the package-level FileListener serves on the
// default group.
func TestFileListenerDefault(t *testing.T) {
	netpoll.ResetDefault()
	defer netpoll.ResetDefault()
	f, addr := listeningFile(t, "tcp", "net")
	defer f.Close()
	l, err := netpoll.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done, expired := watchdog(t, time.Minute)
	defer done()
	echoOnce(t, l, addr, 0, expired)
}

// TestFileListenerErrors: what is not a listening TCP or unix stream
// socket is refused with a *net.OpError as package net's FileListener
// returns, wrapping the errno that says why, and leaves no fd open.
func TestFileListenerErrors(t *testing.T) {
	initRuntimePoller(t)
	g := newGroup(t, netpoll.Config{})
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	fileOf := func(t *testing.T, c interface{ File() (*os.File, error) }) *os.File {
		t.Helper()
		f, err := c.File()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	rawSocket := func(t *testing.T, family, typ int, bind unix.Sockaddr) *os.File {
		t.Helper()
		fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if bind != nil {
			if err := unix.Bind(fd, bind); err != nil {
				t.Fatal(err)
			}
		}
		return os.NewFile(uintptr(fd), "raw")
	}
	for _, tt := range []struct {
		name string
		file func(t *testing.T) *os.File
		want error
	}{
		{"regular file", func(t *testing.T) *os.File {
			f, err := os.CreateTemp(t.TempDir(), "f")
			if err != nil {
				t.Fatal(err)
			}
			return f
		}, unix.ENOTSOCK},
		{"pipe", func(t *testing.T) *os.File {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			return r
		}, unix.ENOTSOCK},
		{"connected tcp socket", func(t *testing.T) *os.File {
			c, err := net.Dial("tcp", nl.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return fileOf(t, c.(*net.TCPConn))
		}, unix.EINVAL},
		{"bound tcp socket never listening", func(t *testing.T) *os.File {
			return rawSocket(t, unix.AF_INET, unix.SOCK_STREAM, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
		}, unix.EINVAL},
		{"udp socket", func(t *testing.T) *os.File {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return fileOf(t, c.(*net.UDPConn))
		}, unix.EPROTOTYPE},
		{"unix datagram socket", func(t *testing.T) *os.File {
			return rawSocket(t, unix.AF_UNIX, unix.SOCK_DGRAM, nil)
		}, unix.EPROTOTYPE},
		{"sctp stream socket", func(t *testing.T) *os.File {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
			if err != nil {
				t.Skipf("no SCTP: %v", err)
			}
			return os.NewFile(uintptr(fd), "sctp")
		}, unix.EPROTONOSUPPORT},
		{"netlink socket", func(t *testing.T) *os.File {
			fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
			if err != nil {
				t.Skipf("no netlink: %v", err)
			}
			return os.NewFile(uintptr(fd), "netlink")
		}, unix.EAFNOSUPPORT},
		{"closed file", func(t *testing.T) *os.File {
			f, _ := listeningFile(t, "tcp", "net")
			f.Close()
			return f
		}, os.ErrClosed},
		{"nil file", func(t *testing.T) *os.File { return nil }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.file(t)
			if f != nil {
				defer f.Close()
			}
			fds := countFDs(t)
			l, err := g.FileListener(f)
			if err == nil {
				l.Close()
				t.Fatal("FileListener succeeded")
			}
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "file" || op.Net != "file+net" {
				t.Errorf("FileListener: %#v, want a file *net.OpError", err)
			}
			if f != nil && (op == nil || op.Addr == nil || op.Addr.String() != f.Name()) {
				t.Errorf("FileListener: %v does not name the file %q", err, f.Name())
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("FileListener: %v, want it to wrap %v", err, tt.want)
			}
			if n := countFDs(t); n != fds {
				t.Errorf("open fds %d after the failed FileListener, want %d as before", n, fds)
			}
		})
	}
}

// TestFileListenerGroupClosed: a closed group refuses, with net.ErrClosed.
func TestFileListenerGroupClosed(t *testing.T) {
	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	f, _ := listeningFile(t, "tcp", "net")
	defer f.Close()
	fds := countFDs(t)
	if _, err := g.FileListener(f); !errors.Is(err, net.ErrClosed) {
		t.Errorf("FileListener on a closed group: %v, want net.ErrClosed", err)
	}
	if n := countFDs(t); n != fds {
		t.Errorf("open fds %d, want %d as before", n, fds)
	}
}
