// Command tcpproxy is a goroutine-per-connection TCP proxy on package net
// or on a netpoll group: each accepted connection is forwarded to -to,
// dialed with the same implementation, by two io.Copy calls. io.Copy
// splices between the two sockets (Conn.ReadFrom and WriteTo) unless
// -zerocopy=false hides them. It prints the address it listens on and, with
// -lifetime, exits by itself.
//
//	tcpproxy -impl netpoll -to 127.0.0.1:8080 -addr 127.0.0.1:9000 -lifetime 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"

	"github.com/edgepoll/edgepoll/internal/servecmd"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "tcpproxy:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return serve(ctx, args, stdout, stderr)
}

// serve proxies until the lifetime passes or ctx ends, then closes every
// connection and returns.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tcpproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f servecmd.Flags
	f.Register(fs, "127.0.0.1:0")
	to := fs.String("to", "", "address to forward every connection to (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *to == "" {
		return fmt.Errorf("missing -to: the address to forward to")
	}
	s, err := f.Listen(stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		if s.Group != nil {
			return s.Group.Dial(ctx, f.Network, *to)
		}
		return d.DialContext(ctx, f.Network, *to)
	}
	s.Announce(stdout, "tcpproxy")

	return s.Serve(ctx, func(ctx context.Context, c net.Conn) {
		b, err := dial(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "tcpproxy: %v\n", err)
			return
		}
		defer b.Close()
		stop := context.AfterFunc(ctx, func() { b.Close() }) // serving stopped
		defer stop()
		fwd := b // b stays the conn the AfterFunc closes, from its own goroutine
		if !f.ZeroCopy {
			fwd = servecmd.CopyOnly(b)
		}
		forward(c, fwd)
	})
}

// forward copies both ways between a and b; when one direction ends it
// half-closes the other side's writing end, and it returns once both have
// ended.
func forward(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}
