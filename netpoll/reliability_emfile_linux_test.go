package netpoll_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestFaultAcceptOutOfFDs runs the process out of fds (a low RLIMIT_NOFILE,
// the rest taken by dups) with connections waiting to be accepted. The
// listener must back off (Stats.AcceptBackoffs grows) without a busy loop:
// its poller's epoll_wait calls and wakeups stay bounded while back-offs go
// on. Existing connections are still served, and once fds are freed every
// waiting connection is accepted and works.
func TestFaultAcceptOutOfFDs(t *testing.T) {
	type tc struct {
		name string
		cfg  netpoll.Config
	}
	var cases []tc
	for _, mode := range modes {
		for _, wait := range []netpoll.Wait{netpoll.WaitNested, netpoll.WaitBlock} {
			cases = append(cases, tc{fmt.Sprintf("mode=%s/wait=%s", mode, wait), netpoll.Config{Mode: mode, Wait: wait}})
		}
	}
	cases = append(cases,
		tc{"sharing=exclusive/pollers=2", netpoll.Config{Pollers: 2, Sharing: netpoll.Exclusive, Wait: netpoll.WaitBlock}},
		tc{"sharing=wakeall/pollers=2", netpoll.Config{Pollers: 2, Sharing: netpoll.WakeAll}},
		tc{"sharing=reuseport/pollers=2", netpoll.Config{Pollers: 2, Sharing: netpoll.ReusePort, Mode: netpoll.LevelTriggered}})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(t, tt.cfg)
			l := listen(t, g, "tcp")
			by := newBystander(t, g, l)
			done, expired := watchdog(t, time.Minute)
			defer done()
			accepted := make(chan net.Conn, 16)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			if !netpoll.AwaitReadState(l, "waiting", expired) {
				t.Fatal("Accept never parked")
			}
			const pending = 4
			var socks []int
			for range pending {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				socks = append(socks, fd)
				defer unix.Close(fd)
			}
			sa := &unix.SockaddrInet4{Port: l.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}

			// Out of fds: the soft limit just above what is open, and the
			// gap filled. From here until the fds are freed, nothing in the
			// test may open one (no countFDs, no t.TempDir).
			free := exhaustFDs(t, socks[0])
			defer free()

			before := g.Stats().Total
			for _, fd := range socks {
				if err := unix.Connect(fd, sa); err != nil { // the kernel completes it into the backlog
					free()
					t.Fatalf("connect: %v", err)
				}
			}
			awaitBackoffs := func(want uint64) netpoll.PollerStats {
				for {
					s := g.Stats().Total
					if s.AcceptBackoffs >= want {
						return s
					}
					select {
					case <-expired:
						free()
						t.Fatalf("accept back-offs %d, want %d: the listener never ran out of fds? (stats %+v)", s.AcceptBackoffs, want, s)
					default:
						runtime.Gosched()
					}
				}
			}
			// Back-offs double from 5ms: the third starts after 35ms, when
			// a level-triggered poller has long stopped repeating the event.
			s1 := awaitBackoffs(before.AcceptBackoffs + 3)
			s2 := awaitBackoffs(s1.AcceptBackoffs + 2)
			backoffs, waits, wakeups := s2.AcceptBackoffs-s1.AcceptBackoffs, s2.EpollWaits-s1.EpollWaits, s2.Wakeups-s1.Wakeups
			if waits > 2*backoffs+4 || wakeups > 2*backoffs+4 {
				t.Errorf("during %d accept back-offs the pollers made %d epoll_wait calls and %d wakeups: a busy loop", backoffs, waits, wakeups)
			}
			select {
			case <-accepted:
				t.Error("accepted a connection while out of fds")
			default:
			}
			by.check(t, "while out of fds")
			free()

			for i, fd := range socks {
				if _, err := unix.Write(fd, []byte{byte(i)}); err != nil {
					t.Fatal(err)
				}
			}
			seen := make([]bool, pending)
			for i := range pending {
				c := awaitResult(t, accepted, expired, fmt.Sprintf("Accept of waiting connection %d after fds were freed", i))
				c.SetReadDeadline(time.Now().Add(time.Minute))
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err != nil || int(b[0]) >= pending || seen[b[0]] {
					t.Errorf("accepted connection %d: read %v, %v; want a byte one of the waiting clients sent", i, b, err)
				} else {
					seen[b[0]] = true
				}
				c.Close()
			}
			after := g.Stats().Total
			if got := after.Accepts - before.Accepts; got != pending {
				t.Errorf("Stats: %d accepts after recovery, want %d", got, pending)
			}
			t.Logf("out of fds: %d back-offs, %d epoll_wait calls in all (%d during the last %d back-offs, %d wakeups); %d connections accepted after recovery",
				s2.AcceptBackoffs-before.AcceptBackoffs, s2.EpollWaits-before.EpollWaits, waits, backoffs, wakeups, pending)
		})
	}
}

