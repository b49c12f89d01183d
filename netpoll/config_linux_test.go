package netpoll_test

import (
	"errors"
	"strconv"
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

// TestBadEnvKeys sets NETPOLL to a bad value for each key (TestBadEnv
// covers pollers): the package-level Listen and Dial fail with an error that
// names the variable, the key and the value.
func TestBadEnvKeys(t *testing.T) {
	defer netpoll.ResetDefault()
	for _, tt := range []struct{ env, key, value string }{
		{"mode=fast", "mode", "fast"},
		{"sharing=everyone", "sharing", "everyone"},
		{"spin=often", "spin", "often"},
		{"wait=sleep", "wait", "sleep"},
		{"busypoll=-1us", "busypoll", "-1us"},
		{"sharing=exclusive,wait=nested", "sharing", "exclusive"},
		{"colour=blue", "key", "colour"},
		{"mode", "setting", "mode"},
		{"mode=et,mode=lt", "mode", "lt"},
	} {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(netpoll.EnvVar, tt.env)
			netpoll.ResetDefault()
			_, lerr := netpoll.Listen("tcp", "127.0.0.1:0")
			_, derr := netpoll.Dial("tcp", "127.0.0.1:1")
			_, gerr := netpoll.Default()
			for op, err := range map[string]error{"Listen": lerr, "Dial": derr, "Default": gerr} {
				var ce *netpoll.ConfigError
				if !errors.As(err, &ce) || ce.Key != tt.key || ce.Value != tt.value {
					t.Errorf("%s: %v; want a *ConfigError for %s %q", op, err, tt.key, tt.value)
					continue
				}
				if msg := err.Error(); !strings.Contains(msg, netpoll.EnvVar) || !strings.Contains(msg, strconv.Quote(tt.value)) {
					t.Errorf("%s: %q does not name %s and %q", op, msg, netpoll.EnvVar, tt.value)
				}
			}
		})
	}
}
