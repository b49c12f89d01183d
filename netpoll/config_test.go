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

// TestParseConfig: the keys with a Config field set it (spin=off and spin=0
// set DisableSpin); the rest, the lab's experiment settings, are kept in
// Experiment, in the canonical order of ParseConfig's doc and spelling
// (aliases resolved, durations as time.Duration prints them); "default" is
// every key's zero value. String renders the Config back, defaults left
// out, and ParseConfig of that String is the Config again, exactly.
func TestParseConfig(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want netpoll.Config
		str  string // want.String()
	}{
		{"", netpoll.Config{}, ""},
		{"mode=oneshot,pollers=2", netpoll.Config{Pollers: 2, Experiment: "mode=oneshot"}, "pollers=2,mode=oneshot"},
		{"mode=lt, spin=50us ,wait=block", netpoll.Config{Experiment: "mode=lt,wait=block,spin=50µs"}, "mode=lt,wait=block,spin=50µs"},
		{"mode=edge,sharing=exclusive,spin=forever,wait=block", netpoll.Config{Sharing: netpoll.Exclusive, Experiment: "mode=et,wait=block,spin=forever"}, "sharing=exclusive,mode=et,wait=block,spin=forever"},
		{"pollers=8,sharing=exclusive", netpoll.Config{Pollers: 8, Sharing: netpoll.Exclusive}, "pollers=8,sharing=exclusive"},
		{"busypoll=50us", netpoll.Config{Experiment: "busypoll=50µs"}, "busypoll=50µs"},
		{"spin=auto", netpoll.Config{Experiment: "spin=auto"}, "spin=auto"},
		{"spin=0", netpoll.Config{DisableSpin: true}, "spin=off"},
		{"spin=off", netpoll.Config{DisableSpin: true}, "spin=off"},
		{"spin=off,wait=block", netpoll.Config{DisableSpin: true, Experiment: "wait=block"}, "spin=off,wait=block"},
		{"spin=default", netpoll.Config{}, ""},
		{"spin=1ms,wait=block", netpoll.Config{Experiment: "wait=block,spin=1ms"}, "wait=block,spin=1ms"},
		{"mode=level,sharing=reuseport,wait=inline", netpoll.Config{Sharing: netpoll.ReusePort, Experiment: "mode=lt,wait=inline"}, "sharing=reuseport,mode=lt,wait=inline"},
		{"mode=oneshot,wait=inline", netpoll.Config{Experiment: "mode=oneshot,wait=inline"}, "mode=oneshot,wait=inline"},
		// wakeall has no Sharing value: it stays in Experiment.
		{"sharing=wakeall", netpoll.Config{Experiment: "sharing=wakeall"}, "sharing=wakeall"},
		{"sharing=wakeall,pollers=4,mode=lt", netpoll.Config{Pollers: 4, Experiment: "sharing=wakeall,mode=lt"}, "pollers=4,sharing=wakeall,mode=lt"},
		{"sharing=single", netpoll.Config{}, ""},
		{"shortread=on", netpoll.Config{}, ""},
		{"shortread=off", netpoll.Config{Experiment: "shortread=off"}, "shortread=off"},
		{"dispatch=inline", netpoll.Config{Experiment: "dispatch=inline"}, "dispatch=inline"},
		{"dispatch=hot", netpoll.Config{Experiment: "dispatch=hot"}, "dispatch=hot"},
		{"dispatch=default", netpoll.Config{}, ""},
		{"dispatch=go,shortread=off", netpoll.Config{Experiment: "shortread=off,dispatch=go"}, "shortread=off,dispatch=go"},
		{"mode=et", netpoll.Config{Experiment: "mode=et"}, "mode=et"},
		{"wait=nested", netpoll.Config{Experiment: "wait=nested"}, "wait=nested"},
		{"pollers=1024", netpoll.Config{Pollers: netpoll.MaxPollers}, "pollers=1024"},
		// The experiment keys in the canonical order, whatever order given.
		{"shortread=off,busypoll=1ms,spin=2ms,wait=nested,mode=lt,sharing=wakeall", netpoll.Config{Experiment: "sharing=wakeall,mode=lt,wait=nested,spin=2ms,busypoll=1ms,shortread=off"}, "sharing=wakeall,mode=lt,wait=nested,spin=2ms,busypoll=1ms,shortread=off"},
		{"busypoll=1000us,spin=forever", netpoll.Config{Experiment: "spin=forever,busypoll=1ms"}, "spin=forever,busypoll=1ms"},
		// Every key takes "default", as if it were not given.
		{"pollers=default,sharing=default,mode=default,wait=default,spin=default,busypoll=default,shortread=default", netpoll.Config{}, ""},
		{"pollers=default,mode=oneshot", netpoll.Config{Experiment: "mode=oneshot"}, "mode=oneshot"},
		{"sharing=default,pollers=3", netpoll.Config{Pollers: 3}, "pollers=3"},
	} {
		got, err := netpoll.ParseConfig(tt.in)
		if err != nil || !sameConfig(got, tt.want) {
			t.Errorf("ParseConfig(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.String(); s != tt.str {
			t.Errorf("ParseConfig(%q).String() = %q, want %q", tt.in, s, tt.str)
		}
		// String round-trips exactly.
		again, err := netpoll.ParseConfig(got.String())
		if err != nil || !sameConfig(again, got) {
			t.Errorf("ParseConfig(%q.String() = %q) = %#v, %v; want %#v", tt.in, got.String(), again, err, got)
		}
	}
}

