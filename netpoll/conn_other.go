//go:build !linux

package netpoll

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// Conn is, on this OS, package net's stream connection (a *net.TCPConn or
// a *net.UnixConn) in a Group, with the methods Conn has on Linux. It
// implements net.Conn with package net's contract and error values, and
// syscall.Conn. The methods are package net's, but for WaitRead, which
// package net does not have, and Close, which also removes the connection
// from its group.
type Conn struct {
	conn    netConn
	tcp     *net.TCPConn // conn, if it is TCP; nil for unix
	g       *Group
	network string
	closed  atomic.Bool // Close has been called: the group forgot c
}

// netConn is what *net.TCPConn and *net.UnixConn both have.
type netConn interface {
	net.Conn
	syscall.Conn
	CloseRead() error
	CloseWrite() error
	SetReadBuffer(bytes int) error
	SetWriteBuffer(bytes int) error
	File() (*os.File, error)
}

var (
	_ net.Conn      = (*Conn)(nil)
	_ syscall.Conn  = (*Conn)(nil)
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
	_ netConn       = (*net.TCPConn)(nil)
	_ netConn       = (*net.UnixConn)(nil)
)

// errNotTCP is what the TCP options return on a unix connection.
var errNotTCP = fmt.Errorf("not a TCP connection: %w", errors.ErrUnsupported)

// Read reads up to len(b) bytes, waiting until data, EOF, an error, the
// read deadline or Close. An orderly shutdown by the peer is a bare io.EOF.
func (c *Conn) Read(b []byte) (int, error) { return c.conn.Read(b) }

// Write writes all of b, waiting whenever the socket buffer is full, until
// done, an error, the write deadline or Close.
func (c *Conn) Write(b []byte) (int, error) { return c.conn.Write(b) }

// Close closes the connection. It wakes every blocked Read and Write with
// an error wrapping net.ErrClosed. Calling it again returns such an error
// too.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		// Said here, not left to package net, whose in-process network
		// (js, wasip1) closes a connection twice without an error.
		return c.opError("close", net.ErrClosed)
	}
	err := c.conn.Close()
	c.g.forget(c)
	return err
}

// LocalAddr returns the local address: *net.TCPAddr or *net.UnixAddr.
func (c *Conn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr returns the peer's address: *net.TCPAddr or *net.UnixAddr.
func (c *Conn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// SetDeadline sets the read and write deadlines. See SetReadDeadline.
func (c *Conn) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// SetReadDeadline sets the deadline for Read and WaitRead, including one
// blocked now: it fails at once with an error wrapping
// os.ErrDeadlineExceeded if t has passed. The zero time clears it.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// SetWriteDeadline is SetReadDeadline for Write.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// CloseRead shuts down the reading side.
func (c *Conn) CloseRead() error { return c.conn.CloseRead() }

// CloseWrite shuts down the writing side; the peer reads io.EOF.
func (c *Conn) CloseWrite() error { return c.conn.CloseWrite() }

// SetNoDelay is *net.TCPConn's SetNoDelay: TCP_NODELAY is on by default.
// On a unix connection it fails with an error wrapping
// errors.ErrUnsupported, as the other TCP options do.
func (c *Conn) SetNoDelay(noDelay bool) error {
	if c.tcp == nil {
		return c.opError("set", errNotTCP)
	}
	return c.tcp.SetNoDelay(noDelay)
}

// SetKeepAlive is *net.TCPConn's SetKeepAlive. Config.KeepAlive and
// Config.KeepAliveConfig set keep-alive on every connection of a Group.
func (c *Conn) SetKeepAlive(keepalive bool) error {
	if c.tcp == nil {
		return c.opError("set", errNotTCP)
	}
	return c.tcp.SetKeepAlive(keepalive)
}

// SetKeepAlivePeriod is *net.TCPConn's SetKeepAlivePeriod.
func (c *Conn) SetKeepAlivePeriod(d time.Duration) error {
	if c.tcp == nil {
		return c.opError("set", errNotTCP)
	}
	return c.tcp.SetKeepAlivePeriod(d)
}

// SetKeepAliveConfig is *net.TCPConn's SetKeepAliveConfig: probes on or
// off as config.Enable says, then the idle time, the interval and the
// count, each at net's default when zero and left as it is when negative.
func (c *Conn) SetKeepAliveConfig(config net.KeepAliveConfig) error {
	if c.tcp == nil {
		return c.opError("set", errNotTCP)
	}
	return c.tcp.SetKeepAliveConfig(config)
}

// SetLinger is *net.TCPConn's SetLinger: sec < 0 is the default, 0
// discards unsent data and resets on Close.
func (c *Conn) SetLinger(sec int) error {
	if c.tcp == nil {
		return c.opError("set", errNotTCP)
	}
	return c.tcp.SetLinger(sec)
}

// SetReadBuffer sets the socket's receive buffer size.
func (c *Conn) SetReadBuffer(bytes int) error { return c.conn.SetReadBuffer(bytes) }

// SetWriteBuffer sets the socket's send buffer size.
func (c *Conn) SetWriteBuffer(bytes int) error { return c.conn.SetWriteBuffer(bytes) }

// SyscallConn returns package net's raw connection.
func (c *Conn) SyscallConn() (syscall.RawConn, error) { return c.conn.SyscallConn() }

// File returns a duplicate of the connection's socket as an *os.File, as
// package net's File does: closing either leaves the other open.
func (c *Conn) File() (*os.File, error) { return c.conn.File() }

// ReadFrom implements io.ReaderFrom, which io.Copy uses: *net.TCPConn's
// ReadFrom (which sends from a file with sendfile where the OS has it),
// and a copy through a buffer on a unix connection.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if c.tcp != nil {
		return c.tcp.ReadFrom(r)
	}
	n, err := io.Copy(c.conn, r)
	if err != nil {
		err = c.opError("readfrom", err)
	}
	return n, err
}

// WriteTo implements io.WriterTo, which io.Copy uses before the
// destination's ReadFrom: *net.TCPConn's WriteTo, and a copy through a
// buffer on a unix connection.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	if c.tcp != nil {
		return c.tcp.WriteTo(w)
	}
	n, err := io.Copy(w, c.conn)
	if err != nil {
		err = c.opError("writeto", err)
	}
	return n, err
}

// WaitRead waits until c is readable: until a Read would return data, EOF
// or an error without waiting. It holds no buffer while it waits. The read
// deadline and Close end it with the error Read would give, and it is
// serialized with Read as a second Read would be. A nil return is no
// promise that the next Read gets data: another goroutine may read first.
//
// It waits through package net's RawConn.Read. On Unix systems the
// callback asks the socket with poll(2) (POLLIN, POLLHUP, POLLERR) and
// returns false to wait when it is not readable. On Windows package net
// waits with a zero-byte overlapped receive, which completes once data, a
// FIN or an error is queued (at once if one is already); a reset is
// returned by WaitRead itself there. Where package net cannot wait for
// readability without a read (plan9, js, wasip1), WaitRead returns an
// error wrapping errors.ErrUnsupported. Errors are *net.OpError, as Read's.
func (c *Conn) WaitRead() error {
	rc, err := c.conn.SyscallConn()
	if err == nil {
		err = waitReadable(rc)
	}
	if err == nil {
		return nil
	}
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err // package net's raw-read error: report it as WaitRead's own
	}
	return c.opError("read", err)
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.network, Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
