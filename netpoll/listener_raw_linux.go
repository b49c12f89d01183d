package netpoll

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// A Listener's raw surface, as *net.TCPListener's: SyscallConn and File.

// SyscallConn returns a raw connection to the listening socket.
//
// With Sharing Single its Control, Read and Write run on the one socket,
// and Read and Write park on the listener's poller as Accept does, under
// its deadline: Read's f runs again once a connection is pending. A
// listening socket never becomes writable, so a Write whose f is not done
// waits for the deadline or Close. (Package net's listener refuses raw
// Read and Write.)
//
// With Exclusive, WakeAll or ReusePort, Control runs f on each distinct
// listening socket in turn: the one socket every poller shares, or one
// SO_REUSEPORT socket per poller. Read and Write fail with an error
// wrapping ErrSharedListener: the acceptor goroutines own the readiness of
// a shared listener, and a raw reader would race them for its edges.
//
// After Close, each method fails with an error wrapping net.ErrClosed.
func (l *Listener) SyscallConn() (syscall.RawConn, error) {
	return rawListener{l}, nil
}

// rawListener implements syscall.RawConn on a Listener's sockets.
type rawListener struct{ l *Listener }

// Control runs f on every distinct socket while holding a reference on
// each, so that none is closed under it.
func (rl rawListener) Control(f func(fd uintptr)) error {
	l := rl.l
	ds := l.sockets()
	for i, d := range ds {
		if err := d.incref(); err != nil {
			for _, d := range ds[:i] {
				d.decref()
			}
			return l.opError("raw-control", err)
		}
	}
	defer func() {
		for _, d := range ds {
			d.decref()
		}
	}()
	for _, d := range ds {
		f(uintptr(d.fd))
	}
	return nil
}

func (rl rawListener) Read(f func(fd uintptr) (done bool)) error {
	return rl.rawIO("raw-read", func(rc syscall.RawConn) error { return rc.Read(f) })
}

func (rl rawListener) Write(f func(fd uintptr) (done bool)) error {
	return rl.rawIO("raw-write", func(rc syscall.RawConn) error { return rc.Write(f) })
}

// rawIO runs a raw Read or Write through the rawConn of a Single
// listener's registration.
func (rl rawListener) rawIO(op string, run func(syscall.RawConn) error) error {
	l := rl.l
	if l.sharing != Single {
		return l.opError(op, errRawShared)
	}
	if err := run(rawConn{d: l.ds[0]}); err != nil {
		return l.opError(op, err)
	}
	return nil
}

// File returns a copy of the listening socket as an *os.File, named as
// package net names it ("tcp:127.0.0.1:8080->"). The copy is a dup (with
// close-on-exec) of the listener's fd: closing either leaves the other
// open, and the caller must close the file. The two share the socket and
// its file status flags: as with package net's File, the file's Fd method
// puts the socket in blocking mode for the listener too, so use the
// file's SyscallConn instead.
//
// A ReusePort listener with more than one socket (Pollers > 1) fails with
// an error wrapping ErrSharedListener: a dup of one socket would receive
// only that socket's share of the connections. Exclusive and WakeAll share
// one socket, which File copies.
func (l *Listener) File() (*os.File, error) {
	if l.isClosed() {
		return nil, l.opError("file", net.ErrClosed)
	}
	if n := len(l.sockets()); n > 1 {
		err := fmt.Errorf("sharing=%s with %d sockets: a dup of one would receive only its share of the connections: %w", l.sharing, n, ErrSharedListener)
		return nil, l.opError("file", err)
	}
	d := l.ds[0]
	if err := d.incref(); err != nil {
		return nil, l.opError("file", err)
	}
	defer d.decref() // the fd stays open, and its number ours, through the dup
	f, err := dupFile(d.fd, l.network+":"+l.addr.String()+"->")
	if err != nil {
		return nil, l.opError("file", err)
	}
	return f, nil
}

// sockets returns one registration per distinct listening socket: every
// registration for Single and ReusePort, the first for Exclusive and
// WakeAll, whose registrations share one socket (l.fd, closed only after
// every registration is gone, so a reference on ds[0] keeps it open).
func (l *Listener) sockets() []*desc {
	if l.sharing == Exclusive || l.sharing == WakeAll {
		return l.ds[:1]
	}
	return l.ds
}
