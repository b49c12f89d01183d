package netpoll

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Listener is a stream listener (TCP or unix) on a Group's pollers. It
// implements net.Listener; accepted connections are *Conn.
//
// With Sharing Single, Accept calls accept4 itself on the listener's one
// registration. With Exclusive, wakeAll or ReusePort, each registration (one
// per poller) has an acceptor goroutine that accepts on its own poller,
// registers the new connection on that poller and hands it to Accept.
//
// Like *net.TCPListener it has SetDeadline, SyscallConn and File; the last
// two see every socket of a shared listener and say where sharing limits
// them.
type Listener struct {
	g       *Group
	network string
	addr    net.Addr
	unlink  string  // unix socket path to remove on Close
	sharing Sharing // Single, or how the registrations share the socket
	ds      []*desc // registrations: one, or one per poller
	fd      int     // Exclusive, wakeAll: the socket every registration shares; else -1

	locals    localAddrs        // the local address its connections share
	conns     chan acceptResult // acceptors to Accept; unbuffered, so the kernel queues
	acceptors sync.WaitGroup
	accepts   []atomic.Uint64 // connections accepted per registration

	closeOnce sync.Once
	closed    chan struct{} // closed when Close begins: ends back-offs and hand-offs

	// raw is set, for good, once user code has had a listening socket
	// (SyscallConn, File, Config.Control, FileListener): the connections
	// accepted from then on skip no short reads. See Listener.exposeRaw
	// (listener_raw_linux.go).
	raw atomic.Bool

	// connKeepAlive says each accepted connection gets the group's TCP
	// keep-alive itself: a FileListener's, whose socket is not the
	// group's to change. Otherwise the listening sockets carry it and
	// the connections inherit it (sockopt_linux.go).
	connKeepAlive bool

	// deadline is Accept's deadline, one immutable value at a time:
	// SetDeadline swaps in a new one and closes the old one's changed,
	// which wakes whoever waits with the old value (a shared listener's
	// Accept, Single's EMFILE back-off). Single's parked Accept reads its
	// copy in ds[0].rd instead. dlMu serializes SetDeadline so that the two
	// agree; nothing else takes it. Acceptors never see the deadline.
	dlMu     sync.Mutex
	deadline atomic.Pointer[acceptDeadline]
}

type acceptResult struct {
	c   *Conn
	err error
}

// acceptDeadline is one value of a Listener's deadline.
type acceptDeadline struct {
	ns      int64         // unix nanoseconds, as dir.deadline; 0 means none
	changed chan struct{} // closed when SetDeadline replaces this value
}

var (
	_ net.Listener = (*Listener)(nil)
	_ syscall.Conn = (*Listener)(nil)
)

// errRawShared is what a shared listener's raw Read and Write return.
var errRawShared = fmt.Errorf("raw Read and Write: the acceptor goroutines own the readiness of its sockets: %w", ErrSharedListener)

// Accept backs off this long, doubling up to acceptBackoffMax, while the
// process or system is out of fds or memory (EMFILE, ENFILE, ENOBUFS,
// ENOMEM), instead of spinning on a listener that stays readable.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

func (g *Group) listen(ctx context.Context, network, address string) (*Listener, error) {
	if err := g.checkOpen(); err != nil {
		return nil, err
	}
	sharing := g.set.sharing
	if sharing == ReusePort && network == "unix" {
		return nil, &ConfigError{"sharing", "reuseport", "SO_REUSEPORT balances TCP only; unix sockets cannot share a path"}
	}
	eps, err := resolve(ctx, network, address, true)
	if err != nil {
		return nil, err
	}
	ep := eps[0]
	l := &Listener{g: g, network: network, sharing: sharing, fd: -1, closed: make(chan struct{})}
	l.deadline.Store(&acceptDeadline{changed: make(chan struct{})})
	if g.cfg.Control != nil {
		l.exposeRaw() // before the hook has the socket
	}
	if err := l.open(ep); err != nil {
		l.closeRegistrations()
		return nil, &net.OpError{Op: "listen", Net: network, Addr: ep.addr, Err: err}
	}
	if network == "unix" {
		l.addr = ep.addr
		if name := ep.addr.(*net.UnixAddr).Name; name[0] != '@' {
			l.unlink = name
		}
	}
	return l.start()
}

