package dropin_test

import (
	"context"
	"math/rand/v2"
	"net"
	"path/filepath"
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
)

// modes are the registration modes, as the NETPOLL syntax names them.
var modes = []string{"et", "oneshot", "lt"}

// cfgOf is the Config s gives in the NETPOLL syntax.
func cfgOf(t testing.TB, s string) netpoll.Config {
	t.Helper()
	cfg, err := netpoll.ParseConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newGroup starts a group and closes it when the test ends.
func newGroup(t testing.TB, cfg netpoll.Config) *netpoll.Group {
	t.Helper()
	g, err := netpoll.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// listen listens on a fresh local address of network ("tcp" or "unix").
func listen(t testing.TB, g *netpoll.Group, network string) net.Listener {
	t.Helper()
	l, err := g.Listen(context.Background(), network, localAddr(t, network))
	if err != nil {
		t.Fatalf("Listen(%s): %v", network, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// randomBytes returns n pseudo-random bytes, the same for the same seed.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)}).Read(b)
	return b
}

func localAddr(t testing.TB, network string) string {
	if network == "unix" {
		return filepath.Join(t.TempDir(), "sock")
	}
	return "127.0.0.1:0"
}
