package netpoll

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read-ahead: a hot Server connection's goroutine reads the next input
// itself, into a pooled buffer, and its handler's Read takes it from there.
//
// A hot connection's goroutine must learn whether input is queued before
// it calls the handler or parks (hotWait.serve). A poll(2) answers without
// reading, and the handler's Read then makes the read(2): two syscalls
// where package net's reader makes one when the next request is already
// queued as the last response goes out, which is most requests on a
// server with an idle CPU (issue 35: the Server spent 1.10-1.14x net's
// syscalls there). The read(2) answers the question and reads the input
// in one syscall, as net's does: EAGAIN parks, input calls the handler,
// and the handler's next Read is a copy. The buffer is pooled and held
// only from that read to the Read that takes its last byte, so an idle
// connection still holds none.
//
// After a short read ahead the wait after the call skips the read that
// would find nothing, as the poller's reads do (desc's "Short reads"). A
// TCP read also stops short at the urgent mark, and at a FIN or an error
// after data it copied, with something still pending, and the runtime's
// wakeup does not say which. So the read ahead is a recvmsg(2) on a socket
// with TCP_INQ set while hot, whose control message says how much is left
// in order behind what it read (tcp_inq_hint: the urgent byte counts, and
// a FIN queued makes it at least 1), and the read drained the socket only
// when nothing is. A short Read of the handler's own (a read(2), with no
// count) is trusted only after a read ahead that drained: whatever it took
// came later, and set the runtime's flag again (hotWait.serve). A reset
// after the data sets no count; the errors and hang-ups every registration
// reports catch it, so the connection's own registration stays armed
// while hot, named for the end of input (EPOLLRDHUP, which no segment's
// wakeup matches; stickyWatch). Watching for urgent data (EPOLLPRI), as a
// kernel without TCP_INQ makes it, costs every segment an epoll callback
// that matches, since TCP wakes a socket's waiters with EPOLLPRI in the
// key of every segment: under the nested wait the runtime's netpoller then
// polls the poller's epoll fd to find nothing, and under wait=block the
// poller's thread would wake, so there, without TCP_INQ, a connection
// that reads ahead never skips (hotSkips). User code that has the fd
// finds TCP_INQ off (exposeRaw clears it first: dropInq).
//
// What is read ahead must come before anything read from the socket
// later, so every way of reading it takes the buffer first: Read,
// WriteTo, ReadFrom from the connection and WaitRead do; a RawConn's Read
// and File, which would read the socket behind the buffer's back, fail
// with ErrReadAhead while input is read ahead. A RawConn's Control is not
// guarded (it sets options): a function of it that reads the socket (a
// MSG_PEEK) reads behind the buffer. A connection whose fd user code has
// had (a RawConn's Control or Read, File: stickyRaw) never reads ahead
// again, and neither does a unix socket, whose reads carry control
// messages a read(2) would drop (readUnix). A group reads ahead with
// readahead=on, the default with dispatch=hot and short-read skipping on
// (without it the descriptor does not track who had the fd).
//
// Invariants:
//   - hotWait.ahead is stored with the read direction's mu held: the
//     owner sets it, any Read takes from it, and goCold drops it, each
//     holding the lock. File, which must not wait for a parked Read,
//     loads it without (readAhead says why that is enough).
//   - Input is read ahead only while ahead is nil, so nothing is ever
//     read behind bytes not yet taken.
//   - The hot wait calls the handler again, with no syscall, while input
//     read ahead is left; it leaves the wait with some left only when the
//     connection is to close (a call returned an error or closed it, the
//     read deadline it left is past, the connection failed, the Server
//     shut down: the hand-off closes on each), so a connection never
//     idles with input read ahead; goCold drops what is left.

// readAheadSize is the pooled buffer's size: a read(2) of up to this many
// bytes per wakeup, as a bufio.Reader's default and then some. A handler
// whose Read is larger gets a short Read, as from a socket.
const readAheadSize = 16 << 10