// start starts the acceptors of a listener whose registrations are made
// and adds it to its group, or closes it if the group closed meanwhile.
func (l *Listener) start() (*Listener, error) {
	if l.sharing != Single {
		l.conns = make(chan acceptResult)
		l.accepts = make([]atomic.Uint64, len(l.ds))
		for i := range l.ds {
			l.acceptors.Add(1)
			go l.acceptor(i)
		}
	}
	g := l.g
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		l.Close()
		return nil, errGroupClosed
	}
	g.listeners[l] = struct{}{}
	g.mu.Unlock()
	return l, nil
}

// open creates the socket(s) and registrations for l's sharing mode.
func (l *Listener) open(ep endpoint) error {
	g := l.g
	switch l.sharing {
	case Single:
		fd, err := g.listenSocket(l.network, ep, false)
		if err != nil {
			return err
		}
		return l.register(fd, g.pick(), 0, true)
	case ReusePort:
		for i, p := range g.pollers {
			fd, err := g.listenSocket(l.network, ep, true)
			if err != nil {
				return err
			}
			if err := l.register(fd, p, 0, true); err != nil {
				return err
			}
			if i == 0 {
				// The others bind to the port the first one got.
				sa, err := unix.Getsockname(fd)
				if err != nil {
					return os.NewSyscallError("getsockname", err)
				}
				ep.sa = sa
				if a, ok := ep.addr.(*net.TCPAddr); ok {
					// What Control and errors name: the address bound.
					ep.addr = &net.TCPAddr{IP: a.IP, Port: toAddr(sa).(*net.TCPAddr).Port, Zone: a.Zone}
				}
			}
		}
		return nil
	default: // Exclusive, wakeAll
		fd, err := g.listenSocket(l.network, ep, false)
		if err != nil {
			return err
		}
		return l.share(fd)
	}
}

// share registers listening socket fd on every poller (Exclusive, WakeAll).
// l owns fd from here: closeRegistrations closes it, on failure too.
func (l *Listener) share(fd int) error {
	l.fd = fd
	extra := uint32(0)
	if l.sharing == Exclusive {
		extra = unix.EPOLLEXCLUSIVE
	}
	for _, p := range l.g.pollers {
		if err := l.register(fd, p, extra, false); err != nil {
			if extra != 0 && errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("sharing=exclusive: the kernel refuses EPOLLEXCLUSIVE (needs Linux 4.5): %w", err)
			}
			return err
		}
	}
	return nil
}

// register adds a registration of the listening socket fd on p. extra is
// EPOLLEXCLUSIVE or 0; owns says whether closing the registration closes fd.
// A socket shared by several pollers is registered edge-triggered in every
// mode: the kernel refuses EPOLLEXCLUSIVE with EPOLLONESHOT and with
// EPOLL_CTL_MOD, and a level-triggered socket shared by pollers would report
// every queued connection to all of them while Accept is not being called.
// On failure an owned fd is closed.
func (l *Listener) register(fd int, p *poller, extra uint32, owns bool) error {
	kind := kindListener
	if !owns {
		kind = kindShared
	}
	d := newDesc(fd, kind)
	if err := p.register(d, extra); err != nil {
		if owns {
			unix.Close(fd)
		}
		return err
	}
	l.ds = append(l.ds, d)
	if l.addr == nil {
		l.addr = localAddr(fd)
	}
	return nil
}

// listenSocket opens, binds and listens a non-blocking socket for ep,
// running the group's prepare (Control, keep-alive) before bind. On
// failure the socket is closed.
func (g *Group) listenSocket(network string, ep endpoint, reusePort bool) (int, error) {
	fd, err := unix.Socket(ep.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := g.setupListen(fd, network, ep, reusePort); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setupListen sets listening socket fd's options, binds and listens it.
func (g *Group) setupListen(fd int, network string, ep endpoint, reusePort bool) error {
	setInt := func(level, opt, v int) error {
		return os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, level, opt, v))
	}
	if ep.family != unix.AF_UNIX {
		if err := setInt(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return err
		}
	}
	if reusePort {
		if err := setInt(unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return err
		}
	}
	if ep.family == unix.AF_INET6 {
		// tcp on an IPv6 socket is dual-stack, tcp6 is not, as in package net.
		if err := setInt(unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, boolInt(network == "tcp6")); err != nil {
			return err
		}
	}
	if err := g.prepare(fd, network, ep, true); err != nil {
		return err
	}
	if err := unix.Bind(fd, ep.sa); err != nil {
		return os.NewSyscallError("bind", err)
	}
	if err := unix.Listen(fd, listenBacklog()); err != nil {
		return os.NewSyscallError("listen", err)
	}
	return nil
}

