package netpoll

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FileListener returns a Listener serving a copy of the listening socket
// f, as package net's FileListener does: for socket activation (a socket
// systemd or inetd passed, or one a parent process handed its child). f
// must be a listening TCP (IPv4 or IPv6) or unix stream socket; anything
// else is a *net.OpError ("file", "file+net", f's name) saying what f is,
// and nothing is left open. The copy is a dup, close-on-exec: closing the
// Listener leaves f open, and f is the caller's to close. The two share
// the socket's file status flags: the copy is made non-blocking, so f's
// socket is too, as with package net.
//
// The socket is registered as the group's Sharing says: Single, one
// registration; Exclusive and wakeall, the one socket on every poller.
// ReusePort balances between a socket per poller, and an inherited
// listener is one socket, so it is served as Single: one registration,
// Accept accepting on it, its connections spread across the pollers
// round-robin as Single's are. A unix socket's path is not removed on
// Close (package net's FileListener does not either).
//
// Config.Control is not called: the socket is bound already, as with
// package net. The group's keep-alive is set on each accepted TCP
// connection, not on the socket, which is shared with whoever passed it.
// The socket comes from code netpoll did not see, which may have set
// options that end reads early (SO_RCVLOWAT), so connections accepted from
// it never skip a short read's syscall (Listener.SyscallConn).
func (g *Group) FileListener(f *os.File) (*Listener, error) {
	l, err := g.fileListener(f)
	if err != nil {
		return nil, fileError(f, err)
	}
	return l, nil
}

func (g *Group) fileListener(f *os.File) (*Listener, error) {
	if err := g.checkOpen(); err != nil {
		return nil, err
	}
	fd, err := dupSocket(f)
	if err != nil {
		return nil, err
	}
	network, err := listeningNetwork(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	sharing := g.set.sharing
	if sharing == ReusePort {
		sharing = Single
	}
	l := &Listener{g: g, network: network, sharing: sharing, fd: -1, closed: make(chan struct{}), connKeepAlive: true}
	l.deadline.Store(&acceptDeadline{changed: make(chan struct{})})
	l.exposeRaw() // the socket came from outside
	if sharing == Single {
		err = l.register(fd, g.pick(), 0, true) // closes fd on failure
	} else {
		err = l.share(fd)
	}
	if err != nil {
		l.closeRegistrations()
		return nil, err
	}
	return l.start()
}

// dupSocket duplicates f's descriptor, close-on-exec and non-blocking. It
// goes through f's SyscallConn rather than f.Fd, which would put the
// socket in blocking mode for whoever else holds it.
func dupSocket(f *os.File) (int, error) {
	if f == nil {
		return -1, errors.New("netpoll: FileListener of a nil *os.File")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var dupErr error
	if err := rc.Control(func(fd uintptr) { nfd, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		// Only a closed f fails here, with an error of internal/poll's
		// that does not wrap os.ErrClosed.
		return -1, fmt.Errorf("netpoll: FileListener of a closed file (%v): %w", err, os.ErrClosed)
	}
	if dupErr != nil {
		return -1, os.NewSyscallError("fcntl", dupErr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return -1, os.NewSyscallError("setnonblock", err)
	}
	return nfd, nil
}

// listeningNetwork returns the network of fd, "tcp" or "unix", if it is a
// listening stream socket netpoll serves, and otherwise an error saying
// what it is, wrapping the errno that fits.
func listeningNetwork(fd int) (string, error) {
	get := func(level, opt int) (int, error) {
		v, err := unix.GetsockoptInt(fd, level, opt)
		return v, os.NewSyscallError("getsockopt", err) // ENOTSOCK for a file that is no socket
	}
	domain, err := get(unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return "", err
	}
	var network string
	switch domain {
	case unix.AF_INET, unix.AF_INET6:
		network = "tcp"
	case unix.AF_UNIX:
		network = "unix"
	default:
		return "", fmt.Errorf("netpoll: a socket of address family %d, want AF_INET, AF_INET6 or AF_UNIX: %w", domain, unix.EAFNOSUPPORT)
	}
	typ, err := get(unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return "", err
	}
	if typ != unix.SOCK_STREAM {
		return "", fmt.Errorf("netpoll: a %s socket of type %d, want SOCK_STREAM: %w", network, typ, unix.EPROTOTYPE)
	}
	if network == "tcp" {
		proto, err := get(unix.SOL_SOCKET, unix.SO_PROTOCOL)
		if err != nil {
			return "", err
		}
		// Multipath TCP too: package net's listeners are MPTCP by
		// default since Go 1.24, and serve TCP clients as TCP does.
		if proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_MPTCP {
			return "", fmt.Errorf("netpoll: a stream socket of protocol %d, want IPPROTO_TCP or IPPROTO_MPTCP: %w", proto, unix.EPROTONOSUPPORT)
		}
	}
	listening, err := get(unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return "", err
	}
	if listening == 0 {
		return "", fmt.Errorf("netpoll: a %s socket that is not listening (connected, or listen(2) never called): %w", network, unix.EINVAL)
	}
	return network, nil
}
