package netpoll

import (
	"errors"
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// What a Group sets up on a socket of its own before binding or connecting
// it: the user's Control hook, then TCP keep-alive.
//
// Keep-alive is on by default, as in package net, which sets it on every
// accepted connection: four setsockopt calls per accept. Here a listening
// socket carries it instead, and the connections it accepts inherit it,
// at no cost per accept. In Linux (6.1 source, net/ipv4/tcp_minisocks.c
// and net/core/sock.c) the socket an accept returns is a clone of its
// listener: tcp_create_openreq_child calls inet_csk_clone_lock, whose
// sk_clone_lock copies the whole sock and tcp_sock (sock_copy, the
// listener's prot->obj_size), so SOCK_KEEPOPEN in sk_flags and
// keepalive_time, keepalive_intvl and keepalive_probes in tcp_sock come
// along; sk_clone_lock resets SOCK_DONE, not SOCK_KEEPOPEN. Then
// tcp_create_openreq_child arms the child's keep-alive timer when
// SOCK_KEEPOPEN is set ("if (sock_flag(newsk, SOCK_KEEPOPEN))
// inet_csk_reset_keepalive_timer(newsk, keepalive_time_when(newtp))"), the
// timer a setsockopt on the connection would have armed. On the listener
// itself the options only store values: tcp_set_keepalive and
// tcp_sock_set_keepidle_locked arm no timer in TCP_LISTEN or TCP_CLOSE.
// The clone is taken when the handshake completes, so the options are set
// before listen(2): no connection is queued without them. DESIGN.md
// ("Options a listener passes on") records a probe of the running kernel
// that agrees, and TestKeepAlive reads the options back from accepted
// sockets in every Sharing.
//
// The order gives package net's result: Control runs first and keep-alive
// after it, so keep-alive options Control set are overridden, as net's
// per-connection setsockopt overrides what a connection inherited; with
// keep-alive off (KeepAlive < 0) nothing is set, and what Control set
// stays, as with net.

// keepAliveSock sets keep-alive on fd as package net's
// TCPConn.SetKeepAliveConfig does on Linux: SO_KEEPALIVE to ka.Enable,
// then the idle time, the interval and the count, each at net's default
// when zero and left as it is when negative.
func keepAliveSock(fd int, ka net.KeepAliveConfig) error {
	set := func(level, opt, v int) error {
		return syscallErr("setsockopt", unix.SetsockoptInt(fd, level, opt, v))
	}
	if err := set(unix.SOL_SOCKET, unix.SO_KEEPALIVE, boolInt(ka.Enable)); err != nil {
		return err
	}
	if s, ok := keepAliveSecs(ka.Idle, defaultKeepAliveIdle); ok {
		if err := set(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, s); err != nil {
			return err
		}
	}
	if s, ok := keepAliveSecs(ka.Interval, defaultKeepAliveInterval); ok {
		if err := set(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, s); err != nil {
			return err
		}
	}
	if n, ok := keepAliveCount(ka.Count); ok {
		if err := set(unix.IPPROTO_TCP, unix.TCP_KEEPCNT, n); err != nil {
			return err
		}
	}
	return nil
}

// keepAlive sets the group's keep-alive on a TCP socket, if it has one:
// a listening socket (whose connections inherit it) or a connection.
func (g *Group) keepAlive(fd int) error {
	if ka, on := g.cfg.keepAlive(); on {
		return keepAliveSock(fd, ka)
	}
	return nil
}

// prepare runs on a socket the group made, after socket(2) and the options
// the group always sets, before bind(2) or connect(2): the Control hook,
// then keep-alive for a listening socket (a dialed one gets it in newConn,
// after connect, where package net sets it). network is the network asked
// for; ep is the endpoint about to be bound or connected. A listener made
// with a hook must be marked (Listener.exposeRaw) before prepare runs.
func (g *Group) prepare(fd int, network string, ep endpoint, listening bool) error {
	if ctl := g.cfg.Control; ctl != nil {
		rc := &hookConn{fd: fd}
		err := ctl(ctrlNetwork(network, ep.family), ep.addr.String(), rc)
		rc.done.Store(true)
		if err != nil {
			return err
		}
	}
	if listening && ep.family != unix.AF_UNIX {
		return g.keepAlive(fd)
	}
	return nil
}

// ctrlNetwork is the network package net passes a Control hook
// (netFD.ctrlNetwork in net/sock_posix.go): "tcp" made specific by the
// socket's family, others as they are.
func ctrlNetwork(network string, family int) string {
	switch {
	case network != "tcp":
		return network
	case family == unix.AF_INET:
		return "tcp4"
	}
	return "tcp6"
}

// hookConn is the syscall.RawConn a Control hook gets: a socket not yet
// bound or connected, and not registered with a poller. Control runs f on
// it. Read and Write run f once and fail if it is not done, since nothing
// could announce readiness yet (package net's fail the same way). Once
// the hook has returned, every method fails: the fd then belongs to a
// registration, and is closed and its number reused when that closes.
type hookConn struct {
	fd   int
	done atomic.Bool // set when the hook returns
}

// errHookDone is what a hookConn's methods return after the hook returned.
var errHookDone = errors.New("netpoll: Config.Control's RawConn used after Control returned")

// errHookWait is what a hookConn's Read and Write return when f is not done.
var errHookWait = errors.New("netpoll: Config.Control's RawConn cannot wait: the socket is not registered with a poller yet")

func (rc *hookConn) Control(f func(fd uintptr)) error {
	if rc.done.Load() {
		return errHookDone
	}
	f(uintptr(rc.fd))
	return nil
}

func (rc *hookConn) Read(f func(fd uintptr) (done bool)) error { return rc.once(f) }

func (rc *hookConn) Write(f func(fd uintptr) (done bool)) error { return rc.once(f) }

func (rc *hookConn) once(f func(fd uintptr) bool) error {
	if rc.done.Load() {
		return errHookDone
	}
	if !f(uintptr(rc.fd)) {
		return errHookWait
	}
	return nil
}
