// Command xplat is a small program on netpoll's API that every OS builds:
// a Server that echoes, and a client that dials it, waits for each echo
// with WaitRead (holding no buffer) and reads it. CI builds and vets it
// for darwin, windows and Linux's 32-bit and arm64 layouts (.ci/run), so
// that a program written against the package on Linux builds on a
// developer's Mac; its test runs it here.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/edgepoll/edgepoll/netpoll"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "xplat:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xplat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 3, "messages to echo")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := netpoll.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &netpoll.Server{Handler: netpoll.HandlerFunc(echo)}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	c, err := netpoll.Dial("tcp", l.Addr().String())
	if err != nil {
		srv.Close()
		return err
	}
	err = talk(c, *n, stdout)
	c.Close()
	if serr := srv.Shutdown(context.Background()); err == nil {
		err = serr
	}
	if serr := <-served; !errors.Is(serr, netpoll.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// talk sends n messages on c and prints each echo, waiting for it with
// WaitRead before it takes a buffer.
func talk(c *netpoll.Conn, n int, stdout io.Writer) error {
	for i := range n {
		msg := fmt.Sprintf("message %d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		if err := c.WaitRead(); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", buf)
	}
	return nil
}

// echo is the Server's handler: called when c is readable, it echoes what
// one Read returns and returns nil to wait for more; an error (io.EOF
// among them) closes the connection.
func echo(c net.Conn) error {
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	_, err = c.Write(buf[:n])
	return err
}
