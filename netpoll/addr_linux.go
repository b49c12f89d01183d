package netpoll

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// endpoint is a resolved address: the sockaddr to hand the kernel and the
// net.Addr to show users.
type endpoint struct {
	family int
	sa     unix.Sockaddr
	addr   net.Addr
}

// resolve turns address into endpoints to try in order, resolving host and
// service names with net.DefaultResolver as package net does. For listen,
// an empty or unspecified host means every local address.
func resolve(ctx context.Context, network, address string, listen bool) ([]endpoint, error) {
	if err := checkNetwork(network); err != nil {
		return nil, err
	}
	if network == "unix" {
		if address == "" {
			return nil, errors.New("missing unix socket path")
		}
		return []endpoint{{unix.AF_UNIX, &unix.SockaddrUnix{Name: address}, &net.UnixAddr{Name: address, Net: network}}}, nil
	}
	host, service, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := net.DefaultResolver.LookupPort(ctx, network, service)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	switch {
	case host == "" && listen:
		// Named as package net names it (":80", in errors and to a
		// Control hook), not by the wildcard address bound.
		eps := wildcard(network, port)
		eps[0].addr = &net.TCPAddr{Port: port}
		return eps, nil
	case host == "":
		ips = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	default:
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, ipNetwork(network), host); err != nil {
			return nil, err
		}
	}
	var eps []endpoint
	for _, ip := range ips {
		if ip.IsUnspecified() && listen && !ip.Unmap().Is4() {
			return wildcard(network, port), nil // "[::]:p" is dual-stack for tcp, as in net
		}
		if ep, ok := tcpEndpoint(network, ip, port); ok {
			eps = append(eps, ep)
		}
	}
	if listen {
		// Listen on one address, preferring IPv4 as package net does.
		for _, ep := range eps {
			if ep.family == unix.AF_INET {
				return []endpoint{ep}, nil
			}
		}
		eps = eps[:min(len(eps), 1)]
	}
	if len(eps) == 0 {
		return nil, &net.AddrError{Err: "no suitable address found", Addr: host}
	}
	return eps, nil
}

func ipNetwork(network string) string {
	switch network {
	case "tcp4":
		return "ip4"
	case "tcp6":
		return "ip6"
	}
	return "ip"
}

// wildcard is the listen endpoint for every local address: a dual-stack
// IPv6 socket for tcp (as package net uses), IPv4 only for tcp4.
func wildcard(network string, port int) []endpoint {
	if network == "tcp4" || !ipv6Supported() {
		ep, _ := tcpEndpoint("tcp4", netip.IPv4Unspecified(), port)
		return []endpoint{ep}
	}
	ep, _ := tcpEndpoint("tcp6", netip.IPv6Unspecified(), port)
	return []endpoint{ep}
}

// tcpEndpoint converts ip:port, reporting false if ip does not fit network.
func tcpEndpoint(network string, ip netip.Addr, port int) (endpoint, bool) {
	addr := &net.TCPAddr{IP: ip.AsSlice(), Port: port, Zone: ip.Zone()}
	if u := ip.Unmap(); u.Is4() && network != "tcp6" {
		return endpoint{unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: u.As4()}, addr}, true
	}
	if !ip.Is6() || ip.Is4In6() || network == "tcp4" {
		return endpoint{}, false
	}
	sa := &unix.SockaddrInet6{Port: port, Addr: ip.As16()}
	if z := ip.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		} else if n, err := strconv.Atoi(z); err == nil {
			sa.ZoneId = uint32(n)
		}
	}
	return endpoint{unix.AF_INET6, sa, addr}, true
}

// tcpAddr is a TCP address as a Conn keeps it: 24 bytes and no pointer
// (an idle connection's every byte counts), made into the *net.TCPAddr
// package net shows on demand.
type tcpAddr struct {
	ip   [16]byte // an IPv4 address in the first 4
	zone uint32   // IPv6 scope id; 0 for none
	port uint16
	fam  uint8 // 0 (none), 4 or 6
}

// rawTCPAddr decodes the TCP address the kernel wrote into raw, without
// allocating (none for any other family).
func rawTCPAddr(raw *unix.RawSockaddrAny) tcpAddr {
	switch raw.Addr.Family {
	case unix.AF_INET:
		// unsafe: the kernel wrote a sockaddr_in when the family says
		// AF_INET, and RawSockaddrAny is larger than RawSockaddrInet4.
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(raw))
		a := tcpAddr{port: netPort(&sa.Port), fam: 4}
		copy(a.ip[:], sa.Addr[:])
		return a
	case unix.AF_INET6:
		// unsafe: as above, sockaddr_in6 for AF_INET6.
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(raw))
		return tcpAddr{ip: sa.Addr, zone: sa.Scope_id, port: netPort(&sa.Port), fam: 6}
	}
	return tcpAddr{}
}

