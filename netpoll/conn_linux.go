package netpoll

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxRW caps one read or write syscall, as package net does, so a huge
// buffer cannot hold a direction's lock for an unbounded time.
const maxRW = 1 << 30

// Conn is a stream connection (TCP or unix) on a Group's poller. It
// implements net.Conn with package net's contract and error values, and
// syscall.Conn.
type Conn struct {
	d *desc
	// The addresses: TCP's kept compact (tcpAddr), the local one shared
	// by the connections a listener accepts on the same local address
	// (localAddrs), a unix socket's *net.UnixAddr pair in uaddrs.
	laddr  *tcpAddr
	raddr  tcpAddr
	uaddrs *[2]net.Addr
}

var (
	_ net.Conn     = (*Conn)(nil)
	_ syscall.Conn = (*Conn)(nil)
)

// Read reads up to len(b) bytes, parking until data, EOF, an error, the
// read deadline or Close. An orderly shutdown by the peer is a bare io.EOF.
func (c *Conn) Read(b []byte) (int, error) {
	d := c.d
	if err := d.begin(&d.rd); err != nil {
		return 0, c.opError("read", err)
	}
	defer d.end(&d.rd)
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) > maxRW {
		b = b[:maxRW]
	}
	var n int
	var err error
	cold := true
	if h := d.hotw.Load(); h != nil {
		switch {
		case h.sc == nil:
			// Busy: read as package net does (hotread_linux.go).
			n, err, cold = d.readHot(h, b)
		case h.ahead.Load() != nil:
			// Input a hot Server wait read for the handler (readahead_linux.go).
			n, err = h.ahead.take(b)
			cold = false
		}
	} else if lp := d.p.loop; lp != nil {
		if a := lp.aheadOf(d); a != nil {
			// Input the loop read for the handler (serveloop_linux.go).
			n, err = a.take(b)
			cold = false
		}
	}
	switch {
	case !cold:
	case d.net == netUnix && d.skip:
		n, err = c.readUnix(b)
	default:
		n, err = d.transfer(&d.rd, len(b), func() (int, error) { return unix.Read(d.fd, b) })
	}
	if err != nil {
		if err != os.ErrDeadlineExceeded && err != net.ErrClosed && err != ErrServed {
			d.rd.ended = true
		}
		return 0, c.opError("read", syscallErr("read", err))
	}
	if n == 0 {
		d.rd.ended = true
		return 0, io.EOF
	}
	return n, nil
}

// readUnix reads a unix stream socket with recvmsg instead of read, to see
// MSG_CTRUNC: the kernel ends a unix read early after a message that
// carried fds, or at a change of sender when credentials are passed
// (unix_stream_read_generic), with the rest still queued and no new edge
// to come. A read that stops there sets MSG_CTRUNC (no control buffer is
// given, so the fds are closed and the credentials dropped, as read does)
// and does not count as short.
func (c *Conn) readUnix(b []byte) (int, error) {
	d := c.d
	truncated := false
	n, err := d.transfer(&d.rd, len(b), func() (int, error) {
		n, flags, err := recvmsg(d.fd, b)
		truncated = flags&unix.MSG_CTRUNC != 0
		return n, err
	})
	if truncated {
		d.rd.drained = false // still under d.rd.mu: Read ends the operation after us
	}
	return n, err
}

// recvmsg is recvmsg(2) with one iovec and no name or control buffer,
// returning the count and msg_flags. unix.Recvmsg would fill in (and
// allocate) the peer's address on every call.
func recvmsg(fd int, b []byte) (n int, flags int, err error) {
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	msg := unix.Msghdr{Iov: &iov, Iovlen: 1}
	// unsafe: msg, iov and b stay alive and unmoved for the call (a
	// pointer converted in the argument list of a syscall is kept), and
	// the kernel keeps no reference to them after it returns.
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Flags), nil
}

// Write writes all of b, parking whenever the socket buffer is full, until
// done, an error, the write deadline or Close.
func (c *Conn) Write(b []byte) (int, error) {
	d := c.d
	if err := d.begin(&d.wr); err != nil {
		return 0, c.opError("write", err)
	}
	defer d.end(&d.wr)
	nn := 0
	for nn < len(b) {
		chunk := b[nn:min(len(b), nn+maxRW)]
		size := len(chunk)
		if d.net == netUnix {
			// No skipping after a short unix write: when the peer shuts
			// its reading side (CloseRead) the next write fails with
			// EPIPE, but unix_poll has no event bit for that state, so a
			// writer waiting for EPOLLOUT would wait until the peer
			// reads or closes. See DESIGN.md, "Short reads".
			size = 0
		}
		n, err := d.transfer(&d.wr, size, func() (int, error) { return unix.Write(d.fd, chunk) })
		if n > 0 {
			nn += n
		}
		if err != nil {
			return nn, c.opError("write", syscallErr("write", err))
		}
		if n == 0 {
			return nn, c.opError("write", io.ErrUnexpectedEOF)
		}
	}
	return nn, nil
}

