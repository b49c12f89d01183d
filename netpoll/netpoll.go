package netpoll

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// The default group, built on first use from the NETPOLL environment
// variable (see ParseConfig), serves the package-level Listen and Dial.
var defaultGroup struct {
	mu     sync.Mutex // guards the fields below
	g      *Group
	cfg    Config
	cfgErr error // a bad NETPOLL: kept, since the environment is read once
	read   bool  // NETPOLL has been read
}

// Default returns the group behind Listen and Dial, creating it from the
// NETPOLL environment variable on first use. A bad NETPOLL is an error
// naming the bad key or value, returned by every call. An error creating
// the group (out of fds, say) is returned to that call only: the next
// call tries again.
func Default() (*Group, error) {
	defaultGroup.mu.Lock()
	defer defaultGroup.mu.Unlock()
	if defaultGroup.g != nil {
		return defaultGroup.g, nil
	}
	if !defaultGroup.read {
		defaultGroup.cfg, defaultGroup.cfgErr = configFromEnv()
		defaultGroup.read = true
	}
	if defaultGroup.cfgErr != nil {
		return nil, defaultGroup.cfgErr
	}
	g, err := New(defaultGroup.cfg)
	if err != nil {
		return nil, err
	}
	defaultGroup.g = g
	return g, nil
}

// Listen announces on address using the default group (Group.Listen).
func Listen(network, address string) (*Listener, error) {
	return ListenContext(context.Background(), network, address)
}

// ListenContext is Listen with a context (Group.Listen).
func ListenContext(ctx context.Context, network, address string) (*Listener, error) {
	g, err := Default()
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	return g.Listen(ctx, network, address)
}

// Dial connects to address using the default group (Group.Dial).
func Dial(network, address string) (*Conn, error) {
	return DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context (Group.Dial).
func DialContext(ctx context.Context, network, address string) (*Conn, error) {
	g, err := Default()
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	return g.Dial(ctx, network, address)
}

var errGroupClosed = fmt.Errorf("netpoll: group closed: %w", net.ErrClosed)

// ErrSharedListener is wrapped by the errors of what a listener shared by
// pollers (Sharing Exclusive, wakeAll, ReusePort) cannot do: a raw Read or
// Write, and File of a ReusePort listener with more than one socket. It
// wraps errors.ErrUnsupported.
var ErrSharedListener = fmt.Errorf("netpoll: not supported on a listener shared by pollers: %w", errors.ErrUnsupported)

// checkNetwork returns an error for networks we do not serve.
func checkNetwork(network string) error {
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
		return nil
	}
	return net.UnknownNetworkError(network)
}

// FileListener returns a Listener on a copy of the listening socket f, on
// the default group (see Group.FileListener).
func FileListener(f *os.File) (*Listener, error) {
	g, err := Default()
	if err != nil {
		return nil, fileError(f, err)
	}
	return g.FileListener(f)
}

// fileError wraps an error of FileListener as package net's FileListener
// does.
func fileError(f *os.File, err error) error {
	name := ""
	if f != nil {
		name = f.Name()
	}
	return &net.OpError{Op: "file", Net: "file+net", Addr: fileAddr(name), Err: err}
}

// fileAddr names the file of a FileListener error, as package net's does.
type fileAddr string

func (fileAddr) Network() string  { return "file+net" }
func (f fileAddr) String() string { return string(f) }

// Config returns the configuration the group was created with.
func (g *Group) Config() Config { return g.cfg }

// checkOpen fails once the group is closed.
func (g *Group) checkOpen() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errGroupClosed
	}
	return nil
}

// Accept waits for and returns the next connection, a *Conn. It fails
// with an error wrapping os.ErrDeadlineExceeded once the deadline
// (SetDeadline) has passed, and with one wrapping net.ErrClosed after
// Close.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptConn()
	if err != nil {
		return nil, err // not a nil *Conn in a non-nil net.Conn
	}
	return c, nil
}
