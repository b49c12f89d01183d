//go:build !linux

package netpoll

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener is, on this OS, package net's stream listener (TCP or unix) in
// a Group. It implements net.Listener; accepted connections are *Conn.
type Listener struct {
	l       netListener // a *net.TCPListener or *net.UnixListener
	g       *Group
	network string
	file    bool        // made by FileListener: net gave it its default keep-alive, not the group's
	closed  atomic.Bool // Close has been called: the group forgot l
}

// netListener is what *net.TCPListener and *net.UnixListener both have.
type netListener interface {
	net.Listener
	syscall.Conn
	SetDeadline(t time.Time) error
	File() (*os.File, error)
}

var (
	_ net.Listener = (*Listener)(nil)
	_ syscall.Conn = (*Listener)(nil)
	_ netListener  = (*net.TCPListener)(nil)
	_ netListener  = (*net.UnixListener)(nil)
)

// AcceptConn is Accept returning the *Conn, as *net.TCPListener's
// AcceptTCP returns a *net.TCPConn.
func (l *Listener) AcceptConn() (*Conn, error) {
	nc, err := l.l.Accept()
	if err != nil {
		return nil, err
	}
	l.g.accepts.Add(1)
	if tc, ok := nc.(*net.TCPConn); ok && l.file {
		l.g.setKeepAlive(tc)
	}
	c, err := l.g.newConn(nc, l.network)
	if err != nil {
		return nil, &net.OpError{Op: "accept", Net: l.network, Addr: l.Addr(), Err: err}
	}
	return c, nil
}

// setKeepAlive gives tc, accepted by a listener net.FileListener made (with
// net's default keep-alive), the group's keep-alive, as net.ListenConfig
// would have: a negative KeepAlive turns it off unless
// KeepAliveConfig.Enable. As package net does, it ignores the errors: the
// connection works without.
func (g *Group) setKeepAlive(tc *net.TCPConn) {
	if g.cfg.KeepAlive == 0 && g.cfg.KeepAliveConfig == (net.KeepAliveConfig{}) {
		return // net's default, which tc has
	}
	ka, on := g.cfg.keepAlive()
	if !on {
		tc.SetKeepAlive(false)
		return
	}
	tc.SetKeepAliveConfig(ka)
}

// Close stops listening. Blocked Accepts return an error wrapping
// net.ErrClosed. A unix socket's path is removed, as package net does
// (not for a FileListener's).
func (l *Listener) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return &net.OpError{Op: "close", Net: l.network, Addr: l.Addr(), Err: net.ErrClosed}
	}
	err := l.l.Close()
	l.g.forgetListener(l)
	return err
}

// Addr returns the listener's address: *net.TCPAddr or *net.UnixAddr.
func (l *Listener) Addr() net.Addr { return l.l.Addr() }

// SetDeadline sets the deadline for Accept, including Accepts blocked now:
// once t has passed they fail with an error wrapping
// os.ErrDeadlineExceeded. The zero time clears it.
func (l *Listener) SetDeadline(t time.Time) error { return l.l.SetDeadline(t) }

// SyscallConn returns a raw connection to the listening socket: package
// net's, whose Read and Write fail on a listener.
func (l *Listener) SyscallConn() (syscall.RawConn, error) { return l.l.SyscallConn() }

// File returns a copy of the listening socket as an *os.File, as package
// net's File does: closing either leaves the other open.
func (l *Listener) File() (*os.File, error) { return l.l.File() }
