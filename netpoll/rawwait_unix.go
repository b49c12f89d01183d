//go:build unix

package netpoll

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Waiting for readability through package net's RawConn, with poll(2):
// how WaitRead and the Server's fallback wait for package net's
// connections on Unix systems other than Linux (conn_other.go,
// fallback_unix.go). Linux's Conn waits through its own descriptor
// (readable_linux.go); these are built on Linux too so that its tests run
// them on real sockets.

// waitReadable waits until the socket under rc is readable: until a read
// would return data, EOF or an error without blocking. RawConn.Read calls
// f, and while f returns false parks until the runtime's poller reports
// the socket readable, then calls it again. f asks the socket first
// because the runtime forgets, before the first call, a readiness it was
// told of earlier (CL 22031): data queued before the call would otherwise
// wait for an edge that has come already.
func waitReadable(rc syscall.RawConn) error {
	var perr error
	err := rc.Read(func(fd uintptr) bool {
		ok, err := pollIn(int(fd))
		if err != nil {
			perr = err
			return true
		}
		return ok
	})
	if err != nil {
		return err
	}
	return perr
}

// pollIn asks fd, without waiting, whether a read would not block: data
// or a FIN (POLLIN), a hang-up (POLLHUP), or a pending error (POLLERR,
// which poll reports without clearing it, unlike recv with MSG_PEEK).
// POLLRDHUP is Linux's; a FIN sets POLLIN everywhere.
func pollIn(fd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, os.NewSyscallError("poll", err)
		}
		return n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0, nil
	}
}

// readiness is pollIn that also tells a hang-up: readable with nothing
// queued (FIONREAD is 0), so that a read returns EOF or an error.
func readiness(fd int) (readable, hangUp bool, err error) {
	ok, err := pollIn(fd)
	if err != nil || !ok {
		return false, false, err
	}
	n, err := unix.IoctlGetInt(fd, fionread)
	return true, err == nil && n == 0, nil
}