// readAhead is input read ahead for a handler: buf[lo:hi] not yet taken,
// or err, an error the read(2) consumed (a reset: the socket would report
// EOF after it), for the handler's next Read.
type readAhead struct {
	buf    [readAheadSize]byte
	lo, hi int
	err    error
	oob    [unix.SizeofCmsghdr + 8]byte // TCP_CM_INQ's control message: unix.CmsgSpace(4) on 64-bit, room to spare on 32-bit
	msg    unix.Msghdr                  // readInq's, pointing into buf and oob
	iov    unix.Iovec
}

var readAheads = sync.Pool{New: func() any { return new(readAhead) }}

// ErrReadAhead is what a RawConn's Read and File return, wrapped in a
// *net.OpError, on a connection served on demand whose goroutine has read
// input ahead for its handler that no Read has taken yet (or, from another
// goroutine, is reading it): reading the socket then would take later
// bytes first. Read (or WriteTo) first; once user code has the fd, the
// connection reads nothing ahead again. A RawConn's Control is not
// guarded: a function of it that reads the socket reads behind such input.
var ErrReadAhead = errors.New("netpoll: input read ahead for the handler is pending; Read it first")

// mayReadAhead reports whether d, a hot Server connection's, may read its
// input ahead: a TCP socket whose fd no user code has had.
func (d *desc) mayReadAhead() bool {
	return d.p.readAhead && d.skip && d.net != netUnix && d.sticky.Load()&stickyRaw == 0
}

// stickyWatch returns what d's registration must watch for, while it
// is hot, beside the errors and hang-ups any interest brings: the
// conditions that end a read early with something still pending, for a
// hot Server connection that reads ahead, until one came (sticky, for
// good); 0 for any other. Its wait skips the read that would find nothing
// after a short one, as the poller's reads do, and the runtime's wakeup
// says nothing of these conditions, so the poller learns of them: it
// stores them (desc.stick) and kicks a wait announced (kickSticky), and
// the owner, after it announces a wait, looks at sticky before it skips.
// Called with armMu held, or by the poller.
//
// With TCP_INQ (hotWait.inq) the read ahead sees urgent data and a FIN
// queued behind what it read, and the watch is EPOLLRDHUP alone, which no
// segment's wakeup matches: it keeps the registration armed, and re-armed
// after a handler's park (rearmAfterEvent), for the errors and hang-ups
// any registration reports, which a reset behind the data needs. Without,
// it is EPOLLPRI|EPOLLRDHUP, which every segment's wakeup matches (TCP
// wakes a socket's waiters with EPOLLPRI in the key: sock_def_readable,
// and epoll lets a wakeup through when the key and the registration share
// a bit). Under the nested wait that costs a callback and the runtime's
// netpoller a look at the poller's epoll fd per segment, to find nothing;
// under wait=block it would wake the poller's thread at every segment, so
// there it watches nothing and never skips after a read ahead (hotSkips).
func stickyWatch(d *desc) uint32 {
	h := d.hotw.Load()
	switch {
	case h == nil || h.sc == nil || !d.mayReadAhead() || d.sticky.Load() != 0:
		return 0
	case h.inq:
		return unix.EPOLLRDHUP
	case d.p.strategy == waitBlock:
		return 0
	}
	return unix.EPOLLPRI | unix.EPOLLRDHUP
}

// hotSkips reports whether h's wait may begin with no syscall after a
// read that drained the socket: short-read skipping on, and, for a
// connection that reads ahead, its read sees what is queued behind
// (h.inq) or something watches for it (not under wait=block:
// stickyWatch). One that polls before each call (readahead=off, a unix
// socket) needs no watch: the poll stores what is queued (stick), and
// what comes after it sets the runtime's flag.
func hotSkips(d *desc, h *hotWait) bool {
	return d.skip && (h.inq || d.p.strategy != waitBlock || !d.mayReadAhead())
}

// testHookSticky, when set by a test, runs on the poller before it
// stores the sticky bits of an event for a hot connection: a test holds
// the poller there to open a window of the owner's wait (kickSticky).
var testHookSticky atomic.Pointer[func(d *desc)]

