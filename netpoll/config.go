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

// Config configures a Group. The zero value is the default: one poller,
// one acceptor per listener, adaptive spinning, TCP keep-alive as package
// net sets it.
//
// The lab's experiment axes (how descriptors are registered, how a poller
// waits, a fixed spin budget, busy polling, wake-all sharing, short reads)
// are not fields: they are chosen by the Experiment string, in the syntax
// of the NETPOLL environment variable (ParseConfig).
type Config struct {
	// Pollers is the number of epoll pollers; 0 means DefaultPollers.
	// Connections are spread over them round robin.
	Pollers int

	// Sharing is how the pollers share a listening socket. The zero value,
	// Single, has one poller accept for each listener, as package net does.
	Sharing Sharing

	// DisableSpin turns adaptive spinning off: a poller with no events
	// blocks at once. By default a poller decides at each idle moment
	// whether a short spin is likely to find the next event sooner than a
	// wakeup would deliver it, and what the spin may cost (DESIGN.md).
	DisableSpin bool

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

	// Experiment chooses the lab's settings in the NETPOLL syntax
	// (ParseConfig), for example "mode=oneshot,wait=block". Its keys may
	// not contradict the fields above: a key set both ways is a
	// *ConfigError.
	Experiment string
}

// DefaultPollers is the number of pollers a Group gets when Config.Pollers
// is zero.
const DefaultPollers = 1

// MaxPollers bounds Config.Pollers; more epoll instances than this is a
// configuration mistake, not a tuning choice.
const MaxPollers = 1024

// Sharing is how the pollers of a group share a listening socket.
type Sharing uint8

const (
	// Single has one poller accept for the listener, as package net does.
	Single Sharing = iota
	// Exclusive adds the listening socket to every poller with
	// EPOLLEXCLUSIVE, so that a connection wakes one of them. The pollers
	// block in their own epoll_wait on a dedicated thread each (wait=block):
	// the kernel stops an exclusive wakeup only at a thread asleep there.
	Exclusive
	// ReusePort opens one SO_REUSEPORT socket per poller: the kernel
	// spreads connections over them by a hash of the peer's address.
	ReusePort

	// wakeAll adds the listening socket to every poller without
	// EPOLLEXCLUSIVE: the thundering-herd baseline, chosen only by the
	// experiment string (sharing=wakeall).
	wakeAll
)

var sharingNames = [...]string{Single: "single", Exclusive: "exclusive", ReusePort: "reuseport", wakeAll: "wakeall"}

// String returns the name used in NETPOLL: single, exclusive or reuseport.
func (s Sharing) String() string {
	if int(s) < len(sharingNames) {
		return sharingNames[s]
	}
	return "Sharing(" + strconv.Itoa(int(s)) + ")"
}

// regMode is how a descriptor is registered with its poller's epoll
// instance (the experiment key mode).
type regMode uint8

const (
	// edgeTriggered registers EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET once when
	// the descriptor opens and never calls epoll_ctl again until it closes.
	edgeTriggered regMode = iota
	// oneShot registers with EPOLLONESHOT and re-arms with EPOLL_CTL_MOD
	// before every park: one extra syscall per blocking operation. It is
	// the baseline the other modes are measured against.
	oneShot
	// levelTriggered registers EPOLLIN|EPOLLRDHUP once, without EPOLLET
	// (DESIGN.md for how repeated level events and writes are handled).
	levelTriggered
)

var modeNames = [...]string{edgeTriggered: "et", oneShot: "oneshot", levelTriggered: "lt"}

func (m regMode) String() string { return modeNames[m] }

// waitKind is how a poller waits for events when it has none (the
// experiment key wait).
type waitKind uint8

const (
	// waitDefault resolves to waitBlock with Exclusive sharing, else to
	// waitNested (settings.wait).
	waitDefault waitKind = iota
	// waitNested parks the poller's epoll fd in the Go runtime's own
	// netpoller: no OS thread is dedicated to the poller, and the goroutines
	// it wakes run on the thread that woke it (loop_linux.go).
	waitNested
	// waitBlock dedicates a locked OS thread that blocks in epoll_wait(-1).
	waitBlock
	// waitInline is waitNested where the operation about to park, when no
	// other watches the epoll fd, waits on it itself: the runtime's
	// netpoller wakes it directly, one goroutine hop where waitNested takes
	// two (inline_linux.go).
	waitInline
)

