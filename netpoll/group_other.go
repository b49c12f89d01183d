//go:build !linux

package netpoll

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

// Group is, on this OS, a set of package net's listeners and connections:
// the epoll pollers are Linux's, and here the Go runtime's poller waits for
// every connection. New checks a Config as it does on Linux. KeepAlive,
// KeepAliveConfig and Control apply as there (they go to net.ListenConfig
// and net.Dialer); Pollers, Sharing, DisableSpin and Experiment choose how
// epoll is used and have no effect here. Its methods are safe for
// concurrent use.
type Group struct {
	cfg Config
	lc  net.ListenConfig
	d   net.Dialer

	conns   atomic.Int64  // connections open now (Stats.Conns)
	accepts atomic.Uint64 // connections accepted (Stats.Accepts)

	mu        sync.Mutex // guards closed, listeners and open
	closed    bool
	listeners map[*Listener]struct{}
	open      map[*Conn]struct{} // for Close
}

// New returns a group configured by cfg, or a *ConfigError for a bad
// configuration, as on Linux.
func New(cfg Config) (*Group, error) {
	if _, err := cfg.settings(); err != nil {
		return nil, err
	}
	return &Group{
		cfg:       cfg,
		lc:        net.ListenConfig{KeepAlive: cfg.KeepAlive, KeepAliveConfig: cfg.KeepAliveConfig, Control: cfg.Control},
		d:         net.Dialer{KeepAlive: cfg.KeepAlive, KeepAliveConfig: cfg.KeepAliveConfig, Control: cfg.Control},
		listeners: map[*Listener]struct{}{},
		open:      map[*Conn]struct{}{},
	}, nil
}

// Listen announces on a local address with net.ListenConfig. Networks:
// tcp, tcp4, tcp6, unix. The context's cancellation applies to resolving
// the address.
func (g *Group) Listen(ctx context.Context, network, address string) (*Listener, error) {
	err := checkNetwork(network)
	if err == nil {
		err = g.checkOpen()
	}
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	nl, err := g.lc.Listen(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return g.addListener(nl, network, false)
}

// FileListener returns a listener on the listening socket f holds, as
// net.FileListener does: socket activation. The socket stays open in f
// too; closing one leaves the other open. The connections it accepts get
// the group's TCP keep-alive.
func (g *Group) FileListener(f *os.File) (*Listener, error) {
	if err := g.checkOpen(); err != nil {
		return nil, &net.OpError{Op: "file", Net: "file+net", Err: err}
	}
	nl, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	return g.addListener(nl, nl.Addr().Network(), true)
}

// addListener wraps nl, a *net.TCPListener or *net.UnixListener, and adds
// it to the group, unless the group has closed: then it closes nl.
func (g *Group) addListener(nl net.Listener, network string, file bool) (*Listener, error) {
	l := &Listener{l: nl.(netListener), g: g, network: network, file: file}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		nl.Close()
		return nil, &net.OpError{Op: "listen", Net: network, Addr: nl.Addr(), Err: errGroupClosed}
	}
	g.listeners[l] = struct{}{}
	return l, nil
}

// Dial connects to address with net.Dialer. Networks: tcp, tcp4, tcp6,
// unix. The context's deadline and cancellation apply to resolving and
// connecting.
func (g *Group) Dial(ctx context.Context, network, address string) (*Conn, error) {
	err := checkNetwork(network)
	if err == nil {
		err = g.checkOpen()
	}
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	nc, err := g.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	c, err := g.newConn(nc, network)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: nc.RemoteAddr(), Err: err}
	}
	return c, nil
}

// newConn wraps nc, a *net.TCPConn or *net.UnixConn, and adds it to the
// group, unless the group has closed: then it closes nc.
func (g *Group) newConn(nc net.Conn, network string) (*Conn, error) {
	c := &Conn{g: g, network: network}
	switch nc := nc.(type) {
	case *net.TCPConn:
		c.conn, c.tcp = nc, nc
	case *net.UnixConn:
		c.conn = nc
	default:
		// checkNetwork let only stream networks through.
		panic(fmt.Sprintf("netpoll: package net made a %T for network %q, want a *net.TCPConn or *net.UnixConn", nc, network))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		nc.Close()
		return nil, errGroupClosed
	}
	g.open[c] = struct{}{}
	g.conns.Add(1)
	return c, nil
}

// forget removes a closed connection from the group: once per
// connection (Conn.Close).
func (g *Group) forget(c *Conn) {
	g.mu.Lock()
	delete(g.open, c) // a no-op once Close has taken the map
	g.mu.Unlock()
	g.conns.Add(-1)
}

// forgetListener removes a closed listener from the group: once per
// listener (Listener.Close).
func (g *Group) forgetListener(l *Listener) {
	g.mu.Lock()
	delete(g.listeners, l)
	g.mu.Unlock()
}

// Stats returns the counters this OS keeps: Conns and Accepts. Parks and
// Wakeups are the runtime's poller's here, which the package cannot see:
// they stay 0.
func (g *Group) Stats() Stats {
	return Stats{Conns: uint64(max(g.conns.Load(), 0)), Accepts: g.accepts.Load()}
}

// ReadStats sets the Value of each sample to the group's statistic of
// that Name, as on Linux: AllStats lists the names, and an unknown name,
// or a Server's, gets 0 and an error wrapping ErrUnknownStat. On this OS
// only /netpoll/conns:conns and /netpoll/accepts:conns count; the rest
// read 0 (/netpoll/pollers:pollers too: the group has none of its own).
func (g *Group) ReadStats(samples []Sample) error {
	c := g.counters()
	return readStats(samples, &statSource{g: &c, p: &c.Total}, false)
}

// ReadPollerStats fails on this OS: the group has no pollers.
func (g *Group) ReadPollerStats(poller int, samples []Sample) error {
	return fmt.Errorf("netpoll: no poller %d in a group of 0 (on %s a group runs on package net)", poller, runtime.GOOS)
}

// counters snapshots the counters the group keeps.
func (g *Group) counters() groupStats {
	st := g.Stats()
	return groupStats{Total: pollerStats{Conns: st.Conns, Accepts: st.Accepts}}
}

// Close closes every listener and connection of the group. Blocked
// operations fail with net.ErrClosed. Calling it again returns an error
// wrapping net.ErrClosed.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errGroupClosed
	}
	g.closed = true
	ls, cs := g.listeners, g.open
	g.listeners, g.open = nil, nil
	g.mu.Unlock()
	for l := range ls {
		l.Close()
	}
	for c := range cs {
		c.Close()
	}
	return nil
}
