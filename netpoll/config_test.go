package netpoll_test

import (
	"errors"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

func TestParseConfig(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want netpoll.Config
	}{
		{"", netpoll.Config{}},
		{"mode=oneshot,pollers=2", netpoll.Config{Mode: netpoll.OneShot, Pollers: 2}},
		{"mode=lt, spin=50us ,wait=block", netpoll.Config{Mode: netpoll.LevelTriggered, Spin: 50 * time.Microsecond, Wait: netpoll.WaitBlock}},
		{"mode=edge,sharing=exclusive,spin=forever,wait=block", netpoll.Config{Sharing: netpoll.Exclusive, Spin: -1, Wait: netpoll.WaitBlock}},
		{"pollers=8,sharing=exclusive", netpoll.Config{Pollers: 8, Sharing: netpoll.Exclusive}},
		{"busypoll=50us", netpoll.Config{BusyPoll: 50 * time.Microsecond}},
		{"spin=auto", netpoll.Config{SpinPolicy: netpoll.SpinAuto}},
		{"spin=0", netpoll.Config{SpinPolicy: netpoll.SpinFixed}},
		{"spin=default", netpoll.Config{}},
		{"spin=-5ms", netpoll.Config{Spin: -5 * time.Millisecond}},
		{"mode=level,sharing=reuseport,wait=inline", netpoll.Config{Mode: netpoll.LevelTriggered, Sharing: netpoll.ReusePort, Wait: netpoll.WaitInline}},
		{"mode=oneshot,wait=inline", netpoll.Config{Mode: netpoll.OneShot, Wait: netpoll.WaitInline}},
	} {
		got, err := netpoll.ParseConfig(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseConfig(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		// String round-trips (with the default poller count made explicit).
		again, err := netpoll.ParseConfig(got.String())
		if want := withPollers(got); err != nil || again != want {
			t.Errorf("ParseConfig(%q.String() = %q) = %+v, %v; want %+v", tt.in, got.String(), again, err, want)
		}
	}
}

func withPollers(c netpoll.Config) netpoll.Config {
	if c.Pollers == 0 {
		c.Pollers = netpoll.DefaultPollers
	}
	return c
}

func TestParseConfigErrors(t *testing.T) {
	for _, tt := range []struct{ in, key, value string }{
		{"mode=fast", "mode", "fast"},
		{"mode=", "mode", ""},
		{"pollers=0", "pollers", "0"},
		{"pollers=-3", "pollers", "-3"},
		{"pollers=two", "pollers", "two"},
		{"pollers=100000", "pollers", "100000"},
		{"sharing=some", "sharing", "some"},
		{"spin=fast", "spin", "fast"},
		{"wait=sleep", "wait", "sleep"},
		{"wait=yield", "wait", "yield"}, // removed: no configuration measured used it
		{"colour=blue", "key", "colour"},
		{"mode", "setting", "mode"},
		{"mode=et,mode=lt", "mode", "lt"},
		{"sharing=exclusive,wait=nested", "sharing", "exclusive"},
		{"busypoll=-1us", "busypoll", "-1us"},
		{"spin=Auto", "spin", "Auto"},
	} {
		_, err := netpoll.ParseConfig(tt.in)
		var ce *netpoll.ConfigError
		if !errors.As(err, &ce) || ce.Key != tt.key || ce.Value != tt.value {
			t.Errorf("ParseConfig(%q) error = %v; want a *ConfigError for %s %q", tt.in, err, tt.key, tt.value)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg netpoll.Config
		key string
	}{
		{netpoll.Config{Mode: 7}, "mode"},
		{netpoll.Config{Pollers: -1}, "pollers"},
		{netpoll.Config{Pollers: netpoll.MaxPollers + 1}, "pollers"},
		{netpoll.Config{Sharing: 9}, "sharing"},
		{netpoll.Config{Wait: 9}, "wait"},
		{netpoll.Config{SpinPolicy: 9}, "spinpolicy"},
		{netpoll.Config{SpinPolicy: netpoll.SpinAuto, Spin: time.Millisecond}, "spin"},
	} {
		g, err := netpoll.New(tt.cfg)
		var ce *netpoll.ConfigError
		if !errors.As(err, &ce) || ce.Key != tt.key {
			t.Errorf("New(%+v) error = %v; want a *ConfigError for %s", tt.cfg, err, tt.key)
		}
		if g != nil {
			g.Close()
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "mode=et", "mode=oneshot,pollers=2", "spin=forever,wait=block", "spin=auto", "spin=0", "spin=default", "sharing=exclusive,spin=1ms,wait=block", "pollers=x", "a=b=c", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := netpoll.ParseConfig(s)
		if err != nil {
			var ce *netpoll.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseConfig(%q) error %v is not a *ConfigError", s, err)
			}
			return
		}
		again, err := netpoll.ParseConfig(c.String())
		if err != nil || again != withPollers(c) {
			t.Fatalf("ParseConfig(%q): %+v does not round-trip through %q: %+v, %v", s, c, c.String(), again, err)
		}
	})
}
