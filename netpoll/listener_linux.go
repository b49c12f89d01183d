package netpoll

import (
	"context"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Listener is a stream listener (TCP or unix) on a Group's pollers. It
// implements net.Listener; accepted connections are *Conn.
type Listener struct {
	g       *Group
	d       *desc
	network string
	addr    net.Addr
	unlink  string // unix socket path to remove on Close

	closeOnce sync.Once
	closed    chan struct{} // closed when Close begins: ends an accept back-off
}

var _ net.Listener = (*Listener)(nil)

// Accept backs off this long, doubling up to acceptBackoffMax, while the
// process or system is out of fds or memory (EMFILE, ENFILE, ENOBUFS,
// ENOMEM), instead of spinning on a listener that stays readable.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

func (g *Group) listen(ctx context.Context, network, address string) (*Listener, error) {
	if err := g.checkOpen(); err != nil {
		return nil, err
	}
	eps, err := resolve(ctx, network, address, true)
	if err != nil {
		return nil, err
	}
	ep := eps[0]
	fd, err := listenSocket(network, ep)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: ep.addr, Err: err}
	}
	l := &Listener{g: g, network: network, closed: make(chan struct{})}
	l.d = newDesc(fd, kindListener)
	if err := g.pick().register(l.d, 0); err != nil {
		unix.Close(fd)
		return nil, &net.OpError{Op: "listen", Net: network, Addr: ep.addr, Err: err}
	}
	l.addr = localAddr(fd)
	if network == "unix" {
		l.addr = ep.addr
		if name := ep.addr.(*net.UnixAddr).Name; name[0] != '@' {
			l.unlink = name
		}
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		l.Close()
		return nil, errGroupClosed
	}
	g.listeners[l] = struct{}{}
	g.mu.Unlock()
	return l, nil
}

// listenSocket opens, binds and listens a non-blocking socket for ep.
func listenSocket(network string, ep endpoint) (fd int, err error) {
	fd, err = unix.Socket(ep.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if ep.family != unix.AF_UNIX {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return -1, os.NewSyscallError("setsockopt", err)
		}
	}
	if ep.family == unix.AF_INET6 {
		// tcp on an IPv6 socket is dual-stack, tcp6 is not, as in package net.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(network == "tcp6")); err != nil {
			return -1, os.NewSyscallError("setsockopt", err)
		}
	}
	if err := unix.Bind(fd, ep.sa); err != nil {
		return -1, os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, listenBacklog()); err != nil {
		return -1, os.NewSyscallError("listen", err)
	}
	return fd, nil
}

// Accept waits for and returns the next connection. It parks on the
// listener's poller, retries ECONNABORTED, and backs off while out of fds.
func (l *Listener) Accept() (net.Conn, error) {
	d := l.d
	if err := d.begin(&d.rd); err != nil {
		return nil, l.opError(err)
	}
	defer d.end(&d.rd)
	backoff := time.Duration(0)
	for {
		var nfd int
		var rsa unix.Sockaddr
		_, err := d.io(&d.rd, func() (int, error) {
			var err error
			nfd, rsa, err = unix.Accept4(d.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			return 0, err
		})
		switch err {
		case nil:
			c, err := l.g.newConn(nfd, l.network, rsa, l.d.p)
			if err != nil {
				return nil, l.opError(err)
			}
			return c, nil
		case unix.ECONNABORTED:
			continue
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			d.p.st.acceptBackoffs.Add(1)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return nil, l.opError(net.ErrClosed)
			}
		default:
			return nil, l.opError(syscallErr("accept4", err))
		}
	}
}

// Close stops listening. A blocked Accept returns an error wrapping
// net.ErrClosed. A unix socket's path is removed, as package net does.
func (l *Listener) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		close(l.closed)
	})
	if !first {
		return l.opError(net.ErrClosed)
	}
	err := l.d.close()
	if l.unlink != "" {
		os.Remove(l.unlink)
	}
	l.g.mu.Lock()
	delete(l.g.listeners, l)
	l.g.mu.Unlock()
	if err != nil {
		return l.opError(err)
	}
	return nil
}

// Addr returns the listener's address: *net.TCPAddr or *net.UnixAddr.
func (l *Listener) Addr() net.Addr { return l.addr }

func (l *Listener) opError(err error) error {
	op := "accept"
	return &net.OpError{Op: op, Net: l.network, Source: nil, Addr: l.addr, Err: err}
}

// newConn registers an accepted or connected fd on p and wraps it. On
// failure the fd is closed.
func (g *Group) newConn(fd int, network string, rsa unix.Sockaddr, p *poller) (*Conn, error) {
	if network != "unix" {
		// TCP_NODELAY on by default, as in package net.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			unix.Close(fd)
			return nil, os.NewSyscallError("setsockopt", err)
		}
	}
	d := newDesc(fd, kindConn)
	if err := p.register(d, 0); err != nil {
		unix.Close(fd)
		return nil, err
	}
	c := &Conn{d: d, network: network, laddr: localAddr(fd), raddr: toAddr(rsa)}
	if network == "unix" && c.raddr == nil {
		c.raddr = &net.UnixAddr{Net: "unix"}
	}
	return c, nil
}

var somaxconn struct {
	once sync.Once
	n    int
}

// listenBacklog is the kernel's somaxconn, as package net uses.
func listenBacklog() int {
	somaxconn.once.Do(func() {
		somaxconn.n = unix.SOMAXCONN
		if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
			n := 0
			for _, c := range b {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			if n > 0 {
				somaxconn.n = n
			}
		}
	})
	return somaxconn.n
}
