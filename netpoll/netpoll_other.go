//go:build !linux

package netpoll

import (
	"context"
	"errors"
	"fmt"
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
