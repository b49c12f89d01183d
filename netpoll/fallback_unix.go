//go:build unix && !linux

package netpoll

import "syscall"

// readable is the fallback's wait callback (rawWaiter.wait) on Unix
// systems other than Linux: poll(2) and FIONREAD where Linux's uses
// POLLRDHUP and SIOCINQ (serve_linux.go). Package net's RawConn.Read
// checks the read deadline before it calls f, so a call means the wait
// began.
func (w *rawWaiter) readable(fd uintptr) bool {
	w.waited = true
	ok, hangUp, err := readiness(int(fd))
	if err != nil {
		w.perr = err
		return true
	}
	w.hangUp = hangUp
	return ok
}

// fionread is FIONREAD, which x/sys/unix does not define here: _IOR('f',
// 127, int) in the BSDs' and macOS's sys/filio.h, Solaris's and AIX's,
// with IOC_OUT 0x40000000 on each.
const fionread = 0x4004667f

// acceptRetries are the accept errors that pass with time: out of fds or
// memory, or a connection aborted before it was accepted.
var acceptRetries = []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED}
