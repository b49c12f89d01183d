package netpoll

import (
	"context"
	"errors"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

func (g *Group) dial(ctx context.Context, network, address string) (*Conn, error) {
	opErr := func(addr net.Addr, err error) error {
		return &net.OpError{Op: "dial", Net: network, Addr: addr, Err: mapCtxErr(err)}
	}
	if err := g.checkOpen(); err != nil {
		return nil, opErr(nil, err)
	}
	eps, err := resolve(ctx, network, address, false)
	if err != nil {
		return nil, opErr(nil, err)
	}
	var first error
	for _, ep := range eps {
		c, err := g.dialOne(ctx, network, ep)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = opErr(ep.addr, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// dialOne connects to one endpoint: a non-blocking connect, then a park
// until writable and a read of SO_ERROR, as package net does.
func (g *Group) dialOne(ctx context.Context, network string, ep endpoint) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(ep.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := g.prepare(fd, network, ep, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Connect before registering: a socket that was never connected polls as
	// writable and hung up, which would leave stale ready tokens behind.
	for {
		err = unix.Connect(fd, ep.sa)
		if err != unix.EINTR {
			break
		}
	}
	inProgress := err == unix.EINPROGRESS || err == unix.EALREADY
	if err != nil && !inProgress {
		unix.Close(fd)
		return nil, os.NewSyscallError("connect", err)
	}
	c, err := g.newConn(fd, network, sockTCPAddr(ep.sa), ep.sa, g.pick(), nil, true)
	if err != nil {
		return nil, err
	}
	if g.cfg.Control != nil {
		// The hook had the fd: it may have set options that end reads
		// early (SO_RCVLOWAT). After registration, which sets d.skip.
		c.d.exposeRaw()
	}
	if inProgress {
		// connect bound the local address already, in progress or not.
		if err := c.awaitConnect(ctx); err != nil {
			c.d.close()
			return nil, err
		}
	}
	return c, nil
}

// awaitConnect parks until the connect in progress completes, fails, or the
// context ends. Cancellation is delivered as an expired write deadline.
func (c *Conn) awaitConnect(ctx context.Context) error {
	d := c.d
	if dl, ok := ctx.Deadline(); ok {
		d.setDeadline(&d.wr, dl)
	}
	stop := context.AfterFunc(ctx, func() { d.wr.deadline.Store(1); d.nudge(&d.wr) })
	if err := d.begin(&d.wr); err != nil {
		stop()
		return err
	}
	parked := false
	_, err := d.transfer(&d.wr, 0, func() (int, error) {
		if !parked {
			parked = true
			return 0, unix.EAGAIN // connect said EINPROGRESS: wait for writable first
		}
		soerr, err := unix.GetsockoptInt(d.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return 0, os.NewSyscallError("getsockopt", err)
		}
		switch e := unix.Errno(soerr); e {
		case 0, unix.EISCONN:
			if _, err := unix.Getpeername(d.fd); err == nil {
				return 0, nil
			}
			return 0, unix.EAGAIN // not yet: a spurious wakeup
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return 0, unix.EAGAIN
		default:
			return 0, os.NewSyscallError("connect", e)
		}
	})
	d.end(&d.wr)
	if !stop() {
		// The context ended; even if the connect won the race, fail as
		// package net does, since the caller has given up.
		return ctx.Err()
	}
	if err == os.ErrDeadlineExceeded && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	d.setDeadline(&d.wr, timeZero)
	return nil
}

// mapCtxErr maps a context error to what package net returns: a deadline is
// a timeout (os.ErrDeadlineExceeded), a cancel stays context.Canceled.
func mapCtxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return os.ErrDeadlineExceeded
	}
	return err
}
