package main

import (
	"bufio"
	"io"
	"net"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// echoConn sends loadproto messages and checks that they come back byte for
// byte, in order.
type echoConn struct {
	c      net.Conn
	r      *bufio.Reader // pipelined echoes may arrive in one segment
	stream *loadproto.Stream
	mark   loadproto.Mark // of every request: Plain, or Delay (-blocked)
	out    []byte         // request being written
	in     []byte         // echo being checked
}

var _ protoConn = (*echoConn)(nil)

// newEchoConn speaks the echo protocol on c, every request marked m; seed
// picks the message bodies, so that connections with different seeds
// never send the same bytes.
func newEchoConn(c net.Conn, size int, seed uint64, m loadproto.Mark) (*echoConn, error) {
	s, err := loadproto.NewStream(size, seed)
	if err != nil {
		return nil, err
	}
	return &echoConn{
		c:      c,
		r:      bufio.NewReaderSize(c, max(size, 4096)),
		stream: s,
		mark:   m,
		out:    make([]byte, size),
		in:     make([]byte, size),
	}, nil
}

func (e *echoConn) send(seq uint64) error {
	e.stream.Put(e.out, seq, e.mark)
	_, err := e.c.Write(e.out)
	return err
}

// recv reads one message. A connection that ends before a full message
// arrives reports io.EOF or io.ErrUnexpectedEOF.
func (e *echoConn) recv(seq uint64) error {
	if _, err := io.ReadFull(e.r, e.in); err != nil {
		return err
	}
	return e.stream.Check(e.in, seq, e.mark)
}

// memstats sends request seq as a Memstats request and reads the server's
// figures; loadproto.ErrEchoed if it echoed the request.
func (e *echoConn) memstats(seq uint64) (loadproto.Figures, error) {
	e.stream.Put(e.out, seq, loadproto.Memstats)
	if _, err := e.c.Write(e.out); err != nil {
		return loadproto.Figures{}, err
	}
	if _, err := io.ReadFull(e.r, e.in); err != nil {
		return loadproto.Figures{}, err
	}
	return e.stream.CheckStats(e.in, seq)
}
