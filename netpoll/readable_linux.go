package netpoll

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// WaitRead waits until c is readable: until a Read would return data, EOF
// or an error (such as a reset) without parking. It holds no buffer while
// it waits, so a goroutine that keeps its connection can wait with a
// parked stack alone and take a buffer only when there is something to
// read (golang/go#15735). It returns at once when data, EOF or an error is
// already queued, whether or not an edge announced it since the last
// Read: it asks the socket (poll(2), which leaves a pending error for the
// next Read, where recv with MSG_PEEK would consume it), unless the last
// Read proved the socket drained (a short Read, with short-read skipping
// on): then it waits for the edge that anything since has brought, with no
// syscall (counted in Stats.ShortSkips). The read deadline and Close end it
// with the error Read would give, and it is serialized with Read as a
// second Read would be. A nil return is no promise that the next Read gets
// data: another goroutine may read first, and a Read that finds nothing
// parks as usual. A Read of an empty slice keeps package net's meaning: it
// returns 0, nil at once.
func (c *Conn) WaitRead() error {
	d := c.d
	dr := &d.rd
	if err := d.begin(dr); err != nil {
		return c.opError("read", err)
	}
	defer d.end(dr)
	if d.aheadOf() != nil {
		return nil // input read ahead for the handler (readahead_linux.go)
	}
	// The last Read found the socket drained (short, with skipping on and
	// nothing sticky): whatever came since came with an edge, so the
	// socket need not be asked (desc's "Short reads"). The Read after this
	// wait makes its syscall either way: an edge the wait consumes is one
	// that Read would have needed.
	drained := d.skip && dr.drained && d.sticky.Load() == 0
	dr.drained = false
	for {
		if drained {
			if dr.state.Load() == stReady {
				return nil // an edge since the drained Read
			}
			d.p.st.op(d.fd, cShortSkips)
		} else if ok, err := d.readable(); err != nil || ok {
			if err != nil {
				return c.opError("read", os.NewSyscallError("poll", err))
			}
			return nil
		}
		parked, err := d.awaitReady(dr)
		if err != nil {
			// No edge consumed: the socket is as known as before.
			dr.drained = drained
			return c.opError("read", err)
		}
		if parked {
			return nil // woken by an edge that came after the socket was found empty
		}
		// A ready token taken without parking may be stale (an edge for
		// data a Read already took): ask the socket.
		drained = false
	}
}

// testHookReadable, when set by a test, answers readable for the model's
// descriptors (fd modelFD) in place of the socket.
var testHookReadable atomic.Pointer[func(d *desc) (bool, error)]

// readable asks the socket whether a Read would not park: data or a FIN
// (POLLIN, POLLRDHUP), a hang-up, or a pending error (POLLERR, which poll
// reports without clearing it, unlike recv with MSG_PEEK).
func (d *desc) readable() (bool, error) {
	if h := testHookReadable.Load(); h != nil && d.fd < 0 {
		return (*h)(d)
	}
	return pollReadable(d.fd)
}

// pollReadable is readable's poll(2) on fd, for any stream socket.
func pollReadable(fd int) (bool, error) {
	ev, err := pollEvents(fd)
	return ev&readableEvents != 0, err
}

// readableEvents are the poll(2) events after which a read does not block.
const readableEvents = unix.POLLIN | unix.POLLRDHUP | unix.POLLHUP | unix.POLLERR

// pollEvents asks fd, without waiting, which of readableEvents it has.
func pollEvents(fd int) (int16, error) {
	ev, err := pollFD(fd, unix.POLLIN|unix.POLLRDHUP)
	return ev & readableEvents, err
}

// pollFD asks fd, without waiting, for events, and returns what poll(2)
// reported: 0 and no error when nothing is ready.
func pollFD(fd int, events int16) (int16, error) {
	fds := [1]unix.PollFd{{Fd: int32(fd), Events: events}}
	for {
		n, err := unix.Poll(fds[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0, err
		}
		return fds[0].Revents, nil
	}
}
