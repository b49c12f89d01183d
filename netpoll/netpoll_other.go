//go:build !linux

package netpoll

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"runtime"
)

var errUnsupported = fmt.Errorf("netpoll: %s is not supported, only linux: %w", runtime.GOOS, errors.ErrUnsupported)

// Group is a set of epoll pollers; on this OS it cannot be created.
type Group struct{ cfg Config }

// New returns an error wrapping errors.ErrUnsupported on this OS.
func New(cfg Config) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return nil, errUnsupported
}

func (g *Group) Config() Config { return g.cfg }

func (g *Group) Listen(context.Context, string, string) (net.Listener, error) {
	return nil, errUnsupported
}

func (g *Group) Dial(context.Context, string, string) (net.Conn, error) { return nil, errUnsupported }

func (g *Group) Stats() Stats { return Stats{} }

func (g *Group) Close() error { return errUnsupported }

// Default returns an error wrapping errors.ErrUnsupported on this OS.
func Default() (*Group, error) { return nil, errUnsupported }

func Listen(network, address string) (net.Listener, error) { return nil, errUnsupported }

func Dial(network, address string) (net.Conn, error) { return nil, errUnsupported }

// Serve returns an error wrapping errors.ErrUnsupported on this OS.
func (s *Server) Serve(net.Listener) error { return errUnsupported }

// Shutdown returns an error wrapping errors.ErrUnsupported on this OS.
func (s *Server) Shutdown(context.Context) error { return errUnsupported }

// Close returns an error wrapping errors.ErrUnsupported on this OS.
func (s *Server) Close() error { return errUnsupported }

// Conns yields nothing on this OS.
func (s *Server) Conns() iter.Seq2[net.Conn, ConnState] {
	return func(func(net.Conn, ConnState) bool) {}
}

type serverConn struct{}