// sockTCPAddr is rawTCPAddr for a decoded sockaddr.
func sockTCPAddr(sa unix.Sockaddr) tcpAddr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		a := tcpAddr{port: uint16(sa.Port), fam: 4}
		copy(a.ip[:], sa.Addr[:])
		return a
	case *unix.SockaddrInet6:
		return tcpAddr{ip: sa.Addr, zone: sa.ZoneId, port: uint16(sa.Port), fam: 6}
	}
	return tcpAddr{}
}

// addr returns a as package net shows it: a new *net.TCPAddr, or nil (for
// a nil a too: a Conn made without addresses).
func (a *tcpAddr) addr() net.Addr {
	if a == nil {
		return nil
	}
	switch a.fam {
	case 4:
		return &net.TCPAddr{IP: net.IP(append(make([]byte, 0, 4), a.ip[:4]...)), Port: int(a.port)}
	case 6:
		ta := &net.TCPAddr{IP: net.IP(append(make([]byte, 0, 16), a.ip[:]...)), Port: int(a.port)}
		if a.zone != 0 {
			ta.Zone = zoneName(a.zone)
		}
		return ta
	}
	return nil
}

// netPort reads a port kept in network byte order.
func netPort(p *uint16) uint16 {
	// unsafe: a uint16 is two bytes; the kernel stores the port big-endian.
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

func zoneName(id uint32) string {
	if ifi, err := net.InterfaceByIndex(int(id)); err == nil {
		return ifi.Name
	}
	return strconv.Itoa(int(id))
}

// accept4 is unix.Accept4 without its allocations: the peer's address
// stays in raw, on the caller's stack, for rawTCPAddr.
func accept4(fd int, raw *unix.RawSockaddrAny) (int, error) {
	n := uint32(unix.SizeofSockaddrAny)
	// unsafe: raw and n stay alive and unmoved for the call (pointers
	// converted in a syscall's argument list are kept), and the kernel
	// writes at most n bytes into raw and keeps no reference.
	r, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(raw)), uintptr(unsafe.Pointer(&n)),
		unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// localTCPAddr is the socket's local TCP address, from getsockname with
// no allocation; none if the kernel cannot say.
// localAddrs hands out shared copies of a listener's local addresses:
// every connection a listener accepts has the same local address, unless
// it listens on a wildcard and connections arrive at several, so each
// Conn points to one copy instead of holding its own (16 bytes of every
// connection's 64-byte record). It keeps the last address handed out.
type localAddrs struct {
	last atomic.Pointer[tcpAddr] // never modified once stored
}

// intern returns a shared copy of a, or a new one for a nil l (a dialed
// connection).
func (l *localAddrs) intern(a tcpAddr) *tcpAddr {
	if l == nil {
		p := new(tcpAddr)
		*p = a
		return p
	}
	if p := l.last.Load(); p != nil && *p == a {
		return p
	}
	p := new(tcpAddr) // not &a: a would escape, and be allocated on a hit too
	*p = a
	l.last.Store(p)
	return p
}

func localTCPAddr(fd int) tcpAddr {
	var raw unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	// unsafe: as in accept4.
	_, _, e := unix.RawSyscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&raw)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return tcpAddr{}
	}
	return rawTCPAddr(&raw)
}

// toAddr converts a kernel sockaddr to the net.Addr package net would show.
func toAddr(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4, *unix.SockaddrInet6:
		a := sockTCPAddr(sa)
		return a.addr()
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: sa.Name, Net: "unix"}
	}
	return nil
}

// localAddr returns the socket's local address, or nil if the kernel cannot
// say (the connection is then already broken; the next I/O will tell).
func localAddr(fd int) net.Addr {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil
	}
	return toAddr(sa)
}

var (
	ipv6Once sync.Once
	ipv6OK   bool
)

// ipv6Supported reports whether the kernel can open IPv6 sockets.
func ipv6Supported() bool {
	ipv6Once.Do(func() {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
			ipv6OK = true
		}
	})
	return ipv6OK
}
