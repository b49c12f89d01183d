package netpoll

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mode is how a descriptor is registered with its poller's epoll instance.
type Mode uint8

const (
	// EdgeTriggered registers EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET once when
	// the descriptor opens and never calls epoll_ctl again until it closes.
	EdgeTriggered Mode = iota
	// OneShot registers with EPOLLONESHOT and re-arms with EPOLL_CTL_MOD
	// before every park: one extra syscall per blocking operation. It is
	// the baseline the other modes are measured against.
	OneShot
	// LevelTriggered registers EPOLLIN|EPOLLRDHUP once, without EPOLLET.
	// See doc.go for how repeated level events and writes are handled.
	LevelTriggered
)

var modeNames = [...]string{EdgeTriggered: "et", OneShot: "oneshot", LevelTriggered: "lt"}

// String returns the short name used in NETPOLL and in benchmark labels.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Sharing is how the pollers of a group share a listening socket.
type Sharing uint8

const (
	// Single has one poller accept for the listener, as package net does.
	Single Sharing = iota
	// Exclusive adds the listening fd to every poller with EPOLLEXCLUSIVE.
	Exclusive
	// WakeAll adds the listening fd to every poller without EPOLLEXCLUSIVE:
	// the thundering-herd baseline.
	WakeAll
	// ReusePort opens one SO_REUSEPORT socket per poller.
	ReusePort
)

var sharingNames = [...]string{Single: "single", Exclusive: "exclusive", WakeAll: "wakeall", ReusePort: "reuseport"}

// String returns the short name used in NETPOLL and in benchmark labels.
func (s Sharing) String() string {
	if int(s) < len(sharingNames) {
		return sharingNames[s]
	}
	return "Sharing(" + strconv.Itoa(int(s)) + ")"
}

// Wait is how a poller waits for events when it has none.
type Wait uint8

const (
	// WaitDefault, the zero value, is WaitNested, or WaitBlock with
	// Sharing Exclusive: EPOLLEXCLUSIVE needs pollers asleep in their own
	// epoll_wait (doc.go, "Pollers and sharing").
	WaitDefault Wait = iota
	// WaitNested parks the poller's epoll fd in the Go runtime's own
	// netpoller: no OS thread is dedicated to the poller, and the goroutines
	// it wakes run on the thread that woke it. The default; see loop_linux.go
	// and the recorded runs in testdata/core/ for why.
	WaitNested
	// WaitBlock dedicates a locked OS thread that blocks in epoll_wait(-1).
	WaitBlock
	// WaitInline is WaitNested where the operation about to park, when no
	// other watches the epoll fd, waits on it itself: the runtime's
	// netpoller wakes it directly, one goroutine hop where WaitNested takes
	// two. See inline_linux.go.
	WaitInline
)

var waitNames = [...]string{WaitDefault: "default", WaitNested: "nested", WaitBlock: "block", WaitInline: "inline"}

// String returns the short name used in NETPOLL and in benchmark labels.
func (w Wait) String() string {
	if int(w) < len(waitNames) {
		return waitNames[w]
	}
	return "Wait(" + strconv.Itoa(int(w)) + ")"
}

// SpinPolicy says who sets a poller's spin budget (Config.SpinPolicy).
type SpinPolicy uint8

const (
	// SpinDefault, the zero value, follows Config.Spin: a non-zero Spin is
	// a fixed budget, and Spin 0 is SpinAuto, the default since it was
	// measured to be no worse than not spinning in CPU and latency and as
	// fast as spinning forever back to back (doc.go, "Spinning").
	SpinDefault SpinPolicy = iota
	// SpinAuto lets each poller decide at every idle moment whether to spin
	// and for how long, from the gaps between its events, whether its
	// recent spins found an event, and what a block and wakeup cost on the
	// running machine. Config.Spin must be 0. See doc.go, "Spinning".
	SpinAuto
	// SpinFixed makes Config.Spin the budget even when it is 0: never
	// spin, the behaviour before SpinAuto was the default. It is what
	// NETPOLL's spin=0 parses to.
	SpinFixed
)

var spinPolicyNames = [...]string{SpinDefault: "default", SpinAuto: "auto", SpinFixed: "fixed"}

// String returns the short name of the policy.
func (s SpinPolicy) String() string {
	if int(s) < len(spinPolicyNames) {
		return spinPolicyNames[s]
	}
	return "SpinPolicy(" + strconv.Itoa(int(s)) + ")"
}

// ShortRead says whether a connection skips, after a Read or Write that
// moved fewer bytes than asked, the syscall that would return EAGAIN
// (Config.ShortRead). See doc.go, "Short reads".
type ShortRead uint8

