// Package servecmd is what the goroutine-per-connection servers in cmd/
// share: the flags that choose package net or a netpoll group (with the
// netpoll Config as flags), the listener, a CPU profile and a lifetime
// after which the server exits by itself. ServeOnDemand serves the same
// listener with a netpoll.Server instead, a handler call per readable
// connection.
package servecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Flags are the common server flags.
type Flags struct {
	Impl       string
	Mode       string
	Pollers    int
	Sharing    string
	Spin       string
	Wait       string
	ShortRead  string
	Dispatch   string
	HotRead    string
	ReadAhead  string
	Network    string
	Addr       string
	Lifetime   time.Duration
	CPUProfile string
	Stats      bool
	ZeroCopy   bool
}

// Register adds the common flags to fs.
func (f *Flags) Register(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&f.Impl, "impl", "netpoll", "listener implementation: net or netpoll")
	fs.StringVar(&f.Mode, "mode", "et", "netpoll registration mode: et, oneshot or lt")
	fs.IntVar(&f.Pollers, "pollers", 0, "netpoll pollers (0: the library default)")
	fs.StringVar(&f.Sharing, "sharing", "single", "netpoll listener sharing: single, exclusive, wakeall or reuseport")
	fs.StringVar(&f.Spin, "spin", "default", `netpoll spin: a budget (a duration, 0 for never, or "forever"), "auto", or "default" (the library's: auto)`)
	fs.StringVar(&f.Wait, "wait", "default", `netpoll wait strategy: nested, block, inline or "default" (nested; block with -sharing exclusive)`)
	fs.StringVar(&f.ShortRead, "shortread", "default", `netpoll: skip the syscall that would return EAGAIN after a short read or write: on, off, or "default" (the library's: on)`)
	fs.StringVar(&f.Dispatch, "dispatch", "default", `netpoll.Server: run a handler on a goroutine that keeps a busy connection, waiting on the runtime's netpoller ("hot", the default with mode et), on the goroutine that polled ("inline"), one after another on the poller's own thread with a watchdog ("loop", with wait block), or on a goroutine of its own per call ("go")`)
	fs.StringVar(&f.HotRead, "hotread", "default", `netpoll: a busy connection's reads wait on the runtime's netpoller through a dup of its fd: on, off, auto (on while GOMAXPROCS > 1, and with one P while the gaps between reads are beyond adaptive spinning), or "default" (auto with mode et, wait nested and no fixed spin; else off)`)
	fs.StringVar(&f.ReadAhead, "readahead", "default", `netpoll.Server: a hot connection's goroutine reads its next input ahead for the handler ("on", the default with dispatch hot) or polls for it ("off")`)
	fs.StringVar(&f.Network, "net", "tcp", "network: tcp, tcp4, tcp6 or unix")
	fs.StringVar(&f.Addr, "addr", defaultAddr, "address to listen on")
	fs.DurationVar(&f.Lifetime, "lifetime", 0, "exit after this long (0: run until interrupted)")
	fs.StringVar(&f.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.BoolVar(&f.Stats, "stats", false, "print the netpoll group's counters to stderr on exit (and, serving on demand, the netpoll.Server's)")
	fs.BoolVar(&f.ZeroCopy, "zerocopy", true, "false hides the connections' ReadFrom and WriteTo, so io.Copy, http.FileServer and proxies copy through user space instead of sendfile and splice (netpoll as it was before them)")
}

// Config returns the netpoll Config the flags describe, through
// netpoll.ParseConfig so that a bad value is named the same way NETPOLL's
// would be.
func (f *Flags) Config() (netpoll.Config, error) {
	s := fmt.Sprintf("mode=%s,sharing=%s,spin=%s,wait=%s,shortread=%s,dispatch=%s,hotread=%s,readahead=%s", f.Mode, f.Sharing, f.Spin, f.Wait, f.ShortRead, f.Dispatch, f.HotRead, f.ReadAhead)
	if f.Pollers != 0 {
		s += fmt.Sprintf(",pollers=%d", f.Pollers)
	}
	return netpoll.ParseConfig(s)
}

// Label is the configuration as key=value benchmark labels.
func (f *Flags) Label() string {
	if !f.ZeroCopy {
		return f.label() + "/zerocopy=off"
	}
	return f.label()
}

