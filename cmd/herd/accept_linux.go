package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// connectTimeout bounds one loopback handshake. Only a full accept queue
// (thousands of connections the waiters have not taken) makes it that slow.
const connectTimeout = time.Second

// acceptSource is the case EPOLLEXCLUSIVE was written for: an event is a
// connection to a listening socket on 127.0.0.1. The waiters share one
// listener, or in reuseport mode each has its own SO_REUSEPORT listener on the
// same port and the kernel picks one per connection.
type acceptSource struct {
	lns  []int // non-blocking listening sockets: one, or one per waiter
	addr unix.SockaddrInet4
}

// newAcceptSource listens on 127.0.0.1:0 with n sockets; for n > 1 they
// share the port with SO_REUSEPORT.
func newAcceptSource(n int) (_ *acceptSource, err error) {
	s := &acceptSource{addr: unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, os.NewSyscallError("socket", err)
		}
		s.lns = append(s.lns, fd)
		if n > 1 {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
				return nil, os.NewSyscallError("setsockopt", err)
			}
		}
		// The first bind picks the port; the others join it.
		if err := unix.Bind(fd, &s.addr); err != nil {
			return nil, os.NewSyscallError("bind", err)
		}
		if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
			return nil, os.NewSyscallError("listen", err)
		}
		if s.addr.Port == 0 {
			sa, err := unix.Getsockname(fd)
			if err != nil {
				return nil, os.NewSyscallError("getsockname", err)
			}
			s.addr.Port = sa.(*unix.SockaddrInet4).Port
		}
	}
	return s, nil
}

func (s *acceptSource) fd(i int) int {
	if len(s.lns) == 1 {
		return s.lns[0]
	}
	return s.lns[i]
}

// emit connects with a blocking socket and closes it at once: once connect
// returns, the connection is established and queued on a listener, and the
// FIN that follows does not stop accept from returning it.
func (s *acceptSource) emit() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	err = s.connect(fd)
	if cerr := closeFD("client socket", fd); err == nil {
		err = cerr
	}
	return err
}

func (s *acceptSource) connect(fd int) error {
	tv := unix.NsecToTimeval(connectTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	for {
		switch err := unix.Connect(fd, &s.addr); err {
		case nil, unix.EISCONN: // EISCONN: established while a signal interrupted us
			return nil
		case unix.EINTR:
			// With a send timeout the kernel does not restart connect after
			// a signal; calling it again waits for the same handshake.
		case unix.EINPROGRESS:
			return fmt.Errorf("connect to 127.0.0.1:%d: no handshake within %v: accept queue full?", s.addr.Port, connectTimeout)
		default:
			return os.NewSyscallError("connect", err)
		}
	}
}

func (s *acceptSource) take(fd int) (bool, error) {
	nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
	if err == unix.EAGAIN {
		return false, nil
	}
	if err != nil {
		return false, os.NewSyscallError("accept4", err)
	}
	return true, closeFD("accepted socket", nfd)
}

func (s *acceptSource) close() error {
	var errs []error
	for _, fd := range s.lns {
		errs = append(errs, closeFD("listener", fd))
	}
	return errors.Join(errs...)
}
