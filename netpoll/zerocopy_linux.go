package netpoll

import (
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Zero copy. Conn.ReadFrom and Conn.WriteTo move data inside the kernel
// where package net does: sendfile(2) from a regular file, splice(2)
// through a pipe between stream sockets. They park through the
// descriptors they run on (ours, or the runtime's for a net.Conn), so
// deadlines and Close apply to a parked transfer as to Read and Write.
// Anything else is copied through user space, as net does.
//
// Neither path tracks short transfers (desc.transfer with size 0): they leave
// the directions they use not drained, so the next Read or Write makes its
// syscall instead of waiting for an edge the transfer may have consumed.

var (
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
)

const (
	// maxSendfile caps one sendfile call: the kernel moves at most
	// MAX_RW_COUNT (2 GiB minus a page) anyway, and the count is an int.
	maxSendfile = 1<<31 - 1
	// maxSplice is both what one splice into the pipe asks for and the
	// pipe's size: 1 MiB, the default /proc/sys/fs/pipe-max-size and what
	// package net uses. A 64 KiB pipe takes 16 times the syscalls.
	maxSplice = 1 << 20
)

// ReadFrom implements io.ReaderFrom, which io.Copy uses. From an *os.File
// of a regular file, or an io.LimitedReader around one, it sends with
// sendfile from the file's current offset, which it advances. From a
// stream connection, this package's *Conn or package net's *net.TCPConn
// or *net.UnixConn (or an io.LimitedReader around one), it splices. The
// write deadline applies while the socket is full; the source's read
// deadline while the source is empty. Other readers are copied through a
// buffer, as package net does. Stats counts the zero-copy calls and bytes.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	n, err := c.readFrom(r)
	if err != nil && err != io.EOF {
		err = c.opError("readfrom", err)
	}
	return n, err
}

func (c *Conn) readFrom(orig io.Reader) (int64, error) {
	r := orig
	remain := int64(-1) // no limit
	lr, limited := r.(*io.LimitedReader)
	if limited {
		remain, r = lr.N, lr.R
		if remain <= 0 {
			return 0, nil
		}
	}
	// Input a hot Server wait read ahead on a source of ours comes before
	// what a splice would take from its socket (readahead_linux.go).
	var ahead int64
	if src := connOf(r); src != nil {
		var err error
		ahead, err = src.flushAhead(writerOnly{c}, remain)
		if limited {
			remain -= ahead
			lr.N = remain
		}
		if err != nil || remain == 0 {
			return ahead, err
		}
	}
	var n int64
	var err error
	var handled bool
	switch src := r.(type) {
	case *os.File:
		n, err, handled = c.sendfile(src, remain)
	default:
		if s, ok := spliceSource(src); ok {
			n, err, handled = splice(s, c.side(&c.d.wr), remain, c.d.p)
		}
	}
	if !handled {
		n, err = io.Copy(writerOnly{c}, orig)
		return ahead + n, err
	}
	if limited {
		lr.N = remain - n
	}
	return ahead + n, err
}

// WriteTo implements io.WriterTo, which io.Copy uses before the
// destination's ReadFrom. To this package's *Conn or package net's
// *net.TCPConn or *net.UnixConn it splices until EOF (net's TCPConn
// ReadFrom would not splice from a reader it does not know); to any other
// writer it copies.
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	var ahead, n int64
	var err error
	handled := false
	if dst, ok := spliceDest(w); ok {
		// Input a hot Server wait read ahead comes before what the splice
		// takes from the socket (readahead_linux.go); the copy below takes
		// it through Read, which holds no lock while w writes.
		if ahead, err = c.flushAhead(w, -1); err != nil {
			return ahead, c.opError("writeto", err)
		}
		n, err, handled = splice(c.side(&c.d.rd), dst, -1, c.d.p)
	}
	if !handled {
		n, err = io.Copy(w, readerOnly{c})
	}
	n += ahead
	if err != nil && err != io.EOF {
		err = c.opError("writeto", err)
	}
	return n, err
}

// writerOnly and readerOnly hide ReadFrom and WriteTo from io.Copy, so the
// fallback copy does not come back here.
type writerOnly struct{ io.Writer }

type readerOnly struct{ io.Reader }

// sendfile sends up to remain bytes (-1: to the end) of f to c, as
// package net's sendFile does. handled is false when sendfile cannot read
// f (not a regular file: EINVAL) before any byte moved.
func (c *Conn) sendfile(f *os.File, remain int64) (written int64, err error, handled bool) {
	sc, err := f.SyscallConn()
	if err != nil {
		return 0, nil, false
	}
	d := c.d
	if err := d.begin(&d.wr); err != nil {
		return 0, err, true
	}
	defer d.end(&d.wr)
	calls := uint64(0)
	defer func() {
		d.p.st.add(cSendfiles, calls)
		d.p.st.add(cSendfileBytes, uint64(written))
	}()
	// The file's RawConn holds f open for the transfer; a regular file
	// never waits, so f runs once.
	rerr := sc.Read(func(src uintptr) bool {
		for remain < 0 || written < remain {
			chunk := maxSendfile
			if remain >= 0 {
				chunk = int(min(remain-written, maxSendfile))
			}
			var n int
			n, err = d.transfer(&d.wr, 0, func() (int, error) {
				calls++
				return noCount(unix.Sendfile(d.fd, int(src), nil, chunk))
			})
			written += int64(n)
			if err != nil || n == 0 {
				break // n == 0: the end of the file
			}
		}
		return true
	})
	switch err {
	case unix.EINVAL, unix.ENOSYS, unix.EOPNOTSUPP:
		// Not a file sendfile reads (a pipe, a directory): copy instead,
		// unless some of it went already.
		return written, syscallErr("sendfile", err), written > 0
	}
	if err == nil {
		err = rerr // f was closed
	}
	return written, syscallErr("sendfile", err), true
}