func (f *Flags) label() string {
	if f.Impl == "net" {
		return "impl=net"
	}
	l := fmt.Sprintf("impl=netpoll/mode=%s/pollers=%d/sharing=%s/spin=%s/wait=%s", f.Mode, max(f.Pollers, netpoll.DefaultPollers), f.Sharing, f.Spin, f.Wait)
	if f.ShortRead != "default" {
		l += "/shortread=" + f.ShortRead
	}
	if f.Dispatch != "default" {
		l += "/dispatch=" + f.Dispatch
	}
	if f.HotRead != "default" {
		l += "/hotread=" + f.HotRead
	}
	if f.ReadAhead != "default" {
		l += "/readahead=" + f.ReadAhead
	}
	return l
}

// Server is a listener chosen by the flags, and what must be closed with it.
type Server struct {
	Listener net.Listener
	Group    *netpoll.Group // nil for -impl net

	// ConnState, if set before ServeOnDemand, is its netpoll.Server's
	// ConnState hook. With -zerocopy=false it sees the connection the
	// Server serves (netpoll's or package net's own), not the one the
	// handler gets.
	ConnState func(c net.Conn, state netpoll.ConnState)

	// IdleTimeout, if set before ServeOnDemand, is its netpoll.Server's:
	// a connection that waits that long for a request is closed.
	IdleTimeout time.Duration

	flags   *Flags
	profile *os.File
	stderr  io.Writer // for -stats
}

