package netpoll

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/windows"
)

// Waiting for readability through package net's RawConn on Windows, for
// WaitRead and the Server's fallback. There is no poll(2) to ask the
// socket without a read (x/sys/windows has no WSAPoll), but RawConn.Read,
// whenever f returns false, waits with a zero-byte overlapped WSARecv
// (internal/poll's FD.RawRead), which completes once data, a FIN or an
// error is queued, at once if one is already, under the read deadline and
// Close. A new receive sees what is queued, unlike a readiness the runtime
// has already reported on Unix, so f need not ask first: it returns false
// on its first call and true on the next.

// waitReadable waits until the socket under rc is readable. A reset is
// returned by the zero-byte receive, as Read would return it.
func waitReadable(rc syscall.RawConn) error {
	waited := false
	err := rc.Read(func(uintptr) bool {
		done := waited
		waited = true
		return done
	})
	var op *net.OpError
	if errors.As(err, &op) {
		if errno, ok := op.Err.(syscall.Errno); ok {
			op.Err = os.NewSyscallError("wsarecv", errno)
		}
	}
	return err
}

// readable is the fallback's wait callback (rawWaiter.wait): its first
// call lets RawConn.Read wait, its second asks how much is queued
// (FIONREAD): nothing means a FIN. RawConn.Read calls f before it checks
// the read deadline here, so a wait the deadline ends cannot tell whether
// the deadline passed before it began; waited is set only when the wait
// ends readable, and the fallback closes a connection whose wait the read
// deadline ends (where on Unix a deadline that passes while it waits calls
// the handler).
func (w *rawWaiter) readable(fd uintptr) bool {
	if !w.asked {
		w.asked = true
		return false
	}
	w.waited = true
	n, err := queued(windows.Handle(fd))
	if err != nil {
		w.perr = os.NewSyscallError("wsaioctl", err)
		return true
	}
	w.hangUp = n == 0
	return true
}

// fionread is winsock2.h's FIONREAD, _IOR('f', 127, u_long), which
// x/sys/windows does not define.
const fionread = 0x4004667f

// queued returns the bytes queued to be read on socket s.
func queued(s windows.Handle) (uint32, error) {
	var b [4]byte // a u_long, in the machine's byte order
	var ret uint32
	if err := windows.WSAIoctl(s, fionread, nil, 0, &b[0], uint32(len(b)), &ret, nil, 0); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint32(b[:]), nil
}

// acceptRetries are the accept errors that pass with time: out of sockets
// or buffers, or a connection aborted before it was accepted. (Package
// net retries a reset one itself.)
var acceptRetries = []error{windows.WSAEMFILE, windows.WSAENOBUFS, windows.WSAECONNABORTED}
