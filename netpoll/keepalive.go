package netpoll

import (
	"net"
	"strconv"
	"time"
)

// TCP keep-alive as package net sets it: on for every accepted and dialed
// TCP connection unless turned off, with net's defaults (net/dial.go).
const (
	defaultKeepAliveIdle     = 15 * time.Second
	defaultKeepAliveInterval = 15 * time.Second
	defaultKeepAliveCount    = 9
)

// The largest values Linux accepts (MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL,
// MAX_TCP_KEEPCNT in include/net/tcp.h); setsockopt fails with EINVAL
// above them.
const (
	maxKeepAliveSecs  = 32767
	maxKeepAliveCount = 127
)

// keepAlive resolves Config.KeepAlive and Config.KeepAliveConfig as
// package net's newTCPConn resolves a ListenConfig's or Dialer's: with
// KeepAliveConfig.Enable false, a KeepAlive of zero or more means on with
// KeepAlive as the idle time (zero: the default) and the other fields at
// their defaults; a negative KeepAlive leaves keep-alive to the OS. It
// reports false when nothing is to be set on the socket.
func (c Config) keepAlive() (net.KeepAliveConfig, bool) {
	ka := c.KeepAliveConfig
	if !ka.Enable && c.KeepAlive >= 0 {
		ka = net.KeepAliveConfig{Enable: true, Idle: c.KeepAlive}
	}
	return ka, ka.Enable
}

// keepAliveSecs is what package net passes the kernel for a keep-alive
// duration: 0 means def, a negative d leaves the option as it is (false),
// anything else is rounded up to whole seconds.
func keepAliveSecs(d, def time.Duration) (int, bool) {
	switch {
	case d == 0:
		d = def
	case d < 0:
		return 0, false
	}
	return int((d + time.Second - 1) / time.Second), true
}

// keepAliveCount is keepAliveSecs for the probe count.
func keepAliveCount(n int) (int, bool) {
	switch {
	case n == 0:
		return defaultKeepAliveCount, true
	case n < 0:
		return 0, false
	}
	return n, true
}

// validateKeepAlive checks the resolved keep-alive values against what
// Linux accepts, so that a value the kernel would refuse is an error from
// New, naming the field, rather than from every Listen, Dial or accept
// (package net drops that error and leaves the connection as it was).
func (c Config) validateKeepAlive() error {
	ka, on := c.keepAlive()
	if !on {
		return nil
	}
	idleKey := "KeepAliveConfig.Idle"
	if !c.KeepAliveConfig.Enable {
		idleKey = "KeepAlive"
	}
	for _, f := range []struct {
		key string
		d   time.Duration
	}{{idleKey, ka.Idle}, {"KeepAliveConfig.Interval", ka.Interval}} {
		if s, set := keepAliveSecs(f.d, time.Second); set && s > maxKeepAliveSecs {
			return &ConfigError{f.key, f.d.String(), "want at most 32767s, the most Linux accepts (0: net's default 15s, negative: the OS's)"}
		}
	}
	if n, set := keepAliveCount(ka.Count); set && n > maxKeepAliveCount {
		return &ConfigError{"KeepAliveConfig.Count", strconv.Itoa(ka.Count), "want at most 127, the most Linux accepts (0: net's default 9, negative: the OS's)"}
	}
	return nil
}
