package netpoll_test

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
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
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseConfig(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		// String round-trips (with the default poller count made explicit).
		again, err := netpoll.ParseConfig(got.String())
		if want := withPollers(got); err != nil || !reflect.DeepEqual(again, want) {
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
		if err != nil || !reflect.DeepEqual(again, withPollers(c)) {
			t.Fatalf("ParseConfig(%q): %+v does not round-trip through %q: %+v, %v", s, c, c.String(), again, err)
		}
	})
}

// TestNewRejectsOutOfRange, TestParseConfigMalformed and
// TestParseConfigValueAsGiven: every Config field and NETPOLL key with
// values out of range, at the edges of the range and malformed. Each error
// is a *ConfigError naming the field or key and the value, in its message
// too.
func TestNewRejectsOutOfRange(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   netpoll.Config
		key   string
		value string
	}{
		{"mode just past lt", netpoll.Config{Mode: netpoll.LevelTriggered + 1}, "mode", "Mode(3)"},
		{"mode max", netpoll.Config{Mode: math.MaxUint8}, "mode", "Mode(255)"},
		{"sharing just past reuseport", netpoll.Config{Sharing: netpoll.ReusePort + 1}, "sharing", "Sharing(4)"},
		{"wait just past inline", netpoll.Config{Wait: netpoll.WaitInline + 1}, "wait", "Wait(4)"},
		{"pollers min int", netpoll.Config{Pollers: math.MinInt}, "pollers", "-9223372036854775808"},
		{"pollers max int", netpoll.Config{Pollers: math.MaxInt}, "pollers", "9223372036854775807"},
		{"busypoll negative", netpoll.Config{BusyPoll: -time.Microsecond}, "busypoll", "-1µs"},
		{"busypoll past the kernel's 2^31-1us", netpoll.Config{BusyPoll: (1 << 31) * time.Microsecond}, "busypoll", "35m47.483648s"},
		{"busypoll max duration", netpoll.Config{BusyPoll: math.MaxInt64}, "busypoll", time.Duration(math.MaxInt64).String()},
		{"inline wait with a spin budget", netpoll.Config{Wait: netpoll.WaitInline, Spin: time.Millisecond}, "spin", "1ms"},
		{"inline wait spinning forever", netpoll.Config{Wait: netpoll.WaitInline, Spin: -1}, "spin", "forever"},
		{"exclusive with nested pollers", netpoll.Config{Sharing: netpoll.Exclusive, Pollers: 2, Wait: netpoll.WaitNested}, "sharing", "exclusive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := netpoll.New(tt.cfg)
			if g != nil {
				g.Close()
			}
			checkConfigError(t, err, tt.key, tt.value)
		})
	}
	// The edges of the ranges are accepted; Spin has no invalid value (< 0
	// means never block).
	for _, cfg := range []netpoll.Config{
		{Pollers: netpoll.MaxPollers},
		{Spin: math.MinInt64},
		{Spin: math.MaxInt64},
		{Mode: netpoll.LevelTriggered, Sharing: netpoll.ReusePort, Wait: netpoll.WaitInline},
	} {
		if _, err := netpoll.ParseConfig(cfg.String()); err != nil {
			t.Errorf("ParseConfig(%q) of a valid Config: %v", cfg.String(), err)
		}
	}
}

func TestParseConfigMalformed(t *testing.T) {
	for _, tt := range []struct{ in, key, value string }{
		{"MODE=et", "key", "MODE"},
		{"mode=ET", "mode", "ET"},
		{"mode=edge-triggered", "mode", "edge-triggered"},
		{" mode = et", "key", "mode "},
		{"=et", "key", ""},
		{"mode=et=lt", "mode", "et=lt"},
		{"mode=\x00", "mode", "\x00"},
		{"sharing=", "sharing", ""},
		{"sharing=Single", "sharing", "Single"},
		{"sharing=exclusive,wait=nested", "sharing", "exclusive"},
		{"wait=", "wait", ""},
		{"wait=blocking", "wait", "blocking"},
		{"pollers=", "pollers", ""},
		{"pollers=1025", "pollers", "1025"},
		{"pollers=2.0", "pollers", "2.0"},
		{"pollers=0x2", "pollers", "0x2"},
		{"pollers=99999999999999999999", "pollers", "99999999999999999999"},
		{"spin=", "spin", ""},
		{"spin=50", "spin", "50"},
		{"spin=Forever", "spin", "Forever"},
		{"spin=100000000h", "spin", "100000000h"},
		{"busypoll=", "busypoll", ""},
		{"busypoll=fast", "busypoll", "fast"},
		{"busypoll=forever", "busypoll", "forever"},
		{"busypoll=50", "busypoll", "50"},
		{"busypoll=100000000h", "busypoll", "100000000h"},
		{"mode=et,colour=blue", "key", "colour"},
		{"mode=et;pollers=2", "mode", "et;pollers=2"},
		{"pollers=2,pollers=2", "pollers", "2"},
	} {
		_, err := netpoll.ParseConfig(tt.in)
		t.Run(tt.in, func(t *testing.T) { checkConfigError(t, err, tt.key, tt.value) })
	}
}

// TestParseConfigValueAsGiven: ConfigError.Value is documented as "the
// offending value as given". A busypoll past the kernel's limit is caught
// after parsing, by validate, and reported as the parsed duration instead.
func TestParseConfigValueAsGiven(t *testing.T) {
	for _, tt := range []struct{ in, value string }{
		{"busypoll=1h", "1h"},
		{"busypoll=2147483648us", "2147483648us"},
	} {
		_, err := netpoll.ParseConfig(tt.in)
		checkConfigError(t, err, "busypoll", tt.value)
	}
}

func checkConfigError(t *testing.T, err error, key, value string) {
	t.Helper()
	var ce *netpoll.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want a *netpoll.ConfigError", err, err)
	}
	if ce.Key != key || ce.Value != value {
		t.Errorf("ConfigError{Key: %q, Value: %q}, want %q %q (%v)", ce.Key, ce.Value, key, value, err)
	}
	if msg := err.Error(); !strings.Contains(msg, key) || !strings.Contains(msg, strconv.Quote(value)) || ce.Reason == "" {
		t.Errorf("message %q does not name %s %q and why", msg, key, value)
	}
}