var waitNames = [...]string{waitDefault: "default", waitNested: "nested", waitBlock: "block", waitInline: "inline"}

func (w waitKind) String() string { return waitNames[w] }

// maxBusyPollUsecs is the largest busy_poll_usecs the kernel accepts (S32_MAX).
const maxBusyPollUsecs = 1<<31 - 1

// spinForever is the fixed budget of spin=forever: never block.
const spinForever time.Duration = -1

// settings is a Config resolved, its fields and its experiment string in
// one place: what the pollers and listeners read.
type settings struct {
	pollers   int
	sharing   Sharing
	mode      regMode
	wait      waitKind // resolved: never waitDefault
	autoSpin  bool     // the pollers spin adaptively (spin_linux.go)
	spin      time.Duration
	busyPoll  time.Duration
	shortRead bool // connections skip the syscall that would return EAGAIN after a short transfer
	// goDispatch: a Server's handler calls start goroutines of their own
	// (dispatch=go) instead of running on the goroutine that polled.
	goDispatch bool
	// hotDispatch: as goDispatch, and the goroutine that ran a call keeps
	// its connection while it stays busy, waiting on the runtime's
	// netpoller (dispatch=hot, hot_linux.go): the default with mode=et
	// and wait=nested.
	hotDispatch bool
	// loopDispatch: a Server's handlers run on the poller's own thread,
	// one after another, with a watchdog (dispatch=loop, wait=block only;
	// serveloop_linux.go).
	loopDispatch bool
	// hotRead: a Conn's reads wait on the runtime's netpoller while the
	// connection stays busy (hotread, hotread_linux.go).
	hotRead hotReadKind
	// readAhead: a hot Server connection's goroutine, or the loop, reads
	// the next input ahead for the handler instead of polling (readahead,
	// the default with dispatch=hot or loop; readahead_linux.go).
	readAhead bool
}

// hotReadKind is the hotread key: when a connection that is not served
// (Listen's, Dial's) reads through a dup of its fd on the runtime's
// netpoller while it stays busy.
type hotReadKind uint8

const (
	hotReadOff  hotReadKind = iota
	hotReadAuto             // while GOMAXPROCS > 1, or with one P while the gaps are beyond spinning: the default with mode=et, wait=nested and no fixed spin
	hotReadOn
)

var hotReadNames = [...]string{hotReadOff: "off", hotReadAuto: "auto", hotReadOn: "on"}

func (k hotReadKind) String() string { return hotReadNames[k] }

// ConfigError reports a bad configuration value: a Config field or a key of
// the NETPOLL syntax.
type ConfigError struct {
	Key    string // the field or NETPOLL key, e.g. "mode"
	Value  string // the offending value as given
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("netpoll: bad %s %q: %s", e.Key, e.Value, e.Reason)
}

// knobs is what a NETPOLL string says, key by key, before it is checked
// against the Config fields and across keys.
type knobs struct {
	set         map[string]bool
	pollers     int
	sharing     Sharing
	mode        regMode
	wait        waitKind
	spinOff     bool          // spin=off or spin=0
	spinAuto    bool          // spin=auto, said outright
	spin        time.Duration // a fixed budget; spinForever for spin=forever
	busyPoll    time.Duration
	readOff     bool // shortread=off
	goCalls     bool // dispatch=go
	hotCalls    bool // dispatch=hot
	inlineCalls bool // dispatch=inline, said outright
	loopCalls   bool // dispatch=loop
	hotRead     hotReadKind
	hotReadSet  bool // hotread given, other than "default"
	aheadOff    bool // readahead=off
	aheadOn     bool // readahead=on, said outright
}

// keys lists the NETPOLL keys in the order String writes them.
var keys = []string{"pollers", "sharing", "mode", "wait", "spin", "busypoll", "shortread", "dispatch", "hotread", "readahead"}