// sameConfig reports whether a and b are the same Config. Config has a
// func field, so it is not comparable with ==; funcs are equal here only
// when both are nil, which is all ParseConfig makes.
func sameConfig(a, b netpoll.Config) bool { return reflect.DeepEqual(a, b) }

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
		{"sharing=exclusive,wait=inline", "sharing", "exclusive"},
		{"busypoll=-1us", "busypoll", "-1us"},
		{"spin=Auto", "spin", "Auto"},
		// A negative budget was "never block": that is spin=forever now.
		{"spin=-5ms", "spin", "-5ms"},
		{"spin=-1ns", "spin", "-1ns"},
		// wait=block never spins adaptively: asking for it is a mistake,
		// with wait=block given or the default of sharing=exclusive.
		{"spin=auto,wait=block", "spin", "auto"},
		{"sharing=exclusive,spin=auto", "spin", "auto"},
		{"wait=inline,spin=1ms", "spin", "1ms"},
		{"wait=inline,spin=forever", "spin", "forever"},
		{"spin=0,spin=off", "spin", "off"},
		{"spin=off,spin=default", "spin", "default"},
	} {
		_, err := netpoll.ParseConfig(tt.in)
		var ce *netpoll.ConfigError
		if !errors.As(err, &ce) || ce.Key != tt.key || ce.Value != tt.value {
			t.Errorf("ParseConfig(%q) error = %v; want a *ConfigError for %s %q", tt.in, err, tt.key, tt.value)
		}
	}
}

// TestNewRejectsBadConfig: New checks a Config's fields, its Experiment,
// and the two against each other: a key set both by a field and by
// Experiment is a *ConfigError naming the key, even when they agree.
func TestNewRejectsBadConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg netpoll.Config
		key string
	}{
		{netpoll.Config{Experiment: "mode=7"}, "mode"},
		{netpoll.Config{Pollers: -1}, "pollers"},
		{netpoll.Config{Pollers: netpoll.MaxPollers + 1}, "pollers"},
		{netpoll.Config{Sharing: 9}, "sharing"},
		{netpoll.Config{Sharing: netpoll.ReusePort + 1}, "sharing"},
		{netpoll.Config{Experiment: "wait=9"}, "wait"},
		{netpoll.Config{Experiment: "spin=9"}, "spin"},
		{netpoll.Config{Experiment: "spin=auto,spin=1ms"}, "spin"},
		{netpoll.Config{Experiment: "colour=blue"}, "key"},
		{netpoll.Config{Experiment: "pollers"}, "setting"},
		{netpoll.Config{Experiment: "spin=auto,wait=block"}, "spin"},
		{netpoll.Config{Sharing: netpoll.Exclusive, Experiment: "wait=nested"}, "sharing"},
		{netpoll.Config{Sharing: netpoll.Exclusive, Experiment: "spin=auto"}, "spin"},
		// A key set both by a field and by Experiment.
		{netpoll.Config{Pollers: 2, Experiment: "pollers=3"}, "pollers"},
		{netpoll.Config{Pollers: 2, Experiment: "pollers=2"}, "pollers"},
		{netpoll.Config{Sharing: netpoll.Exclusive, Experiment: "sharing=wakeall"}, "sharing"},
		{netpoll.Config{Sharing: netpoll.ReusePort, Experiment: "sharing=single"}, "sharing"},
		{netpoll.Config{Sharing: netpoll.ReusePort, Experiment: "sharing=reuseport"}, "sharing"},
		{netpoll.Config{DisableSpin: true, Experiment: "spin=1ms"}, "spin"},
		{netpoll.Config{DisableSpin: true, Experiment: "spin=off"}, "spin"},
		{netpoll.Config{DisableSpin: true, Experiment: "spin=auto"}, "spin"},
	} {
		g, err := netpoll.New(tt.cfg)
		var ce *netpoll.ConfigError
		if !errors.As(err, &ce) || ce.Key != tt.key {
			t.Errorf("New(%#v) error = %v; want a *ConfigError for %s", tt.cfg, err, tt.key)
		}
		if g != nil {
			g.Close()
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "mode=et", "mode=oneshot,pollers=2", "spin=forever,wait=block", "spin=auto", "spin=0", "spin=off", "spin=default", "sharing=exclusive,spin=1ms,wait=block", "sharing=wakeall,mode=lt", "shortread=off,busypoll=1ms", "pollers=default", "pollers=x", "a=b=c", ",,,"} {
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
		if err != nil || !sameConfig(again, c) {
			t.Fatalf("ParseConfig(%q): %#v does not round-trip through %q: %#v, %v", s, c, c.String(), again, err)
		}
		// Experiment keeps only the keys without a field, canonical: alone
		// it parses to itself.
		e, err := netpoll.ParseConfig(c.Experiment)
		if err != nil || !sameConfig(e, netpoll.Config{Experiment: c.Experiment}) {
			t.Fatalf("ParseConfig(%q).Experiment %q parses to %#v, %v; want only the same Experiment", s, c.Experiment, e, err)
		}
	})
}