// side is one end of a splice: a descriptor of ours, or package net's
// connection through its RawConn. run runs op on the fd until it returns
// something other than EAGAIN, parking in between.
type side struct {
	d   *desc
	dr  *dir
	rc  syscall.RawConn
	out bool // the destination (rc.Write) rather than the source (rc.Read)
}

func (c *Conn) side(dr *dir) side { return side{d: c.d, dr: dr, out: dr == &c.d.wr} }

// spliceSource reports whether r is a stream socket splice can read, as
// package net's spliceFrom accepts them.
func spliceSource(r io.Reader) (side, bool) {
	switch v := r.(type) {
	case *Conn:
		return v.side(&v.d.rd), true
	case readerOnly:
		return spliceSource(v.Reader)
	case *net.TCPConn:
		return netSide(v, false)
	case *net.UnixConn:
		if v.LocalAddr().Network() == "unix" {
			return netSide(v, false)
		}
	}
	return side{}, false
}

// spliceDest is spliceSource for a destination.
func spliceDest(w io.Writer) (side, bool) {
	switch v := w.(type) {
	case *Conn:
		return v.side(&v.d.wr), true
	case *net.TCPConn:
		return netSide(v, true)
	case *net.UnixConn:
		if v.LocalAddr().Network() == "unix" {
			return netSide(v, true)
		}
	}
	return side{}, false
}

func netSide(c syscall.Conn, out bool) (side, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return side{}, false
	}
	return side{rc: rc, out: out}, true
}

// begin starts a transfer on s: for a descriptor of ours, a reference and
// the direction's lock for the whole transfer, as Read and Write hold them.
func (s side) begin() error {
	if s.d == nil {
		return nil
	}
	return s.d.begin(s.dr)
}

func (s side) end() {
	if s.d != nil {
		s.d.end(s.dr)
	}
}

func (s side) run(op func(fd int) (int, error)) (int, error) {
	if s.d != nil {
		return s.d.transfer(s.dr, 0, func() (int, error) { return op(s.d.fd) })
	}
	var n int
	var err error
	f := func(fd uintptr) bool {
		for {
			n, err = op(int(fd))
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	}
	var rerr error
	if s.out {
		rerr = s.rc.Write(f)
	} else {
		rerr = s.rc.Read(f)
	}
	if rerr != nil {
		return 0, rerr
	}
	return n, err
}

// splice moves up to remain bytes (-1: until EOF) from src to dst through
// a pipe, counting on p. handled is false when src cannot be spliced
// (EINVAL on the first splice), as package net's Splice decides.
func splice(src, dst side, remain int64, p *poller) (written int64, err error, handled bool) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return 0, nil, false // out of fds: the copy may still work
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	// Best effort, as net: a smaller pipe only costs more calls.
	unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, maxSplice)
	if err := dst.begin(); err != nil {
		return 0, err, true
	}
	defer dst.end()
	if err := src.begin(); err != nil {
		return 0, err, true
	}
	defer src.end()
	calls := uint64(0)
	defer func() {
		p.st.add(cSplices, calls)
		p.st.add(cSpliceBytes, uint64(written))
	}()
	for remain < 0 || written < remain {
		want := maxSplice
		if remain >= 0 {
			want = int(min(remain-written, maxSplice))
		}
		// Into the pipe: the pipe is empty here, so EAGAIN means the
		// source is.
		in, err := src.run(func(fd int) (int, error) {
			calls++
			return noCount(unix.Splice(fd, nil, fds[1], nil, want, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
		})
		if err == unix.EINVAL && !handled {
			return 0, nil, false // not a socket splice reads
		}
		handled = true
		if err != nil {
			return written, syscallErr("splice", err), true
		}
		if in == 0 {
			return written, nil, true // EOF
		}
		// Out of the pipe, all of it: EAGAIN means the destination is full.
		for in > 0 {
			out, err := dst.run(func(fd int) (int, error) {
				calls++
				return noCount(unix.Splice(fds[0], nil, fd, nil, in, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK))
			})
			written += int64(out)
			in -= out
			if err != nil {
				return written, syscallErr("splice", err), true
			}
		}
	}
	return written, nil, true
}

// noCount drops the count a failed syscall returns (-1), so that it is
// never added to what moved.
func noCount[N int | int64](n N, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	return int(n), nil
}