// AcceptConn is Accept returning the *Conn, as *net.TCPListener's
// AcceptTCP returns a *net.TCPConn.
func (l *Listener) AcceptConn() (*Conn, error) {
	if l.sharing == Single {
		c, err := l.acceptOn(l.ds[0], l.g.pick(), nil, true)
		if err != nil {
			return nil, l.opError("accept", err)
		}
		return c, nil
	}
	if l.isClosed() {
		return nil, l.opError("accept", net.ErrClosed)
	}
	// A connection an acceptor holds when this fails stays with it, for
	// the next Accept (or for Close to close).
	r, err := receive(l, l.conns, true)
	if err == nil {
		err = r.err
	}
	if err != nil {
		return nil, l.opError("accept", err)
	}
	return r.c, nil
}

// receive waits for a value from ch. It fails with net.ErrClosed once l
// closes and, if timed, with os.ErrDeadlineExceeded once l's deadline has
// passed; a deadline SetDeadline changes meanwhile applies at once.
func receive[T any](l *Listener, ch <-chan T, timed bool) (v T, err error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var expire <-chan time.Time
		var changed <-chan struct{}
		if timed {
			dl := l.deadline.Load()
			changed = dl.changed
			if dl.ns != 0 {
				left := time.Duration(dl.ns - time.Now().UnixNano())
				if left <= 0 {
					return v, os.ErrDeadlineExceeded
				}
				if timer == nil {
					timer = time.NewTimer(left)
				} else {
					timer.Reset(left)
				}
				expire = timer.C
			}
		}
		select {
		case v = <-ch:
			return v, nil
		case <-l.closed:
			return v, net.ErrClosed
		case <-expire:
			return v, os.ErrDeadlineExceeded
		case <-changed:
			// Loop to read the new deadline.
		}
	}
}

// acceptor accepts on registration i and hands connections to Accept until
// the listener closes. Errors other than closing are handed on too.
//
// A failed re-add of balancing (accepted) leaves registration i out of
// epoll. Its error goes to an Accept, after the connection just accepted,
// and the acceptor adds the registration again after a back-off (as
// Accept backs off while out of fds: ENOMEM and ENOSPC pass), handing each
// failed try's error to an Accept too, until one succeeds or the listener
// closes. Meanwhile the other registrations take the socket's edges, and
// this acceptor still accepts the turns balance hands it: it parks for
// them with its back-off as its deadline (d.rd's deadline, which nothing
// else uses on a shared registration).
func (l *Listener) acceptor(i int) {
	defer l.acceptors.Done()
	d := l.ds[i]
	gate := func() bool { return l.balance(i) }
	var backoff time.Duration // not 0 while registration i is out of epoll
	for {
		c, err := l.acceptOn(d, d.p, gate, false)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		var lost error // an epoll_ctl error that left registration i out of epoll
		switch {
		case err == nil:
			lost = l.accepted(i, backoff == 0)
		case backoff != 0 && errors.Is(err, os.ErrDeadlineExceeded):
			err = nil // the back-off is over
			if lost = l.reregister(d); lost == nil {
				backoff = 0
				d.rd.deadline.Store(0)
				continue
			}
		}
		if (c != nil || err != nil) && !l.handOn(acceptResult{c, err}) {
			return
		}
		if lost != nil {
			if !l.handOn(acceptResult{err: lost}) {
				return
			}
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			d.rd.deadline.Store(time.Now().Add(backoff).UnixNano())
		}
	}
}

// handOn gives an acceptor's result to an Accept, or reports false once the
// listener closes, closing the connection it carried.
func (l *Listener) handOn(r acceptResult) bool {
	select {
	case l.conns <- r:
		return true
	case <-l.closed:
		if r.c != nil {
			r.c.Close()
		}
		return false
	}
}

// errTurnPassed makes an acceptor park as after EAGAIN, without a syscall,
// when balance passed its turn to accept to another registration.
var errTurnPassed = errors.New("accept turn passed")

