package netpoll_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestBadEnv: a bad NETPOLL makes the package-level Listen and Dial fail
// with an error naming the variable, the key and the value.
func TestBadEnv(t *testing.T) {
	t.Setenv(netpoll.EnvVar, "mode=oneshot,pollers=lots")
	netpoll.ResetDefault()
	defer netpoll.ResetDefault()
	_, lerr := netpoll.Listen("tcp", "127.0.0.1:0")
	_, derr := netpoll.Dial("tcp", "127.0.0.1:1")
	for _, err := range []error{lerr, derr} {
		var ce *netpoll.ConfigError
		if err == nil || !errors.As(err, &ce) || ce.Key != "pollers" ||
			!strings.Contains(err.Error(), "NETPOLL") || !strings.Contains(err.Error(), `"lots"`) {
			t.Errorf("error = %v; want one naming NETPOLL, pollers and \"lots\"", err)
		}
	}
}

// TestGoodEnv: the default group takes its configuration from NETPOLL.
func TestGoodEnv(t *testing.T) {
	t.Setenv(netpoll.EnvVar, "mode=oneshot,wait=block")
	netpoll.ResetDefault()
	defer netpoll.ResetDefault()
	l, err := netpoll.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, err := netpoll.Default()
	if err != nil {
		t.Fatal(err)
	}
	if c := g.Config(); c.Mode != netpoll.OneShot || c.Wait != netpoll.WaitBlock {
		t.Errorf("default group config = %+v, want mode=oneshot wait=block", c)
	}
}
