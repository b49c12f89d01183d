package netpoll

import "golang.org/x/sys/unix"

// WaitRead waits until c is readable: until a Read would return data, EOF
// or an error (such as a reset) without parking. It holds no buffer while
// it waits, so a goroutine that keeps its connection can wait with a
// parked stack alone and take a buffer only when there is something to
// read (golang/go#15735). It returns at once when data, EOF or an error is
// already queued, whether or not an edge announced it since the last
// Read: it asks the socket (poll(2), which leaves a pending error for the
// next Read, where recv with MSG_PEEK would consume it). The read deadline
// and Close end it with the error Read would give, and it is serialized
// with Read as a second Read would be. A nil return is no promise that
// the next Read gets data: another goroutine may read first, and a Read
// that finds nothing parks as usual. A Read of an empty slice keeps
// package net's meaning: it returns 0, nil at once.
func (c *Conn) WaitRead() error {
	d := c.d
	if err := d.begin(&d.rd); err != nil {
		return c.opError("read", err)
	}
	defer d.end(&d.rd)
	// size 0: not a stream transfer. The next Read makes its syscall
	// whatever the last one found, and an edge this wait consumes is not
	// one that Read needed: the socket was asked after it.
	if _, err := d.transfer(&d.rd, 0, c.pollReadable); err != nil {
		return c.opError("read", syscallErr("poll", err))
	}
	return nil
}

// readableEvents are the poll(2) bits after which a Read does not park:
// data or a FIN (POLLIN, POLLRDHUP), a hang-up, or a pending error.
const readableEvents = unix.POLLIN | unix.POLLRDHUP | unix.POLLHUP | unix.POLLERR

// pollReadable asks the socket whether a Read would park: EAGAIN if so.
func (c *Conn) pollReadable() (int, error) {
	fds := []unix.PollFd{{Fd: int32(c.d.fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	switch {
	case err != nil:
		return 0, err // EINTR is retried by transfer
	case n == 0 || fds[0].Revents&readableEvents == 0:
		return 0, unix.EAGAIN
	}
	return 0, nil
}