func parseKnobs(s string) (knobs, error) {
	k := knobs{set: map[string]bool{}}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		key, v, ok := strings.Cut(kv, "=")
		if !ok {
			return knobs{}, &ConfigError{"setting", kv, "want key=value"}
		}
		if seen[key] {
			return knobs{}, &ConfigError{key, v, "key given twice"}
		}
		seen[key] = true
		if err := k.parse(key, v); err != nil {
			return knobs{}, err
		}
		if v != "default" {
			k.set[key] = true
		}
	}
	return k, nil
}

// parse sets one key. "default" is every key's zero value, as if the key
// were not given.
func (k *knobs) parse(key, v string) error {
	var i int
	switch key {
	case "pollers":
		n, err := strconv.Atoi(v)
		if v != "default" && (err != nil || n < 1 || n > MaxPollers) {
			return &ConfigError{key, v, fmt.Sprintf("want a count from 1 to %d", MaxPollers)}
		}
		k.pollers = n
	case "sharing":
		if i = indexOf(sharingNames[:], v, map[string]string{"default": "single"}); i < 0 {
			return &ConfigError{key, v, "want single, exclusive, reuseport or wakeall"}
		}
		k.sharing = Sharing(i)
	case "mode":
		if i = indexOf(modeNames[:], v, map[string]string{"edge": "et", "level": "lt", "default": "et"}); i < 0 {
			return &ConfigError{key, v, "want et, oneshot or lt"}
		}
		k.mode = regMode(i)
	case "wait":
		if i = indexOf(waitNames[:], v, nil); i < 0 {
			return &ConfigError{key, v, "want nested, block, inline or default"}
		}
		k.wait = waitKind(i)
	case "spin":
		switch v {
		case "default":
		case "auto":
			k.spinAuto = true
		case "off", "0":
			k.spinOff = true
		case "forever":
			k.spin = spinForever
		default:
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return &ConfigError{key, v, `want "auto" (the default), "off" (or 0), a fixed budget such as 50us, or "forever"`}
			}
			k.spin, k.spinOff = d, d == 0
		}
	case "busypoll":
		d, err := time.ParseDuration(v)
		if v != "default" && (err != nil || d < 0 || d > time.Duration(maxBusyPollUsecs)*time.Microsecond) {
			return &ConfigError{key, v, "want a duration such as 50us, or 0, up to 2^31-1 microseconds"}
		}
		k.busyPoll = d
	case "shortread":
		switch v {
		case "on", "default":
		case "off":
			k.readOff = true
		default:
			return &ConfigError{key, v, "want on (the default) or off"}
		}
	case "dispatch":
		switch v {
		case "default":
		case "inline":
			k.inlineCalls = true
		case "go":
			k.goCalls = true
		case "hot":
			k.hotCalls = true
		case "loop":
			k.loopCalls = true
		default:
			return &ConfigError{key, v, "want hot (the default with mode=et and wait=nested), inline, loop or go"}
		}
	case "hotread":
		if v == "default" {
			break
		}
		i := indexOf(hotReadNames[:], v, nil)
		if i < 0 {
			return &ConfigError{key, v, "want auto (the default with mode=et, wait=nested and no fixed spin: on while GOMAXPROCS > 1, and with one P while the gaps between reads are beyond adaptive spinning), on or off"}
		}
		k.hotRead, k.hotReadSet = hotReadKind(i), true
	case "readahead":
		switch v {
		case "default":
		case "on":
			k.aheadOn = true
		case "off":
			k.aheadOff = true
		default:
			return &ConfigError{key, v, "want on (the default with dispatch=hot) or off"}
		}
	default:
		return &ConfigError{"key", key, "known keys are " + strings.Join(keys, ", ")}
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

// experiment renders the keys that have no Config field, in the order of
// keys: what ParseConfig leaves in Config.Experiment.
func (k knobs) experiment() string {
	var b []string
	for _, key := range keys {
		var v string
		switch {
		case !k.set[key]:
			continue
		case key == "sharing" && k.sharing == wakeAll:
			v = wakeAll.String()
		case key == "mode":
			v = k.mode.String()
		case key == "wait":
			v = k.wait.String()
		case key == "spin" && k.spinAuto:
			v = "auto"
		case key == "spin" && k.spin == spinForever:
			v = "forever"
		case key == "spin" && k.spin > 0:
			v = k.spin.String()
		case key == "busypoll":
			v = k.busyPoll.String()
		case key == "shortread" && k.readOff:
			v = "off"
		case key == "dispatch" && k.goCalls:
			v = "go"
		case key == "dispatch" && k.hotCalls:
			v = "hot"
		case key == "dispatch" && k.inlineCalls:
			v = "inline"
		case key == "dispatch" && k.loopCalls:
			v = "loop"
		case key == "hotread" && k.hotReadSet:
			v = k.hotRead.String()
		case key == "readahead" && k.aheadOn:
			v = "on"
		case key == "readahead" && k.aheadOff:
			v = "off"
		default:
			continue // a Config field: pollers, sharing but wakeall, spin=off
		}
		b = append(b, key+"="+v)
	}
	return strings.Join(b, ",")
}

// ParseConfig parses the NETPOLL syntax: comma-separated key=value pairs,
// for example "pollers=2,mode=oneshot,spin=50us". The keys and values:
//
//	pollers    a count from 1 to MaxPollers (Config.Pollers)
//	sharing    single, exclusive, reuseport (Config.Sharing), or wakeall:
//	           every poller wakes for each connection, the herd baseline
//	spin       auto (the default), off or 0 (Config.DisableSpin), a fixed
//	           budget such as 50us, or forever: the poller never blocks
//	           and keeps a CPU busy while the group is open
//	mode       et (the default), oneshot or lt: edge-triggered, one-shot
//	           re-armed before every park, or level-triggered registration
//	wait       nested (the default), block or inline: the poller's epoll fd
//	           parked in the runtime's netpoller, a dedicated thread in
//	           epoll_wait (the default with sharing=exclusive), or the
//	           parking operation waiting on the epoll fd itself
//	busypoll   a duration: the kernel busy-polls the device's NAPI queue
//	           inside epoll_wait (Linux 6.9+, a NIC with busy polling)
//	shortread  on (the default) or off: after a short read or write, skip
//	           the syscall that would return EAGAIN
//	dispatch   hot (the default with mode=et and wait=nested), inline
//	           (the default otherwise) or go, for a Server: hot, the
//	           goroutine that ran a call keeps its connection while it
//	           stays busy, waiting for its next input on the runtime's
//	           netpoller through a dup of its fd, and an idle one goes
//	           back to the poller with no goroutine (mode=et only);
//	           inline, a handler runs on the goroutine that polled
//	           (wait=nested); loop, handlers run one after another on
//	           the poller's own thread, and a watchdog hands the loop to
//	           a new thread when one blocks (wait=block only); go, each
//	           call that starts after a wait starts a goroutine of its own
//	hotread    auto (the default with mode=et, wait=nested and no fixed
//	           spin budget), on or off, for connections that are not
//	           served (Listen's, Dial's TCP): on, a connection whose read
//	           parks are woken within a sweep (20 ms) of each other reads
//	           on the runtime's netpoller through a dup of its fd, as
//	           package net's reads, until it idles through a sweep
//	           (mode=et, wait=nested only); auto, on while GOMAXPROCS > 1
//	           (read at each change of state and each sweep), where the
//	           nested wait's second hop wakes a second thread, and with
//	           one P while the poller's typical idle gap is over twice
//	           its spin budget (or it does not spin; set beside a fixed
//	           spin budget it stays cold), where no spin would see the
//	           next input
//	readahead  on (the default with dispatch=hot or loop) or off, for a
//	           Server: on, a hot connection's goroutine (or the loop,
//	           before a run) learns whether input is queued with a
//	           read(2) into a pooled buffer, which the handler's Read then
//	           takes, as package net's reader reads; off, with a poll(2),
//	           the handler's Read making the read (dispatch=hot or loop,
//	           and shortread=on, only)
//
// Every key also takes "default", as if it were not given. The keys with a
// Config field set that field; the rest are kept, in the order above, in
// Experiment. An unknown key, a repeated key, a bad value or values that
// do not go together is a *ConfigError naming the key.
func ParseConfig(s string) (Config, error) {
	k, err := parseKnobs(s)
	if err != nil {
		return Config{}, err
	}
	c := Config{Pollers: k.pollers, DisableSpin: k.spinOff, Experiment: k.experiment()}
	if k.sharing != wakeAll {
		c.Sharing = k.sharing
	}
	if _, err := c.settings(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// String renders c's Pollers, Sharing, DisableSpin and Experiment in the
// NETPOLL syntax, leaving out what is the default. ParseConfig(c.String())
// returns c for every c that ParseConfig returns.
func (c Config) String() string {
	var b []string
	if c.Pollers != 0 {
		b = append(b, "pollers="+strconv.Itoa(c.Pollers))
	}
	if c.Sharing != Single {
		b = append(b, "sharing="+c.Sharing.String())
	}
	if c.DisableSpin {
		b = append(b, "spin=off")
	}
	if e := strings.Trim(c.Experiment, ", "); e != "" {
		b = append(b, e)
	}
	return strings.Join(b, ",")
}

// settings resolves c: its fields, then its Experiment, checked against
// each other. It returns a *ConfigError naming the first bad value.
func (c Config) settings() (settings, error) {
	if c.Pollers < 0 || c.Pollers > MaxPollers {
		return settings{}, &ConfigError{"pollers", strconv.Itoa(c.Pollers), fmt.Sprintf("want 0 (the default) to %d", MaxPollers)}
	}
	if err := c.validateKeepAlive(); err != nil {
		return settings{}, err
	}
	if c.Sharing >= wakeAll {
		return settings{}, &ConfigError{"sharing", c.Sharing.String(), "want Single, Exclusive or ReusePort (wakeall only by Experiment)"}
	}
	k, err := parseKnobs(c.Experiment)
	if err != nil {
		return settings{}, err
	}
	both := func(key, field string) error {
		return &ConfigError{key, c.Experiment, "set both by Config." + field + " and by Experiment"}
	}
	switch {
	case k.set["pollers"] && c.Pollers != 0:
		return settings{}, both("pollers", "Pollers")
	case k.set["sharing"] && c.Sharing != Single:
		return settings{}, both("sharing", "Sharing")
	case k.set["spin"] && c.DisableSpin:
		return settings{}, both("spin", "DisableSpin")
	}
	s := settings{
		pollers:      max(c.Pollers, k.pollers, DefaultPollers),
		sharing:      max(c.Sharing, k.sharing),
		mode:         k.mode,
		wait:         k.wait,
		spin:         k.spin,
		busyPoll:     k.busyPoll,
		shortRead:    !k.readOff,
		goDispatch:   k.goCalls,
		hotDispatch:  k.hotCalls,
		loopDispatch: k.loopCalls,
	}
	if s.wait == waitDefault {
		s.wait = waitNested
		if s.sharing == Exclusive {
			s.wait = waitBlock
		}
	}
	if !k.goCalls && !k.hotCalls && !k.inlineCalls && !k.loopCalls {
		// Measured (issue 35, testdata/issue35/hot): hot makes package
		// net's syscalls per request and spent 0.92-1.25x its CPU per
		// request across the cells, where inline dispatch spent
		// 1.08-1.57x. It needs edge-triggered registration, and the
		// other waits keep what they were measured with.
		s.hotDispatch = s.mode == edgeTriggered && s.wait == waitNested
	}
	spinOff := c.DisableSpin || k.spinOff
	switch {
	case s.sharing == Exclusive && s.wait != waitBlock:
		// Measured: with 32 nested pollers every poller woke for each
		// connection, as many wakeups as wakeall.
		return settings{}, &ConfigError{"sharing", "exclusive", "needs wait=block (the default with exclusive): the kernel stops an EPOLLEXCLUSIVE wakeup only at an epoll instance with a thread asleep in epoll_wait, and nested pollers sleep in the runtime's epoll instead, so every poller would wake"}
	case s.wait == waitInline && s.spin != 0:
		return settings{}, &ConfigError{"spin", s.spinString(), "wait=inline spins only adaptively: its parked operation waits in the runtime's netpoller"}
	case s.hotDispatch && s.mode != edgeTriggered:
		// A hot connection's registration is disarmed while its goroutine
		// waits on the runtime, and armed per park as oneshot arms; lt
		// keeps reading armed, and oneshot would need its own way back.
		return settings{}, &ConfigError{"dispatch", "hot", "needs mode=et (the default): a hot connection's own registration is disarmed while it waits on the runtime's netpoller"}
	case s.loopDispatch && s.wait != waitBlock:
		// The loop is the blocking wait's own thread: a nested poller's
		// handlers run inline already (dispatch=inline), and waitInline
		// has no loop.
		return settings{}, &ConfigError{"dispatch", "loop", "needs wait=block: the loop runs handlers on the poller's own thread, which only wait=block has"}
	case s.wait == waitBlock && k.spinAuto:
		// A poller on a locked OS thread yields its P to another thread and
		// back on each spin poll, paying the context switches of the block
		// it would save (measured with 8 Exclusive pollers: 20 context
		// switches per accept with spinning, 4 without; BenchmarkAcceptStream).
		return settings{}, &ConfigError{"spin", "auto", "wait=block never spins adaptively: each spin poll would cost the context switches of the block it saves (leave spin out, or give a fixed budget)"}
	}
	s.autoSpin = !spinOff && s.spin == 0 && s.wait != waitBlock
	nestedET := s.mode == edgeTriggered && s.wait == waitNested
	switch {
	case k.hotReadSet && k.hotRead != hotReadOff && !nestedET:
		// As dispatch=hot: the registration is disarmed while the reads
		// wait on the runtime, and armed per park for a writer.
		return settings{}, &ConfigError{"hotread", k.hotRead.String(), "needs mode=et and wait=nested (the defaults): a hot connection's own registration is disarmed while its reads wait on the runtime's netpoller"}
	case k.hotReadSet:
		s.hotRead = k.hotRead
	case nestedET && s.spin == 0:
		// Measured (issue 35, testdata/issue35/hotread): unpinned, the
		// nested wait's hop spent 1.6-2.1x package net's CPU per
		// request; with one P it is a cheap hand-off, and adaptive
		// spinning wins there (1.3x net's requests per second pinned).
		// A fixed spin budget asks for the poller's spinning.
		s.hotRead = hotReadAuto
	}
	switch {
	case k.aheadOn && !s.hotDispatch && !s.loopDispatch:
		return settings{}, &ConfigError{"readahead", "on", "needs dispatch=hot or loop: only a hot connection's goroutine and the loop read ahead"}
	case k.aheadOn && !s.shortRead:
		// The read direction learns that user code has had the fd only
		// with skipping on (stickyRaw), and input read ahead must not be
		// read behind.
		return settings{}, &ConfigError{"readahead", "on", "needs shortread=on: a connection whose fd user code has had must stop reading ahead, which only a skipping connection tracks"}
	}
	// Measured (issue 35, testdata/issue35/readahead): the poll per
	// wakeup cost a syscall more than package net's read wherever the
	// next request was queued as the response went out.
	// The loop's poll(2) before each run cost it a syscall per request
	// (testdata/issue35/loop).
	s.readAhead = (s.hotDispatch || s.loopDispatch) && s.shortRead && !k.aheadOff
	return s, nil
}

// spinString renders the spin setting as the spin key would give it.
func (s settings) spinString() string {
	switch {
	case s.autoSpin:
		return "auto"
	case s.spin == spinForever:
		return "forever"
	case s.spin == 0:
		return "off"
	}
	return s.spin.String()
}

// EnvVar is the environment variable the default group (Default, and so
// the package-level Listen, Dial and FileListener) is configured from, in
// the syntax of ParseConfig. New never reads it.
const EnvVar = "NETPOLL"

func configFromEnv() (Config, error) {
	v := os.Getenv(EnvVar)
	c, err := ParseConfig(v)
	if err != nil {
		return Config{}, fmt.Errorf("%s=%q: %w", EnvVar, v, err)
	}
	return c, nil
}