// kickSticky ends the wait of a hot Server connection, if one is announced,
// after the poller stored an event's sticky bits: the owner may have
// skipped the read that would have seen the condition (stickyWatch).
func (d *desc) kickSticky() {
	if h := d.hotw.Load(); h != nil && h.sc != nil && h.seq.Load()&1 == 1 {
		h.kick()
	}
}

// readAhead reads fd's next input ahead into a pooled buffer, for the
// owner of a hot connection with none read ahead (hotWait.serve), with the
// read direction's mu held. read false: it may not (mayReadAhead), the
// owner asks the socket otherwise. found false: EAGAIN, nothing to read,
// the wait parks. On EOF it keeps nothing (the handler's Read finds EOF
// again); an error it keeps for the handler's Read.
//
// The buffer is announced in h.ahead before the look at the mark that
// user code has the fd (stickyRaw), and File marks before it looks at
// h.ahead: either File sees the buffer and fails, or the owner sees the
// mark and reads nothing. Read and a RawConn's Read hold the mu, and never
// see the buffer empty.
func (h *hotWait) readAhead(d *desc, fd int) (read, found bool) {
	return h.ahead.readAhead(d, fd, h.inq)
}

// aheadSlot holds input read ahead for a handler: a hot connection's
// (hotWait.ahead) or a run's on the loop (loopAhead).
type aheadSlot struct{ atomic.Pointer[readAhead] }

// readAhead is hotWait.readAhead's read, into s, with the read
// direction's mu held. inq: fd has TCP_INQ set, and the read is a
// recvmsg(2) that learns what is left behind it (readInq).
func (s *aheadSlot) readAhead(d *desc, fd int, inq bool) (read, found bool) {
	if !d.mayReadAhead() {
		return false, false
	}
	a := readAheads.Get().(*readAhead)
	s.Store(a)
	if !d.mayReadAhead() {
		s.drop()
		return false, false
	}
	// The read sees whatever a ready edge of the poller's announced, as
	// transfer's syscall does: left ready, the token would stop every
	// skip of this hot period (serve skips only from empty).
	d.rd.consume()
	for {
		n, left, err := 0, 0, error(nil)
		if inq {
			n, left, err = a.readInq(fd)
		} else {
			n, err = unix.Read(fd, a.buf[:])
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			s.drop()
			return true, false
		case err != nil:
			a.err = err
		case n > 0:
			a.lo, a.hi = 0, n
		default:
			s.drop()
		}
		// A short read drained the socket, but for what stickyWatch
		// watches and, with inq, what it left behind (urgent data, a
		// FIN): the wait after the handler may skip its read (where
		// hotSkips lets it).
		d.rd.drained = err == nil && n > 0 && n < len(a.buf) && left == 0
		return true, true
	}
}

// readInq reads fd's input into a.buf with recvmsg(2), fd having TCP_INQ
// set, and returns what the kernel says is left in order behind it (left:
// the bytes not yet read, the urgent byte among them, or at least 1 with
// a FIN queued; -1 when no such message came, as on a kernel that ignored
// the option). A read that returns data stops at the urgent mark and
// before a FIN, so left is what tells that read from one that emptied
// the socket.
//
// The msghdr lives in a, not on the stack: unix.Recvmsg would allocate
// per call (its sockaddr escapes), and the read ahead allocates nothing.
func (a *readAhead) readInq(fd int) (n, left int, err error) {
	a.iov.Base = &a.buf[0]
	a.iov.SetLen(len(a.buf))
	a.msg = unix.Msghdr{Iov: &a.iov, Control: &a.oob[0]}
	a.msg.SetIovlen(1)
	a.msg.SetControllen(len(a.oob))
	// unsafe: the kernel reads the msghdr and writes through its pointers
	// (into a.buf and a.oob) during the call only, and the conversion in
	// the call's argument list keeps a, which holds all three, alive and
	// in place until it returns (unsafe.Pointer's rule 4).
	r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&a.msg)), 0)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), inqOf(a.oob[:a.msg.Controllen]), nil
}