// Close closes the connection. It wakes every blocked Read and Write with
// an error wrapping net.ErrClosed and returns once the fd is closed. Calling
// it again returns such an error too. If an epoll_ctl on the connection's
// registration failed (its operations returned the error), or removing it
// does, Close returns that error, once the fd is closed all the same.
func (c *Conn) Close() error {
	if err := c.d.close(); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// network is the network c was made on: "tcp", "tcp4", "tcp6" or "unix".
func (c *Conn) network() string { return networks[c.d.net] }

// LocalAddr returns the local address: *net.TCPAddr or *net.UnixAddr.
func (c *Conn) LocalAddr() net.Addr { return c.addr(0, c.laddr) }

// RemoteAddr returns the peer's address: *net.TCPAddr or *net.UnixAddr.
func (c *Conn) RemoteAddr() net.Addr { return c.addr(1, &c.raddr) }

func (c *Conn) addr(i int, a *tcpAddr) net.Addr {
	if c.uaddrs != nil {
		return c.uaddrs[i]
	}
	return a.addr()
}

// SetDeadline sets the read and write deadlines. See SetReadDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.d.closing() {
		return c.opError("set", net.ErrClosed)
	}
	c.d.setDeadline(&c.d.rd, t)
	c.d.setDeadline(&c.d.wr, t)
	return nil
}

// SetReadDeadline sets the deadline for Read, including one blocked now: it
// fails at once with an error wrapping os.ErrDeadlineExceeded if t has
// passed. The zero time clears it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.d.closing() {
		return c.opError("set", net.ErrClosed)
	}
	c.d.setDeadline(&c.d.rd, t)
	return nil
}

// SetWriteDeadline is SetReadDeadline for Write.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.d.closing() {
		return c.opError("set", net.ErrClosed)
	}
	c.d.setDeadline(&c.d.wr, t)
	return nil
}

// CloseRead shuts down the reading side.
func (c *Conn) CloseRead() error { return c.shutdown(unix.SHUT_RD) }

// CloseWrite shuts down the writing side; the peer reads io.EOF.
func (c *Conn) CloseWrite() error { return c.shutdown(unix.SHUT_WR) }

func (c *Conn) shutdown(how int) error {
	return c.control("close", func(fd int) error { return syscallErr("shutdown", unix.Shutdown(fd, how)) })
}

// SetNoDelay sets TCP_NODELAY. It is on by default, as in package net.
func (c *Conn) SetNoDelay(noDelay bool) error {
	return c.setsockopt(unix.IPPROTO_TCP, unix.TCP_NODELAY, boolInt(noDelay))
}

// SetKeepAlive turns TCP keep-alive probes on or off. They are on by
// default, as in package net: idle 15s, interval 15s, 9 probes
// (Config.KeepAlive and Config.KeepAliveConfig change that).
func (c *Conn) SetKeepAlive(keepalive bool) error {
	return c.setsockopt(unix.SOL_SOCKET, unix.SO_KEEPALIVE, boolInt(keepalive))
}

// SetKeepAlivePeriod sets how long the connection must be idle before the
// first keep-alive probe, rounded up to whole seconds, as package net's
// TCPConn.SetKeepAlivePeriod does: 0 means net's default (15s), and a
// negative d leaves it as it is. The interval between probes is not
// changed (SetKeepAliveConfig sets it).
func (c *Conn) SetKeepAlivePeriod(d time.Duration) error {
	secs, ok := keepAliveSecs(d, defaultKeepAliveIdle)
	if !ok {
		return nil
	}
	return c.setsockopt(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs)
}

// SetKeepAliveConfig configures keep-alive probes as package net's
// TCPConn.SetKeepAliveConfig does: probes on or off as config.Enable says,
// then the idle time, the interval and the count set, each at net's
// default (15s, 15s, 9) when zero and left as it is when negative.
func (c *Conn) SetKeepAliveConfig(config net.KeepAliveConfig) error {
	return c.control("set", func(fd int) error { return keepAliveSock(fd, config) })
}

// SetLinger sets SO_LINGER as package net's TCPConn.SetLinger does: sec < 0
// is the default, 0 discards unsent data and resets on Close.
func (c *Conn) SetLinger(sec int) error {
	l := unix.Linger{Onoff: 1, Linger: int32(sec)}
	if sec < 0 {
		l = unix.Linger{}
	}
	return c.control("set", func(fd int) error {
		return syscallErr("setsockopt", unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &l))
	})
}

