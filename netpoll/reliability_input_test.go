package netpoll_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// Bad input beyond config_test.go: every Config field and NETPOLL key with
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