// Listen builds the listener the flags ask for and starts the CPU profile.
// With -stats, Close prints the group's counters to stderr.
func (f *Flags) Listen(stderr io.Writer) (*Server, error) {
	s := &Server{flags: f, stderr: stderr}
	var err error
	switch f.Impl {
	case "net":
		s.Listener, err = net.Listen(f.Network, f.Addr)
	case "netpoll":
		var cfg netpoll.Config
		if cfg, err = f.Config(); err != nil {
			return nil, err
		}
		if s.Group, err = netpoll.New(cfg); err != nil {
			return nil, err
		}
		s.Listener, err = s.Group.Listen(context.Background(), f.Network, f.Addr)
	default:
		return nil, fmt.Errorf("bad -impl %q: want net or netpoll", f.Impl)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	if !f.ZeroCopy {
		s.Listener = copyListener{s.Listener}
	}
	if f.CPUProfile != "" {
		if s.profile, err = os.Create(f.CPUProfile); err == nil {
			err = pprof.StartCPUProfile(s.profile)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return s, nil
}

// Announce prints the address the server listens on, as the first line of
// stdout, for scripts and tests to read.
func (s *Server) Announce(w io.Writer, what string) {
	fmt.Fprintf(w, "%s listening on %s (%s)\n", what, s.Listener.Addr(), s.flags.Label())
}

// Wait blocks until the lifetime passes, ctx ends or serve returns, and
// reports serve's error unless it came from the listener closing.
func (s *Server) Wait(ctx context.Context, served <-chan error) error {
	var expire <-chan time.Time
	if s.flags.Lifetime > 0 {
		t := time.NewTimer(s.flags.Lifetime)
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-expire:
		return nil
	case <-ctx.Done():
		return nil
	case err := <-served:
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		return err
	}
}

// Close stops the profile and closes the listener and group.
func (s *Server) Close() {
	if s.profile != nil {
		pprof.StopCPUProfile()
		s.profile.Close()
	}
	if s.Listener != nil {
		s.Listener.Close()
	}
	if s.Group != nil {
		if s.flags.Stats {
			PrintStats(s.stderr, s.Group)
		}
		s.Group.Close()
	}
}

// PrintStats writes every statistic of a group (netpoll.AllStats), summed
// over its pollers, as one line of name=value pairs.
func PrintStats(w io.Writer, g *netpoll.Group) {
	fmt.Fprintf(w, "netpoll stats: %s\n", samples(false, g.ReadStats))
}

// samples reads every group or server statistic through read and renders
// them as name=value pairs, in netpoll.AllStats's order.
func samples(server bool, read func([]netpoll.Sample) error) string {
	ss, err := readSamples(server, read)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", s.Name, s.Value)
	}
	return b.String()
}

func readSamples(server bool, read func([]netpoll.Sample) error) ([]netpoll.Sample, error) {
	var ss []netpoll.Sample
	for _, d := range netpoll.AllStats() {
		if d.Server == server {
			ss = append(ss, netpoll.Sample{Name: d.Name})
		}
	}
	return ss, read(ss)
}

// ReadStats reads every group statistic (server false) or every Server
// statistic (true) through read, a Group's or Server's ReadStats, by name.
func ReadStats(server bool, read func([]netpoll.Sample) error) (map[string]uint64, error) {
	ss, err := readSamples(server, read)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(ss))
	for _, s := range ss {
		m[s.Name] = s.Value
	}
	return m, nil
}

// Serve accepts on s.Listener and runs handle in a goroutine per
// connection until the lifetime passes, ctx ends or Accept fails. Then it
// closes the listener and every connection still open, cancels the context
// handle got (for what else a handler opened), waits for the handlers and
// returns Accept's error, or nil for a close. handle need not close c.
func (s *Server) Serve(ctx context.Context, handle func(ctx context.Context, c net.Conn)) error {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var conns sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	served := make(chan error, 1)
	go func() {
		for {
			c, err := s.Listener.Accept()
			if err != nil {
				served <- err
				return
			}
			mu.Lock()
			open[c] = struct{}{}
			mu.Unlock()
			conns.Go(func() {
				defer c.Close()
				handle(hctx, c)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			})
		}
	}()
	err := s.Wait(ctx, served)
	s.Listener.Close()
	cancel()
	mu.Lock()
	for c := range open {
		c.Close()
	}
	mu.Unlock()
	conns.Wait()
	return err
}

// ShutdownGrace is how long ServeOnDemand's Shutdown lets running
// handlers finish before Close cuts their connections.
const ShutdownGrace = time.Second

// ServeOnDemand serves s.Listener with a netpoll.Server running h until
// the lifetime passes, ctx ends or Serve fails: on netpoll's listener an
// idle connection holds no goroutine; on package net's the Server's
// fallback waits in a goroutine per connection, with no buffer. Then,
// with -stats, it prints the Server's counters as they are when it stops;
// Shutdown closes the listener and the idle connections and waits up to
// ShutdownGrace for the running handlers, Close cuts those left, and it
// waits for their handlers to return. Errors of handlers close their
// connections; panics and retried accept errors go to stderr. It returns
// Serve's error, or nil for a close.
func (s *Server) ServeOnDemand(ctx context.Context, h netpoll.Handler) error {
	l := s.Listener
	if cl, ok := l.(copyListener); ok {
		// The Server must see netpoll's own Conn to serve it with no
		// goroutine (and a syscall.Conn for its fallback): it serves the
		// listener under copyListener, and h gets what it would have
		// accepted.
		l = cl.Listener
		inner := h
		h = netpoll.HandlerFunc(func(c net.Conn) error { return inner.ServeConn(CopyOnly(c)) })
	}
	srv := &netpoll.Server{Handler: h, ConnState: s.ConnState, IdleTimeout: s.IdleTimeout, ErrorLog: log.New(s.stderr, "", log.LstdFlags)}
	served := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		served <- srv.Serve(l)
	}()
	err := s.Wait(ctx, served)
	if s.flags.Stats {
		PrintServerStats(s.stderr, srv)
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		srv.Close()
		// Close does not wait: Shutdown again waits for the handlers
		// whose connections it closed, as Serve waits for its own.
		srv.Shutdown(context.Background())
	}
	<-done
	return err
}

// PrintServerStats writes every statistic of a netpoll.Server as one line
// of name=value pairs.
func PrintServerStats(w io.Writer, srv *netpoll.Server) {
	fmt.Fprintf(w, "netpoll server stats: %s\n", samples(true, srv.ReadStats))
}

// copyListener accepts connections that show only net.Conn's methods, so
// io.Copy and net/http find no ReadFrom or WriteTo and copy through a
// buffer (-zerocopy=false).
type copyListener struct{ net.Listener }

func (l copyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return CopyOnly(c), nil
}

// CopyOnly hides c's ReadFrom and WriteTo, and every other method but
// net.Conn's and CloseWrite.
func CopyOnly(c net.Conn) net.Conn { return copyConn{c} }

type copyConn struct{ net.Conn }

// CloseWrite half-closes c as TCPConn's and Conn's do, for proxies and
// net/http.
func (c copyConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("%T has no CloseWrite", c.Conn)
}