// acceptOn accepts one connection on d, parking on d's poller, retrying
// ECONNABORTED and backing off while out of fds, and registers it on p.
// gate, if not nil, runs before each accept4: false means park instead.
// timed says the listener's deadline applies (Accept in Single mode, where
// d.rd holds it too); acceptors keep accepting whatever the deadline.
func (l *Listener) acceptOn(d *desc, p *poller, gate func() bool, timed bool) (*Conn, error) {
	if err := d.begin(&d.rd); err != nil {
		return nil, err
	}
	defer d.end(&d.rd)
	backoff := time.Duration(0)
	for {
		var nfd int
		var raw unix.RawSockaddrAny
		_, err := d.transfer(&d.rd, 0, func() (int, error) {
			if gate != nil && !gate() {
				return 0, errTurnPassed
			}
			var err error
			nfd, err = accept4(d.fd, &raw)
			if err == unix.EAGAIN {
				d.p.st.inc(cAcceptEAGAIN)
			}
			return 0, err
		})
		switch err {
		case nil:
			d.p.st.inc(cAccepts)
			var rsa unix.Sockaddr
			if raw.Addr.Family == unix.AF_UNIX {
				rsa, _ = unix.Getpeername(nfd) // rare: unnamed, mostly
			}
			return l.inherit(l.g.newConn(nfd, l.network, rawTCPAddr(&raw), rsa, p, &l.locals, l.connKeepAlive))
		case unix.ECONNABORTED:
			continue
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			d.p.st.inc(cAcceptBackoffs)
			t := time.NewTimer(backoff)
			_, err := receive(l, t.C, timed)
			t.Stop()
			if err != nil {
				return nil, err
			}
		default:
			return nil, syscallErr("accept4", err)
		}
	}
}

// Balancing Exclusive sharing. The kernel wakes the first exclusive waiter
// on the socket's wait queue, always the same poller, and whichever acceptor
// is running takes what is queued; so one poller would take nearly every
// connection. Two corrections, both keyed on accepts per registration:
//
//   - accepted: a registration above the average after an accept moves to
//     the back of the wait queue by re-adding itself (EPOLL_CTL_DEL,
//     EPOLL_CTL_ADD), as nginx does, so the kernel's next wakeup goes to a
//     poller that has waited longer.
//   - balance: before accept4, a registration more than one above the
//     average hands its edge to the least-loaded registration, as a ready
//     token through the state machine (no syscall), and parks. The
//     least-loaded never hands off and retries accept4 when it gets the
//     token, so a queued connection always has an acceptor that will try
//     for it. This catches bursts and races between acceptors that the
//     wait-queue order cannot.
//
// Accepts stay spread while each connection wakes about one poller.

// accepted counts an accept by registration i and, if requeue is set,
// requeues it if it is now above the average. It returns the requeue's
// error, which leaves the registration out of epoll (acceptor).
func (l *Listener) accepted(i int, requeue bool) error {
	n := l.accepts[i].Add(1)
	if !requeue || l.sharing != Exclusive || len(l.accepts) == 1 {
		return nil
	}
	total, _ := l.acceptTotals()
	if n*uint64(len(l.accepts)) <= total {
		return nil
	}
	d := l.ds[i]
	if d.incref() != nil {
		return nil
	}
	defer d.decref()
	if err := d.p.requeue(d, unix.EPOLLEXCLUSIVE); err != nil {
		return err
	}
	d.p.st.inc(cRotations)
	return nil
}