// inqOf returns TCP_CM_INQ's value from a recvmsg(2)'s control bytes, or
// -1 when they do not begin with that message: the read ahead asks for no
// other, and a socket whose options user code has set reads nothing ahead
// (stickyRaw). It parses in place (unix.ParseSocketMessage would
// allocate): a cmsghdr is a size_t length, then the level and the type as
// ints, then the data, aligned.
func inqOf(oob []byte) int {
	const hdr = unix.SizeofCmsghdr
	if len(oob) < hdr+4 {
		return -1
	}
	level := int32(binary.NativeEndian.Uint32(oob[hdr-8:]))
	typ := int32(binary.NativeEndian.Uint32(oob[hdr-4:]))
	at := unix.CmsgLen(0)
	if level != unix.SOL_TCP || typ != unix.TCP_CM_INQ || len(oob) < at+4 {
		return -1
	}
	return int(int32(binary.NativeEndian.Uint32(oob[at:])))
}

// take is Read's part for a connection with input read ahead, with the
// read direction's mu held: a copy, or the error kept.
func (s *aheadSlot) take(b []byte) (int, error) {
	a := s.Load()
	if a.err != nil {
		err := a.err
		s.drop()
		return 0, err
	}
	n := copy(b, a.buf[a.lo:a.hi])
	if a.lo += n; a.lo == a.hi {
		s.drop()
	}
	return n, nil
}

// drop gives s's buffer back to the pool, with the read direction's mu
// held.
func (s *aheadSlot) drop() {
	if a := s.Swap(nil); a != nil {
		a.lo, a.hi, a.err = 0, 0, nil
		readAheads.Put(a)
	}
}

// aheadOf returns the slot of d's input read ahead, with the read
// direction's mu held: a hot connection's, or a run's on the loop; nil
// when nothing is read ahead.
func (d *desc) aheadOf() *aheadSlot {
	if h := d.hotw.Load(); h != nil && h.ahead.Load() != nil {
		return &h.ahead
	}
	if lp := d.p.loop; lp != nil {
		return lp.aheadOf(d)
	}
	return nil
}

// flushAhead writes the input read ahead on c, if any, to w, at most
// limit bytes (-1: all): the first step of a splice from c (WriteTo to a
// socket, and ReadFrom from c), so that what the splice takes from the
// socket comes after it. What w does not take stays read ahead. An error
// the read ahead kept is returned (as Read would report it) and ends c's
// input, as Read's does. It holds c's read direction while w writes, as
// the splice after it does, so w must be a socket's (a copy to any other
// writer takes the input through Read).
func (c *Conn) flushAhead(w io.Writer, limit int64) (int64, error) {
	d := c.d
	if err := d.begin(&d.rd); err != nil {
		return 0, nil // the copy's own read reports it
	}
	defer d.end(&d.rd)
	h := d.aheadOf()
	if h == nil {
		return 0, nil
	}
	a := h.Load()
	if a.err != nil {
		err := a.err
		h.drop()
		d.rd.ended = true
		return 0, os.NewSyscallError("read", err)
	}
	b := a.buf[a.lo:a.hi]
	if limit >= 0 && int64(len(b)) > limit {
		b = b[:limit]
	}
	n, err := w.Write(b)
	switch {
	case n < 0 || n > len(b):
		return 0, errors.New("netpoll: invalid write result") // as io.Copy says
	case err == nil && n < len(b):
		err = io.ErrShortWrite
	}
	if a.lo += n; a.lo == a.hi {
		h.drop()
	}
	return int64(n), err
}

// connOf returns the *Conn a copy reads from, if r is one (or hides one
// from io.Copy: readerOnly).
func connOf(r io.Reader) *Conn {
	switch v := r.(type) {
	case *Conn:
		return v
	case readerOnly:
		return connOf(v.Reader)
	}
	return nil
}