const (
	// ShortReadDefault, the zero value, is ShortReadOn: measured to save
	// a syscall per request and no CPU (doc.go, "Short reads").
	ShortReadDefault ShortRead = iota
	// ShortReadOn skips: after a short transfer the next one in the same
	// direction parks first, unless an edge came since, except on a
	// connection whose events announced urgent data, end of input, a
	// hang-up or an error, or whose fd user code has had (RawConn).
	ShortReadOn
	// ShortReadOff makes every Read and Write try its syscall first, as
	// package net does.
	ShortReadOff
)

var shortReadNames = [...]string{ShortReadDefault: "default", ShortReadOn: "on", ShortReadOff: "off"}

// String returns the short name used in NETPOLL.
func (s ShortRead) String() string {
	if int(s) < len(shortReadNames) {
		return shortReadNames[s]
	}
	return "ShortRead(" + strconv.Itoa(int(s)) + ")"
}

// shortReadDefault is what ShortReadDefault means.
const shortReadDefault = true

// maxBusyPollUsecs is the largest busy_poll_usecs the kernel accepts (S32_MAX).
const maxBusyPollUsecs = 1<<31 - 1

// MaxPollers bounds Config.Pollers; more epoll instances than this is a
// configuration mistake, not a tuning choice.
const MaxPollers = 1024

// Config selects how a Group polls. The zero value is the default:
// edge-triggered, DefaultPollers pollers, a single acceptor per listener,
// adaptive spinning (SpinAuto), the poller nested in the runtime's
// netpoller.
type Config struct {
	Mode    Mode    // registration mode; EdgeTriggered is the zero value
	Pollers int     // number of epoll pollers; 0 means DefaultPollers
	Sharing Sharing // how pollers share a listener

	// Spin is how long a poller keeps polling with epoll_wait(0), yielding
	// the P between polls, after events stop, before it blocks. 0 never
	// spins. < 0 never blocks: the poller keeps a P (a whole CPU) busy for
	// as long as the group is open. A wakeup through the kernel costs tens
	// of microseconds on a virtual machine; a spinning poller sees an event
	// in one epoll_wait(0), at the price of the CPU it burns while idle.
	Spin time.Duration

	// SpinPolicy says whether Spin is a fixed budget or the poller decides
	// (SpinAuto). The zero value follows Spin: SpinAuto when Spin is 0.
	SpinPolicy SpinPolicy

	Wait Wait // how a poller blocks when it has no events

	// BusyPoll, if non-zero, asks the kernel (Linux 6.9+, EPIOCSPARAMS) to
	// busy-poll the network device's NAPI queue for up to this long inside
	// epoll_wait before sleeping. It needs a NAPI device (a real NIC with
	// busy polling enabled) and does nothing on loopback. New fails on a
	// kernel without EPIOCSPARAMS. Rounded to whole microseconds.
	BusyPoll time.Duration

	// ShortRead says whether connections skip the syscall that would
	// return EAGAIN after a short Read or Write. The zero value is on.
	ShortRead ShortRead

	// KeepAlive is package net's ListenConfig.KeepAlive and
	// Dialer.KeepAlive, for every accepted and dialed TCP connection of
	// the group: zero turns keep-alive probes on with net's defaults
	// (idle 15s, interval 15s, 9 probes), a positive value is the idle
	// time (the others at their defaults), a negative one leaves the
	// socket as the OS made it (off) unless KeepAliveConfig.Enable is
	// set. Ignored if KeepAliveConfig.Enable is set. Unix sockets have no
	// keep-alive.
	KeepAlive time.Duration

	// KeepAliveConfig is package net's: with Enable set, its fields are
	// the keep-alive settings (a zero field takes net's default, a
	// negative one leaves the OS's value). Idle and Interval are rounded
	// up to whole seconds; Linux accepts at most 32767s and 127 probes.
	//
	// A listener's sockets carry the setting and the connections it
	// accepts inherit it (DESIGN.md, "Keep-alive"), so options set later
	// on the listener itself (its SyscallConn or File) reach the
	// connections accepted afterwards; package net sets it on each
	// accepted connection instead. A listener from FileListener, whose
	// socket is not the group's to change, sets it on each accepted
	// connection.
	KeepAliveConfig net.KeepAliveConfig

	// Control, if not nil, is called as package net's
	// ListenConfig.Control and Dialer.Control are: after a socket is
	// created and before it is bound (each listening socket: one per
	// poller with ReusePort) or connected (each address a Dial tries),
	// with the network ("tcp4", "tcp6" or "unix", as net passes it), the
	// address about to be bound or connected, and a RawConn on the
	// socket, valid until Control returns. An error fails the Listen or
	// Dial with it, and the socket is closed. Connections of a listener
	// made with Control, and connections dialed with it, never skip a
	// short read's syscall: Control may have set options, SO_RCVLOWAT
	// among them, that end reads early with no edge to come (DESIGN.md,
	// "Options a listener passes on").
	Control func(network, address string, c syscall.RawConn) error
}

