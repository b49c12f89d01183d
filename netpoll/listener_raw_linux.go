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
// With Exclusive, wakeAll or ReusePort, Control runs f on each distinct
// listening socket in turn: the one socket every poller shares, or one
// SO_REUSEPORT socket per poller. Read and Write fail with an error
// wrapping ErrSharedListener: the acceptor goroutines own the readiness of
// a shared listener, and a raw reader would race them for its edges.
//
// After Close, each method fails with an error wrapping net.ErrClosed.
//
// Like a Conn's SyscallConn, Control, Read and Write turn short-read
// skipping off, here for every connection accepted after they begin: an
// accepted socket inherits options set on the listener (SO_RCVLOWAT among
// them) that can end its reads early.
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
	l.exposeRaw()
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
	l.exposeRaw()
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
// only that socket's share of the connections. Exclusive and wakeAll share
// one socket, which File copies.
//
// As SyscallConn's methods do, File turns short-read skipping off for every
// connection accepted after it is called: options set through the file
// reach them.
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
	l.exposeRaw()
	f, err := dupFile(d.fd, l.network+":"+l.addr.String()+"->")
	if err != nil {
		return nil, l.opError("file", err)
	}
	return f, nil
}

// sockets returns one registration per distinct listening socket: every
// registration for Single and ReusePort, the first for Exclusive and
// wakeAll, whose registrations share one socket (l.fd, closed only after
// every registration is gone, so a reference on ds[0] keeps it open).
func (l *Listener) sockets() []*desc {
	if l.sharing == Exclusive || l.sharing == wakeAll {
		return l.ds[:1]
	}
	return l.ds
}

// Options set on a listening socket reach the connections accepted from it:
// TCP copies the listener's whole sock into the child when the handshake
// completes (sk_clone_lock, from inet_csk_clone_lock), a unix listener
// hands its credential-passing flags to the socket connect queues (Linux
// 6.16 on; accept did it before). Some of those options end reads early
// with no edge to come, SO_RCVLOWAT first: below its mark the kernel posts
// no EPOLLIN, yet a read returns the data (DESIGN.md, "Options a listener
// passes on"). So once user code has had a listening socket, the Conns
// accepted from it are marked as a Conn whose own fd user code had.
//
// Ordering: exposeRaw runs before user code gets the fd (before Control's
// f, a raw Read's or Write's f, and File's dup), and inherit reads the flag
// after accept4 returned. Every copy of the options is taken before accept4
// returns, so a child that got an option set through the fd was accepted
// after the flag was set, and is marked. A child accepted before is not,
// and needs not be: its options were copied before f ran. One queued
// before f ran and accepted after it is marked though it kept the old
// options: skipping lost, nothing hung. The flag is the Listener's, so it
// covers every registration (Exclusive, wakeAll) and every socket
// (ReusePort).
//
// Config.Control and FileListener hand the socket to code netpoll does not
// see before the first accept: Listen calls l.exposeRaw before the hook
// runs, and FileListener at once. A dialed Conn whose socket the hook had
// gets exposeRaw on its descriptor before Dial returns it.

// exposeRaw records, for good, that user code has had l's sockets.
func (l *Listener) exposeRaw() {
	if !l.raw.Load() {
		l.raw.Store(true)
	}
}

// inherit passes newConn's result through, turning skipping off for a
// connection accepted after user code had the listener's sockets. The
// Conn is not yet returned, so no operation has run on it.
func (l *Listener) inherit(c *Conn, err error) (*Conn, error) {
	if err == nil && l.raw.Load() {
		c.d.exposeRaw() // after registration, which sets d.skip
	}
	return c, err
}
