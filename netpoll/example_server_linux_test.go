package netpoll_test

import (
	"bufio"
	"fmt"
	"log"
	"net"
	"strings"

	"github.com/edgepoll/edgepoll/netpoll"
)

// session is one connection's state between handler calls: the Server
// holds no goroutine for it while it is idle, so what a connection must
// remember lives here.
type session struct {
	lines int // lines answered so far on this connection
}

// ServeConn answers each line with its number on the connection. It reads
// one line at a time (a real protocol would keep a bufio.Reader here and
// return only when its Buffered is 0), and returns nil to wait for more.
func (s *session) ServeConn(c net.Conn) error {
	line, err := readLine(c)
	if err != nil {
		return err // EOF, a reset, a timeout: the Server closes c
	}
	s.lines++
	_, err = fmt.Fprintf(c, "%d: %s\n", s.lines, line)
	return err
}

// readLine reads up to a newline a byte at a time, so that nothing past it
// is taken from the socket.
func readLine(c net.Conn) (string, error) {
	var b strings.Builder
	var one [1]byte
	for {
		if _, err := c.Read(one[:]); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			return b.String(), nil
		}
		b.WriteByte(one[0])
	}
}

// Serving on demand with per-connection state: NewHandler makes each
// connection's own handler value.
func ExampleServer() {
	l, err := netpoll.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := &netpoll.Server{NewHandler: func(net.Conn) netpoll.Handler { return new(session) }}
	go s.Serve(l)
	defer s.Close()

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for _, msg := range []string{"hello", "again"} {
		fmt.Fprintln(c, msg)
		reply, err := r.ReadString('\n')
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(reply)
	}
	// Output:
	// 1: hello
	// 2: again
}