// DefaultPollers is the number of pollers a Group gets when Config.Pollers
// is zero.
const DefaultPollers = 1

// ConfigError reports a bad configuration value: a Config field or a key of
// the NETPOLL environment variable.
type ConfigError struct {
	Key    string // the field or NETPOLL key, e.g. "mode"
	Value  string // the offending value as given
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("netpoll: bad %s %q: %s", e.Key, e.Value, e.Reason)
}

// validate checks every field and returns a *ConfigError naming the first
// bad one.
func (c Config) validate() error {
	if int(c.Mode) >= len(modeNames) {
		return &ConfigError{"mode", c.Mode.String(), "want et, oneshot or lt"}
	}
	if int(c.Sharing) >= len(sharingNames) {
		return &ConfigError{"sharing", c.Sharing.String(), "want single, exclusive, wakeall or reuseport"}
	}
	if int(c.Wait) >= len(waitNames) {
		return &ConfigError{"wait", c.Wait.String(), "want default, nested, block or inline"}
	}
	if c.BusyPoll < 0 || c.BusyPoll > time.Duration(maxBusyPollUsecs)*time.Microsecond {
		return &ConfigError{"busypoll", c.BusyPoll.String(), "want 0 (off) up to 2^31-1 microseconds"}
	}
	if int(c.SpinPolicy) >= len(spinPolicyNames) {
		return &ConfigError{"spinpolicy", c.SpinPolicy.String(), "want default, auto or fixed"}
	}
	if int(c.ShortRead) >= len(shortReadNames) {
		return &ConfigError{"shortread", c.ShortRead.String(), "want default, on or off"}
	}
	if c.SpinPolicy == SpinAuto && c.Spin != 0 {
		return &ConfigError{"spin", c.Spin.String(), "SpinAuto sets the budget itself: leave Spin 0"}
	}
	if c.Wait == WaitInline && c.Spin != 0 {
		return &ConfigError{"spin", c.spinString(), "wait=inline spins only by SpinAuto, which sets its budget itself: its parked operation waits in the runtime's netpoller (leave Spin 0)"}
	}
	if c.Sharing == Exclusive && (c.Wait == WaitNested || c.Wait == WaitInline) {
		// Measured: with 32 nested pollers every poller woke for each
		// connection, as many wakeups as WakeAll.
		return &ConfigError{"sharing", "exclusive", "needs wait=block (no wait key: exclusive defaults to block): the kernel stops an EPOLLEXCLUSIVE wakeup only at an epoll instance with a thread asleep in epoll_wait, and nested pollers sleep in the runtime's epoll instead, so every poller would wake"}
	}
	if c.Pollers < 0 || c.Pollers > MaxPollers {
		return &ConfigError{"pollers", strconv.Itoa(c.Pollers), fmt.Sprintf("want 0 (default) to %d", MaxPollers)}
	}
	return c.validateKeepAlive()
}

// autoSpin reports whether the pollers spin by SpinAuto: asked for, or the
// default (SpinDefault with Spin 0).
func (c Config) autoSpin() bool {
	auto := c.SpinPolicy == SpinAuto || (c.SpinPolicy == SpinDefault && c.Spin == 0)
	// A WaitBlock poller runs on a locked OS thread: its yield between spin
	// polls hands the P to another thread and back, so a spin poll costs
	// the context switches of the block it would save (measured with 8
	// Exclusive pollers: 20 context switches per accept with spinning, 4
	// without; BenchmarkAcceptStream). SpinAuto's answer there is never
	// to spin (doc.go, "Spinning"). Under WaitInline the operation waiting
	// on the epoll fd spins (inlineWait.holderStep).
	return auto && c.wait() != WaitBlock
}

// shortRead reports whether connections skip after short transfers.
func (c Config) shortRead() bool {
	return c.ShortRead == ShortReadOn || (c.ShortRead == ShortReadDefault && shortReadDefault)
}

// wait resolves WaitDefault: WaitBlock for Exclusive sharing, else WaitNested.
func (c Config) wait() Wait {
	switch {
	case c.Wait != WaitDefault:
		return c.Wait
	case c.Sharing == Exclusive:
		return WaitBlock
	}
	return WaitNested
}

func (c Config) pollers() int {
	if c.Pollers == 0 {
		return DefaultPollers
	}
	return c.Pollers
}