// TestNewRejectsOutOfRange, TestParseConfigMalformed and
// TestParseConfigValueAsGiven: every Config field and NETPOLL key with
// values out of range, at the edges of the range and malformed. Each error
// is a *ConfigError naming the field or key and the value, in its message
// too.
func TestNewRejectsOutOfRange(t *testing.T) {
	maxDur, minDur := time.Duration(math.MaxInt64).String(), time.Duration(math.MinInt64).String()
	for _, tt := range []struct {
		name  string
		cfg   netpoll.Config
		key   string
		value string
	}{
		{"mode just past lt", netpoll.Config{Experiment: "mode=3"}, "mode", "3"},
		{"mode max", netpoll.Config{Experiment: "mode=255"}, "mode", "255"},
		// Sharing's value past ReusePort is wakeall's, which only
		// Experiment can ask for (sharing=wakeall).
		{"sharing just past reuseport", netpoll.Config{Sharing: netpoll.ReusePort + 1}, "sharing", "wakeall"},
		{"sharing two past reuseport", netpoll.Config{Sharing: netpoll.ReusePort + 2}, "sharing", "Sharing(4)"},
		{"sharing max", netpoll.Config{Sharing: math.MaxUint8}, "sharing", "Sharing(255)"},
		{"wait just past inline", netpoll.Config{Experiment: "wait=4"}, "wait", "4"},
		{"pollers min int", netpoll.Config{Pollers: math.MinInt}, "pollers", "-9223372036854775808"},
		{"pollers max int", netpoll.Config{Pollers: math.MaxInt}, "pollers", "9223372036854775807"},
		{"busypoll negative", netpoll.Config{Experiment: "busypoll=-1µs"}, "busypoll", "-1µs"},
		{"busypoll past the kernel's 2^31-1us", netpoll.Config{Experiment: "busypoll=" + ((1 << 31) * time.Microsecond).String()}, "busypoll", "35m47.483648s"},
		{"busypoll max duration", netpoll.Config{Experiment: "busypoll=" + maxDur}, "busypoll", maxDur},
		{"inline wait with a spin budget", netpoll.Config{Experiment: "wait=inline,spin=1ms"}, "spin", "1ms"},
		{"inline wait spinning forever", netpoll.Config{Experiment: "wait=inline,spin=forever"}, "spin", "forever"},
		{"exclusive with nested pollers", netpoll.Config{Sharing: netpoll.Exclusive, Pollers: 2, Experiment: "wait=nested"}, "sharing", "exclusive"},
		// A negative spin budget meant never block; that is spin=forever.
		{"spin negative", netpoll.Config{Experiment: "spin=-1ns"}, "spin", "-1ns"},
		{"spin min duration", netpoll.Config{Experiment: "spin=" + minDur}, "spin", minDur},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := netpoll.New(tt.cfg)
			if g != nil {
				g.Close()
			}
			checkConfigError(t, err, tt.key, tt.value)
		})
	}
	// The edges of the ranges are accepted, and round-trip.
	for _, cfg := range []netpoll.Config{
		{Pollers: netpoll.MaxPollers},
		{Experiment: "spin=1ns"},
		{Experiment: "spin=" + maxDur},
		{Experiment: "spin=forever"},
		{Experiment: "busypoll=" + (((1 << 31) - 1) * time.Microsecond).String()},
		{Sharing: netpoll.ReusePort, Experiment: "mode=lt,wait=inline"},
	} {
		got, err := netpoll.ParseConfig(cfg.String())
		if err != nil || !sameConfig(got, cfg) {
			t.Errorf("ParseConfig(%q) of a valid Config = %#v, %v; want %#v", cfg.String(), got, err, cfg)
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
		{"mode=Default", "mode", "Default"},
		{"spin=-5ms", "spin", "-5ms"},
		{"spin=OFF", "spin", "OFF"},
		{"shortread=", "shortread", ""},
		{"shortread=no", "shortread", "no"},
		{"dispatch=goroutine", "dispatch", "goroutine"},
		{"dispatch=hot,mode=lt", "dispatch", "hot"},
		{"mode=oneshot,dispatch=hot", "dispatch", "hot"},
		{"sharing=wake-all", "sharing", "wake-all"},
	} {
		_, err := netpoll.ParseConfig(tt.in)
		t.Run(tt.in, func(t *testing.T) { checkConfigError(t, err, tt.key, tt.value) })
	}
}

// TestParseConfigValueAsGiven: ConfigError.Value is documented as "the
// offending value as given". A busypoll past the kernel's limit parses as
// a duration and is refused for its range: it is reported as given, not
// as the parsed duration prints.
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
