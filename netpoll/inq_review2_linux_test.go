package netpoll_test

import (
	"net"
	"syscall"
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Review tests for the fixes of the first TCP_INQ review (helper-30, of
// 7340162 and later).

// TestInqReview2ColdWindow: dropInq clears the library's TCP_INQ for user
// code only while d.hotw names the hot wait, but goCold clears d.hotw
// (dropHot) before the owner's clearInq. User code that has the fd in
// between (a goroutine of the handler's with the Conn's RawConn, say)
// finds no hot wait, so its function runs with the library's TCP_INQ on,
// and an option it sets itself there is then turned off by clearInq,
// which still thinks it its own (inqSet): the two things dropInq was made
// to prevent. The window is held open here by the restore's EPOLL_CTL_MOD
// (dropHot, under armMu), where the user's Control runs.
func TestInqReview2ColdWindow(t *testing.T) {
	_, s, c, stop, _ := hotFixtureOf(t, "dispatch=hot,spin=off", echoHandler)
	heatAhead(t, s, c, stop)
	sc := serverSide(t, s, c)
	fd := netpoll.FD(sc)
	// Read past the library, not through Control, which clears the option.
	if v, err := unix.GetsockoptInt(fd, unix.SOL_TCP, unix.TCP_INQ); err != nil || v != 1 {
		t.Skipf("TCP_INQ while hot: %d, %v (a kernel without it?)", v, err)
	}
	rc, err := sc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// The user's code: sees the option, then sets it for its own use.
	user, userDone := make(chan struct{}), make(chan struct{})
	seen, serr := -1, error(nil)
	go func() {
		defer close(userDone)
		select {
		case <-user:
		case <-stop:
			return
		}
		if err := rc.Control(func(fd uintptr) {
			if seen, serr = unix.GetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ); serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ, 1)
			}
		}); err != nil {
			serr = err
		}
	}()
	fired := false
	restore := netpoll.SetCtlFault(func(_, op, cfd int, events uint32) unix.Errno {
		if cfd == fd && op == unix.EPOLL_CTL_MOD && events&unix.EPOLLET != 0 && !fired {
			// goCold's restore (dropHot): d.hotw is nil, clearInq to come.
			fired = true
			close(user)
			select {
			case <-userDone:
			case <-stop:
			}
		}
		return 0
	})
	goCold(t, s, stop)
	restore()
	if !fired {
		t.Fatal("the connection went cold without its restore's EPOLL_CTL_MOD")
	}
	<-userDone
	if serr != nil {
		t.Fatal(serr)
	}
	if seen != 0 {
		t.Errorf("user code that had the fd as the connection went cold found TCP_INQ %d, the library's; want 0", seen)
	}
	v, err := unix.GetsockoptInt(fd, unix.SOL_TCP, unix.TCP_INQ)
	if err != nil {
		t.Fatal(err)
	}
	if v != 1 {
		t.Errorf("user code set TCP_INQ as the connection went cold, and the library's clearInq turned it off: %d, want 1", v)
	}
	// The connection still serves.
	echoN(t, c, "after", 2)
}

var _ net.Conn // net: kept for the tests below