// spinString renders the spin key: "default", "auto", "forever" or a
// duration ("0s" is SpinFixed's never).
func (c Config) spinString() string {
	switch {
	case c.SpinPolicy == SpinAuto:
		return "auto"
	case c.SpinPolicy == SpinDefault && c.Spin == 0:
		return "default"
	case c.Spin == -1:
		return "forever" // what ParseConfig gives it; other negatives print as durations
	}
	return c.Spin.String()
}

// String renders c in the NETPOLL syntax; ParseConfig(c.String()) == c for
// every c that ParseConfig returns.
func (c Config) String() string {
	s := fmt.Sprintf("mode=%s,pollers=%d,sharing=%s,spin=%s,wait=%s",
		c.Mode, c.pollers(), c.Sharing, c.spinString(), c.Wait)
	if c.BusyPoll != 0 {
		s += ",busypoll=" + c.BusyPoll.String()
	}
	if c.ShortRead != ShortReadDefault {
		s += ",shortread=" + c.ShortRead.String()
	}
	return s
}

// ParseConfig parses the NETPOLL syntax: comma-separated key=value pairs,
// for example "mode=oneshot,pollers=2,spin=50us". Keys: mode (et, oneshot,
// lt), pollers (a count), sharing (single, exclusive, wakeall, reuseport),
// spin (a duration, 0 to never spin, "forever" for a negative budget, or
// "auto" for SpinAuto, "default" for the zero value), wait (nested,
// block, inline, default), busypoll (a duration), shortread (on, off, default). Unset keys keep their zero value. An unknown key, a
// repeated key or a bad value is a *ConfigError naming it.
func ParseConfig(s string) (Config, error) {
	var c Config
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Config{}, &ConfigError{"setting", kv, "want key=value"}
		}
		if seen[k] {
			return Config{}, &ConfigError{k, v, "key given twice"}
		}
		seen[k] = true
		if err := c.set(k, v); err != nil {
			return Config{}, err
		}
	}
	return c, c.validate()
}

func (c *Config) set(k, v string) error {
	switch k {
	case "mode":
		i := indexOf(modeNames[:], v, map[string]string{"edge": "et", "level": "lt"})
		if i < 0 {
			return &ConfigError{k, v, "want et, oneshot or lt"}
		}
		c.Mode = Mode(i)
	case "sharing":
		i := indexOf(sharingNames[:], v, nil)
		if i < 0 {
			return &ConfigError{k, v, "want single, exclusive, wakeall or reuseport"}
		}
		c.Sharing = Sharing(i)
	case "wait":
		i := indexOf(waitNames[:], v, nil)
		if i < 0 {
			return &ConfigError{k, v, "want nested, block, inline or default"}
		}
		c.Wait = Wait(i)
	case "pollers":
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPollers {
			return &ConfigError{k, v, fmt.Sprintf("want a count from 1 to %d", MaxPollers)}
		}
		c.Pollers = n
	case "busypoll":
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Duration(maxBusyPollUsecs)*time.Microsecond {
			return &ConfigError{k, v, "want a duration such as 50us, or 0, up to 2^31-1 microseconds"}
		}
		c.BusyPoll = d
	case "shortread":
		i := indexOf(shortReadNames[:], v, nil)
		if i < 0 {
			return &ConfigError{k, v, "want on, off or default"}
		}
		c.ShortRead = ShortRead(i)
	case "spin":
		switch v {
		case "default":
			return nil
		case "auto":
			c.SpinPolicy = SpinAuto
			return nil
		case "forever":
			c.Spin = -1
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return &ConfigError{k, v, `want a duration such as 50us, 0, "forever", "auto" or "default"`}
		}
		c.Spin = d
		if d == 0 {
			c.SpinPolicy = SpinFixed // explicit: never spin, whatever the default
		}
	default:
		return &ConfigError{"key", k, "known keys are mode, pollers, sharing, spin, wait, busypoll, shortread"}
	}
	return nil
}

// indexOf returns the index of v (or of its alias) in names, or -1.
func indexOf(names []string, v string, aliases map[string]string) int {
	if a, ok := aliases[v]; ok {
		v = a
	}
	for i, n := range names {
		if n == v {
			return i
		}
	}
	return -1
}

// EnvVar is the environment variable the default group is configured from.
const EnvVar = "NETPOLL"

func configFromEnv() (Config, error) {
	v := os.Getenv(EnvVar)
	c, err := ParseConfig(v)
	if err != nil {
		return Config{}, fmt.Errorf("%s=%q: %w", EnvVar, v, err)
	}
	return c, nil
}