// reregister adds Exclusive registration d again after a failed requeue
// left it out of epoll. EEXIST says the requeue's DEL was what failed, and
// the registration never left. The reference keeps the ADD before the DEL
// of a concurrent Close (destroy): after it, the registration would
// outlive the listener in a dup of its socket (File).
func (l *Listener) reregister(d *desc) error {
	if d.incref() != nil {
		return nil // closing: the acceptor's next acceptOn returns net.ErrClosed
	}
	defer d.decref()
	if err := d.p.add(d, registration(d)|unix.EPOLLEXCLUSIVE); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

// balance runs before registration i tries accept4 and reports whether it
// may; if not, it has handed the edge to the least-loaded registration.
func (l *Listener) balance(i int) bool {
	k := uint64(len(l.accepts))
	if l.sharing != Exclusive || k == 1 {
		return true
	}
	total, least := l.acceptTotals()
	if l.accepts[i].Load()*k <= total+k || least == i {
		return true
	}
	l.ds[least].notify(&l.ds[least].rd)
	l.ds[least].p.st.inc(cAcceptTurns)
	return false
}

// acceptTotals returns the accepts of all registrations and the index of
// the one with the fewest.
func (l *Listener) acceptTotals() (total uint64, least int) {
	leastN := ^uint64(0)
	for j := range l.accepts {
		a := l.accepts[j].Load()
		total += a
		if a < leastN {
			least, leastN = j, a
		}
	}
	return total, least
}

// Close stops listening. Blocked Accepts return an error wrapping
// net.ErrClosed. A unix socket's path is removed, as package net does.
func (l *Listener) Close() error {
	first := false
	l.closeOnce.Do(func() {
		first = true
		close(l.closed)
	})
	if !first {
		return l.opError("close", net.ErrClosed)
	}
	l.closeRegistrations()
	if l.unlink != "" {
		os.Remove(l.unlink)
	}
	l.g.mu.Lock()
	delete(l.g.listeners, l)
	l.g.mu.Unlock()
	return nil
}

// closeRegistrations closes every registration, waits for the acceptors
// and closes a shared socket. A registration's Close error, a failed
// EPOLL_CTL_DEL, is dropped: ENOENT for one balancing left out of epoll
// (acceptor) or one a failed re-arm removed (fail), and otherwise the
// socket's close removes what is left, or, if File has a dup of it, its
// events carry generations the poller drops as stale.
func (l *Listener) closeRegistrations() {
	for _, d := range l.ds {
		d.close()
	}
	l.acceptors.Wait()
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// Addr returns the listener's address: *net.TCPAddr or *net.UnixAddr.
func (l *Listener) Addr() net.Addr { return l.addr }

// SetDeadline sets the deadline for Accept, including Accepts blocked now:
// once t has passed they fail with an error wrapping os.ErrDeadlineExceeded.
// The zero time clears it. In every Sharing mode a connection an acceptor
// goroutine has already taken is kept for the next Accept, not lost; the
// acceptors themselves keep accepting whatever the deadline.
func (l *Listener) SetDeadline(t time.Time) error {
	if l.isClosed() {
		return l.opError("set", net.ErrClosed)
	}
	var ns int64
	if !t.IsZero() {
		ns = max(t.UnixNano(), 1) // before 1970: long past, and not "none"
	}
	l.dlMu.Lock()
	defer l.dlMu.Unlock()
	if l.sharing == Single {
		// Accept parks on ds[0].rd; a raw Read or Write on ds[0]'s
		// directions sees the deadline as it does on a net.TCPListener.
		l.ds[0].setDeadline(&l.ds[0].rd, t)
		l.ds[0].setDeadline(&l.ds[0].wr, t)
	}
	old := l.deadline.Swap(&acceptDeadline{ns: ns, changed: make(chan struct{})})
	close(old.changed)
	return nil
}

// isClosed reports whether Close has begun.
func (l *Listener) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

func (l *Listener) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: l.network, Addr: l.addr, Err: err}
}

// newConn registers an accepted or connected fd on p and wraps it. On
// failure the fd is closed.
//
// locals, when not nil, lends the connection a local address it holds
// already (a listener's connections share theirs). keepAlive says to set
// the group's TCP keep-alive on it, as package net does on every TCP
// connection; a connection accepted from a socket that carries it has it
// already (sockopt_linux.go).
func (g *Group) newConn(fd int, network string, raddr tcpAddr, rsa unix.Sockaddr, p *poller, locals *localAddrs, keepAlive bool) (*Conn, error) {
	if network != "unix" {
		// TCP_NODELAY on by default, as in package net.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			unix.Close(fd)
			return nil, os.NewSyscallError("setsockopt", err)
		}
		if keepAlive {
			if err := g.keepAlive(fd); err != nil {
				unix.Close(fd)
				return nil, err
			}
		}
	}
	// Addresses first: once registered, a concurrent Group.Close may close
	// the fd and its number be reused.
	c := &Conn{d: newDesc(fd, kindConn)}
	c.d.net = networkIndex(network)
	if network == "unix" {
		c.uaddrs = &[2]net.Addr{localAddr(fd), toAddr(rsa)}
		if c.uaddrs[1] == nil {
			c.uaddrs[1] = &net.UnixAddr{Net: "unix"}
		}
	} else {
		c.laddr, c.raddr = locals.intern(localTCPAddr(fd)), raddr
	}
	if err := p.register(c.d, 0); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return c, nil
}

var somaxconn struct {
	once sync.Once
	n    int
}

// listenBacklog is the kernel's somaxconn, as package net uses.
func listenBacklog() int {
	somaxconn.once.Do(func() {
		somaxconn.n = unix.SOMAXCONN
		if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
			n := 0
			for _, c := range b {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			if n > 0 {
				somaxconn.n = n
			}
		}
	})
	return somaxconn.n
}
