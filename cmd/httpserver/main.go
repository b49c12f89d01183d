// Command httpserver is a TechEmpower-style HTTP server (GET /plaintext and
// GET /json) on net/http, over package net or a netpoll group, for load
// tests from another process (cmd/loadgen). It prints the address it listens
// on and, with -lifetime, exits by itself.
//
// With -tls it serves HTTPS with a self-signed certificate made at start,
// HTTP/2 or HTTP/1.1 by ALPN; -certout writes that certificate for clients
// to trust. With -debug it serves pprof and the netpoll counters (/stats) on
// a second, package net, listener.
//
//	httpserver -impl netpoll -mode oneshot -addr 127.0.0.1:8080 -debug 127.0.0.1:6060 -lifetime 30s
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/edgepoll/edgepoll/internal/servecmd"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return serve(ctx, args, stdout, stderr)
}

// shutdownGrace is how long http.Server.Shutdown lets requests in flight
// finish before Close cuts the connections left.
const shutdownGrace = time.Second

// serve runs the server until its lifetime passes or ctx ends, then shuts
// down the HTTP servers, closes every connection and returns.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("httpserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f servecmd.Flags
	f.Register(fs, "127.0.0.1:0")
	useTLS := fs.Bool("tls", false, "serve HTTPS, HTTP/2 or HTTP/1.1 by ALPN, with a self-signed certificate made at start")
	certOut := fs.String("certout", "", "with -tls, write the certificate (PEM) to this file for clients to trust")
	debugAddr := fs.String("debug", "", "serve pprof and /stats on this address, with package net (empty: off)")
	files := fs.String("files", "", "serve this directory under GET /files/ with http.FileServer (empty: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *certOut != "" && !*useTLS {
		return fmt.Errorf("bad -certout %q: needs -tls", *certOut)
	}
	if *files != "" {
		if st, err := os.Stat(*files); err != nil || !st.IsDir() {
			return fmt.Errorf("bad -files %q: not a directory (%v)", *files, err)
		}
	}
	s, err := f.Listen(stderr)
	if err != nil {
		return err
	}
	defer s.Close()

	errorLog := log.New(stderr, "httpserver: ", log.LstdFlags)
	l := s.Listener
	if *useTLS {
		if l, err = listenTLS(l, *certOut); err != nil {
			return err
		}
	}
	servers := []*http.Server{{Handler: newHandler(*files), ErrorLog: errorLog}}
	listeners := []net.Listener{l}
	if *debugAddr != "" {
		dl, err := net.Listen("tcp", *debugAddr)
		if err != nil {
			return fmt.Errorf("bad -debug %q: %w", *debugAddr, err)
		}
		servers = append(servers, &http.Server{Handler: newDebugHandler(s.Group), ErrorLog: errorLog})
		listeners = append(listeners, dl)
	}
	s.Announce(stdout, "httpserver")
	if len(listeners) > 1 {
		fmt.Fprintf(stdout, "debug listening on %s\n", listeners[1].Addr())
	}

	// Serve closes its listener when it returns, whatever the reason.
	served := make(chan error, len(servers))
	var serving sync.WaitGroup
	for i, srv := range servers {
		serving.Go(func() { served <- srv.Serve(listeners[i]) })
	}
	err = s.Wait(ctx, served)
	shutdown(servers, errorLog)
	serving.Wait()
	return err
}

// listenTLS wraps l in TLS with a new self-signed certificate, offering h2
// and http/1.1 by ALPN, and writes the certificate to certOut unless it is
// empty. http.Server.Serve sets HTTP/2 up for a listener wrapped this way
// when its own TLSConfig is nil.
func listenTLS(l net.Listener, certOut string) (net.Listener, error) {
	cert, certPEM, err := selfSigned(time.Now())
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	if certOut != "" {
		if err := os.WriteFile(certOut, certPEM, 0o644); err != nil {
			return nil, fmt.Errorf("bad -certout: %w", err)
		}
	}
	return tls.NewListener(l, &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}), nil
}

// shutdown stops every server together: Shutdown closes the listeners and
// idle connections and waits up to shutdownGrace for the others to go idle,
// then Close closes those left.
func shutdown(servers []*http.Server, errorLog *log.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				errorLog.Printf("shutdown: %v; closing the connections left", err)
			}
			srv.Close()
		})
	}
	wg.Wait()
}