// SetReadBuffer sets SO_RCVBUF.
func (c *Conn) SetReadBuffer(bytes int) error {
	return c.setsockopt(unix.SOL_SOCKET, unix.SO_RCVBUF, bytes)
}

// SetWriteBuffer sets SO_SNDBUF.
func (c *Conn) SetWriteBuffer(bytes int) error {
	return c.setsockopt(unix.SOL_SOCKET, unix.SO_SNDBUF, bytes)
}

func (c *Conn) setsockopt(level, opt, v int) error {
	return c.control("set", func(fd int) error {
		return syscallErr("setsockopt", unix.SetsockoptInt(fd, level, opt, v))
	})
}

// control runs f on the fd while holding a reference, so the fd cannot be
// closed under it.
func (c *Conn) control(op string, f func(fd int) error) error {
	if err := c.d.incref(); err != nil {
		return c.opError(op, err)
	}
	defer c.d.decref()
	if err := f(c.d.fd); err != nil {
		return c.opError(op, err)
	}
	return nil
}

// SyscallConn returns a raw connection whose Read and Write park on this
// Conn's poller. On a connection served on demand whose input was read
// ahead for the handler, its Read fails with ErrReadAhead until a Read
// takes that input, and its Control's function sees the socket behind it.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	return rawConn{d: c.d, c: c}, nil
}

// File returns a duplicate of the connection's fd as an *os.File, as
// package net's TCPConn.File does: closing either leaves the other open,
// and options set through the file apply to this connection's socket.
// Like SyscallConn's Control, it turns short-read skipping off for this
// connection: code with the fd may set options that end reads early.
// The two share the socket's file status flags: the file's Fd method puts
// the socket in blocking mode for the Conn too (a Read would then block a
// thread), as with package net; use the file's SyscallConn instead.
func (c *Conn) File() (*os.File, error) {
	var f *os.File
	err := c.control("file", func(fd int) error {
		// Marked first, then looked: a hot wait announces its read ahead
		// before it looks at the mark (readahead_linux.go).
		c.d.exposeRaw()
		if c.d.aheadOf() != nil {
			return ErrReadAhead // the file's reads would come behind it
		}
		var err error
		f, err = dupFile(fd, c.network()+":"+addrString(c.LocalAddr())+"->"+addrString(c.RemoteAddr()))
		return err
	})
	return f, err
}

// dupFile duplicates fd, close-on-exec, into an *os.File called name.
func dupFile(fd int, name string) (*os.File, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// syscallErr wraps a bare errno the way package net does; our own sentinels
// (closed, deadline), errors that name their call already (a failed
// epoll_ctl's *os.SyscallError) and nil pass through.
func syscallErr(name string, err error) error {
	if errno, ok := err.(unix.Errno); ok {
		return os.NewSyscallError(name, errno)
	}
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rawConn implements syscall.RawConn on a descriptor. c, a Conn's: its
// Read and Write errors are wrapped as package net's are.
type rawConn struct {
	d *desc
	c *Conn
}

func (rc rawConn) Control(f func(fd uintptr)) error {
	if err := rc.d.incref(); err != nil {
		return err
	}
	defer rc.d.decref()
	rc.d.exposeRaw()
	f(uintptr(rc.d.fd))
	return nil
}

func (rc rawConn) Read(f func(fd uintptr) (done bool)) error {
	return rc.wrap("raw-read", rc.rawIO(&rc.d.rd, f))
}

func (rc rawConn) Write(f func(fd uintptr) (done bool)) error {
	return rc.wrap("raw-write", rc.rawIO(&rc.d.wr, f))
}

// wrap wraps a Conn's raw error in a *net.OpError, as package net's
// rawConn does (Source the local address, Addr the remote).
func (rc rawConn) wrap(op string, err error) error {
	if err == nil || rc.c == nil {
		return err
	}
	return &net.OpError{Op: op, Net: rc.c.network(), Source: rc.c.LocalAddr(), Addr: rc.c.RemoteAddr(), Err: err}
}

func (rc rawConn) rawIO(dr *dir, f func(fd uintptr) bool) error {
	d := rc.d
	if err := d.begin(dr); err != nil {
		return err
	}
	defer d.end(dr)
	if dr == &d.rd && d.aheadOf() != nil {
		return ErrReadAhead // f would read behind it
	}
	d.exposeRaw()
	_, err := d.transfer(dr, 0, func() (int, error) {
		if iw := d.p.inline; iw != nil {
			iw.settle() // f is the user's: no arm stays owed while it runs (inline_linux.go)
		}
		if f(uintptr(d.fd)) {
			return 0, nil
		}
		return 0, unix.EAGAIN
	})
	return err
}

var timeZero time.Time
