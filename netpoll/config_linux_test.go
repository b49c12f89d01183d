package netpoll_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	if c, want := g.Config(), cfgOf(t, "mode=oneshot,wait=block"); !sameConfig(c, want) {
		t.Errorf("default group config = %q, want %q", c, want)
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

// TestGroupConfig: a group's Config is the one given to New, as given:
// fields, Experiment as spelled, hooks; the fields and Experiment combine
// when they set different keys. New reads no NETPOLL.
func TestGroupConfig(t *testing.T) {
	t.Setenv(netpoll.EnvVar, "pollers=lots")
	var controls int
	control := func(network, address string, c syscall.RawConn) error { controls++; return nil }
	for _, cfg := range []netpoll.Config{
		{},
		{Pollers: 2, Sharing: netpoll.ReusePort, DisableSpin: true, Experiment: "mode=oneshot"},
		{Pollers: 3, Experiment: " mode=level , sharing=wakeall,"},
		{Sharing: netpoll.Exclusive, Experiment: "spin=1ms"},
		{KeepAlive: -1, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: time.Minute}, Experiment: "wait=inline"},
	} {
		g, err := netpoll.New(cfg)
		if err != nil {
			t.Errorf("New(%#v): %v", cfg, err)
			continue
		}
		if got := g.Config(); !sameConfig(got, cfg) {
			t.Errorf("New(%#v).Config() = %#v, want it as given", cfg, got)
		}
		g.Close()
	}
	// A Control hook is kept: the group's Config calls the same func.
	g, err := netpoll.New(netpoll.Config{Control: control})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if c := g.Config(); c.Control == nil || c.Control("tcp", "", nil) != nil || controls != 1 {
		t.Errorf("Config().Control nil %v, called %d times; want the hook given, called once", c.Control == nil, controls)
	}
}
