package dropin_test

import (
	"context"
	"fmt"
	"net"
	"testing"

	"golang.org/x/net/nettest"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestNetConn runs x/net/nettest's net.Conn conformance suite on our Conn,
// for every mode and network.
func TestNetConn(t *testing.T) {
	for _, mode := range modes {
		for _, network := range []string{"tcp", "unix"} {
			t.Run(fmt.Sprintf("mode=%s/net=%s", mode, network), func(t *testing.T) {
				g := newGroup(t, cfgOf(t, "mode="+mode))
				nettest.TestConn(t, makePipe(t, g, network))
			})
		}
	}
}

// TestSharingNetConn runs the suite on every Sharing mode.
func TestSharingNetConn(t *testing.T) {
	for _, sh := range []string{"single", "exclusive", "wakeall", "reuseport"} {
		t.Run(fmt.Sprintf("sharing=%s", sh), func(t *testing.T) {
			g := newGroup(t, cfgOf(t, "pollers=3,sharing="+sh))
			nettest.TestConn(t, makePipe(t, g, "tcp"))
		})
	}
}

func makePipe(t *testing.T, g *netpoll.Group, network string) nettest.MakePipe {
	return func() (c1, c2 net.Conn, stop func(), err error) {
		l, err := g.Listen(context.Background(), network, localAddr(t, network))
		if err != nil {
			return nil, nil, nil, err
		}
		defer l.Close()
		accepted := make(chan net.Conn, 1)
		acceptErr := make(chan error, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}()
		c1, err = g.Dial(context.Background(), network, l.Addr().String())
		if err != nil {
			return nil, nil, nil, err
		}
		select {
		case c2 = <-accepted:
		case err = <-acceptErr:
			c1.Close()
			return nil, nil, nil, err
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	}
}
