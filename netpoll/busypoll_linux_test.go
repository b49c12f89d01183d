package netpoll_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestBusyPoll: the kernel's per-epoll busy polling is set on every poller
// (it needs NAPI to do anything; loopback has none, so only the setting is
// checked).
func TestBusyPoll(t *testing.T) {
	g, err := netpoll.New(cfgOf(t, "pollers=2,busypoll=50us"))
	var ce *netpoll.ConfigError
	if errors.As(err, &ce) && strings.Contains(ce.Reason, "lacks") {
		t.Skipf("kernel without EPIOCSPARAMS: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := range 2 {
		usecs, budget, err := netpoll.BusyPollParams(g, i)
		if err != nil || usecs != 50 || budget == 0 {
			t.Errorf("poller %d: busy poll %dus budget %d, %v; want 50us", i, usecs, budget, err)
		}
	}
}