// TestNewOutOfFDs: New run out of fds returns an error wrapping EMFILE,
// whether it fails at its first poller or midway (free fds for two of
// three pollers), and leaves no goroutine, fd or SpinAuto refresher
// behind; with fds back, New works again. The default config (SpinAuto)
// opens two pipes to measure the wakeup cost before its first poller.
func TestNewOutOfFDs(t *testing.T) {
	warm, err := netpoll.New(netpoll.Config{}) // the runtime's poller and W, initialised
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	for _, tt := range []struct {
		name string
		cfg  netpoll.Config
		free int // fds left free: 0 fails at once; 5 lets two auto pollers start
	}{
		{"auto/first", netpoll.Config{}, 0},
		{"auto/midway", netpoll.Config{Pollers: 3}, 5},
		{"fixed/first", netpoll.Config{SpinPolicy: netpoll.SpinFixed}, 0},
		{"fixed/midway", netpoll.Config{Pollers: 3, SpinPolicy: netpoll.SpinFixed}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			goroutines, fds := runtime.NumGoroutine(), countFDs(t)
			var old unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
				t.Fatal(err)
			}
			low := unix.Rlimit{Cur: uint64(fds + 16), Max: old.Max}
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
				t.Fatal(err)
			}
			var fillers []int
			for {
				fd, err := unix.Dup(0)
				if err == unix.EMFILE {
					break
				}
				if err != nil {
					t.Fatalf("dup: %v", err)
				}
				fillers = append(fillers, fd)
			}
			for _, fd := range fillers[len(fillers)-tt.free:] {
				unix.Close(fd)
			}
			fillers = fillers[:len(fillers)-tt.free]
			g, err := netpoll.New(tt.cfg)
			for _, fd := range fillers {
				unix.Close(fd)
			}
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
				t.Errorf("restoring RLIMIT_NOFILE: %v", err)
			}
			if g != nil {
				g.Close()
			}
			if !errors.Is(err, unix.EMFILE) {
				t.Fatalf("New with %d free fds: %v, want an error wrapping EMFILE", tt.free, err)
			}
			awaitGoroutines(t, goroutines)
			if n := countFDs(t); n != fds {
				t.Errorf("%d fds open after the failed New, %d before", n, fds)
			}
			g, err = netpoll.New(tt.cfg)
			if err != nil {
				t.Fatalf("New with fds back: %v", err)
			}
			g.Close()
		})
	}
}

// exhaustFDs puts the process out of fds: the soft RLIMIT_NOFILE just above
// what is open, and the gap filled with dups of sock. Until free is
// called, nothing may open an fd (no countFDs, no t.TempDir). free closes
// the fillers and restores the limit; it may be called more than once.
func exhaustFDs(t *testing.T, sock int) (free func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: uint64(countFDs(t) + 16), Max: old.Max}
	var fillers []int
	freed := false
	free = func() {
		if freed {
			return
		}
		freed = true
		for _, fd := range fillers {
			unix.Close(fd)
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for {
		fd, err := unix.Dup(sock)
		if err == unix.EMFILE {
			return free
		}
		if err != nil {
			free()
			t.Fatalf("dup: %v", err)
		}
		fillers = append(fillers, fd)
	}
}
