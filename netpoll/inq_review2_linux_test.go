package netpoll_test

import (
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Review tests for the fixes of the first TCP_INQ review (helper-30, of
// 7340162 and later): the library's TCP_INQ seen, or the user's own lost,
// by user code that has the fd as the connection goes cold
// (TestInqReview2ColdWindow: fixed by dropHot clearing it first) or as it
// closes (TestInqReview2CloseWindow: fixed by dropInqLocked's increfOpen,
// which reaches the socket while any reference keeps it open). The
// owner's clearInq they name is gone: dropHot and goHot's failure path
// clear the option while dropInq still finds the hot wait.

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
	if v := tcpInq(t, fd); v != 1 {
		t.Fatalf("TCP_INQ while hot: %d, want 1", v)
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
			// goCold's restore (dropHot), under armMu: when the review
			// wrote this, d.hotw was nil here and the owner's clear still
			// to come. The user's Control runs to its end here, or, should
			// it wait for armMu (as it does since the fix), until it
			// waits: then it runs after the clearing, which is what the
			// test asks.
			fired = true
			close(user)
			await(stop, func() bool {
				select {
				case <-userDone:
					return true
				default:
					return blockedInExposeRaw()
				}
			})
		}
		return 0
	})
	goCold(t, s, stop)
	restore()
	if !fired {
		t.Fatal("the connection went cold without its restore's EPOLL_CTL_MOD")
	}
	select {
	case <-userDone:
	case <-stop:
		t.Fatal("the user's Control never returned")
	}
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
		t.Errorf("user code set TCP_INQ as the connection went cold, and the library turned it off: %d, want 1", v)
	}
	// The connection still serves.
	echoN(t, c, "after", 2)
}

// blockedInExposeRaw reports whether a goroutine waits for a mutex inside
// desc.exposeRaw (dropInq's armMu).
func blockedInExposeRaw() bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(head, "[sync.Mutex.Lock") && strings.Contains(g, "netpoll.(*desc).exposeRaw(") {
			return true
		}
	}
	return false
}

// TestInqReview2CloseWindow: dropInq clears the option through
// dropInqLocked, which takes a reference of its own and leaves the option
// on when it cannot (a Close has begun): right for the owner, which holds
// none, but user code that is about to have the fd holds one already
// (Control, rawIO's begin, File's control), and its function runs all the
// same. So a File taken as another goroutine closes the Conn is a dup of
// a socket with the library's TCP_INQ on, which lives on after the Conn
// (the case TestInqReviewUserFd/hot/file-close fixed for a File taken
// before the Close). The window, between File's reference and dropInq's,
// is held open by a park of the handler's Read, whose arm (EPOLL_CTL_MOD
// under armMu) waits while File reaches dropInq and the Close begins.
// Once it is released, either File's dropInq takes armMu first and finds
// no reference to take, or the owner, its Read failed by the Close, goes
// cold first (dropHot, clearInq: closing, it leaves the option on) and
// dropInq then finds no hot wait: the option stays on either way. So
// skipping dropInqLocked's incref in dropInq alone fixes half the runs: the
// state "the library's TCP_INQ is on" must outlive d.hotw for user code
// with a reference to clear it.
func TestInqReview2CloseWindow(t *testing.T) {
	h := netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err == nil && string(buf[:n]) == "block" {
			_, err = c.Read(buf) // parks: nothing more comes
		} else if err == nil {
			_, err = c.Write(buf[:n])
		}
		return err
	})
	_, s, c, stop, closed := hotFixtureOf(t, "dispatch=hot,spin=off", h)
	heatAhead(t, s, c, stop)
	sc := serverSide(t, s, c)
	fd := netpoll.FD(sc)
	if v := tcpInq(t, fd); v != 1 {
		t.Fatalf("TCP_INQ while hot: %d, want 1", v)
	}
	inArm, release := make(chan struct{}), make(chan struct{})
	fired := false
	restore := netpoll.SetCtlFault(func(_, op, cfd int, events uint32) unix.Errno {
		if cfd == fd && op == unix.EPOLL_CTL_MOD && events&unix.EPOLLIN != 0 && events&unix.EPOLLONESHOT != 0 && !fired {
			// The handler's second Read arms for its park, armMu held.
			fired = true
			close(inArm)
			select {
			case <-release:
			case <-stop:
			}
		}
		return 0
	})
	defer restore()
	write(t, c, "block")
	select {
	case <-inArm:
	case <-stop:
		t.Fatal("the handler's Read never armed for its park")
	}
	type fileResult struct {
		f   *os.File
		err error
	}
	files := make(chan fileResult, 1)
	go func() {
		f, err := sc.(*netpoll.Conn).File()
		files <- fileResult{f, err}
	}()
	// Marked (exposeRaw) after File's reference: then dropInq, which
	// waits for armMu.
	if !await(stop, func() bool { return netpoll.Sticky(sc)&netpoll.StickyRaw != 0 }) {
		t.Fatal("File never marked the connection")
	}
	closeErr := make(chan error, 1)
	go func() { closeErr <- sc.Close() }()
	if !await(stop, func() bool { return netpoll.Closing(sc) }) {
		t.Fatal("Close never began")
	}
	close(release)
	var r fileResult
	select {
	case r = <-files:
	case <-stop:
		t.Fatal("File never returned")
	}
	if r.err != nil {
		t.Fatalf("File: %v (its reference was taken before the Close began)", r.err)
	}
	defer r.f.Close()
	select {
	case err := <-closeErr:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-stop:
		t.Fatal("Close never returned")
	}
	if !await(stop, func() bool { return closed.Load() == 1 }) {
		t.Fatal("the connection never closed")
	}
	if v := fileInq(t, r.f); v != 0 {
		t.Errorf("a File taken from a hot connection as it was closed has TCP_INQ %d, the library's; want 0", v)
	}
}
