package netpoll

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchRig is a watch port on a bare epoll instance E1 holding one eventfd
// (edge-triggered: every write is an event on E1), and a third epoll
// instance, the mirror, holding the port edge-triggered as the runtime's
// netpoller does: an edge on the mirror is what would wake a goroutine
// parked on the port, so tests read the kernel's answer without waiting.
type watchRig struct {
	t      *testing.T
	p      *poller
	w      *watchPort
	evfd   int
	mirror int
}

func newWatchRig(t *testing.T) *watchRig {
	t.Helper()
	r := &watchRig{t: t, p: &poller{epfd: -1}, evfd: -1, mirror: -1}
	t.Cleanup(r.close)
	var err error
	if r.p.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if r.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(r.evfd)}
	if err := unix.EpollCtl(r.p.epfd, unix.EPOLL_CTL_ADD, r.evfd, &ev); err != nil {
		t.Fatal(err)
	}
	if r.w, err = newWatchPort(r.p); err != nil {
		t.Fatal(err)
	}
	if r.mirror, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	ev = unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(r.w.fd)}
	if err := unix.EpollCtl(r.mirror, unix.EPOLL_CTL_ADD, r.w.fd, &ev); err != nil {
		t.Fatal(err)
	}
	r.wantEdge("the mirror's first look (nothing happened yet)", false)
	return r
}

func (r *watchRig) close() {
	if r.w != nil {
		r.w.close()
	}
	for _, fd := range []*int{&r.mirror, &r.evfd, &r.p.epfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// event makes an event on E1.
func (r *watchRig) event() {
	r.t.Helper()
	if _, err := unix.Write(r.evfd, []byte{1, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		r.t.Fatal(err)
	}
}

// drainE1 reports E1's pending event, as the poller's poll does.
func (r *watchRig) drainE1() {
	r.t.Helper()
	evs := make([]unix.EpollEvent, 4)
	if n, err := unix.EpollWait(r.p.epfd, evs, 0); err != nil || n != 1 {
		r.t.Fatalf("epoll_wait(E1, 0) = %d, %v; want the eventfd's event", n, err)
	}
}

func (r *watchRig) arm() {
	r.t.Helper()
	if err := r.w.arm(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *watchRig) disarm() {
	r.t.Helper()
	if err := r.w.disarm(); err != nil {
		r.t.Fatal(err)
	}
}

// wantEdge checks whether the port gave its watchers a new edge since the
// last look (the mirror's epoll_wait(0) returns it once, edge-triggered).
func (r *watchRig) wantEdge(what string, want bool) {
	r.t.Helper()
	evs := make([]unix.EpollEvent, 1)
	n, err := unix.EpollWait(r.mirror, evs, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	if got := n > 0; got != want {
		r.t.Errorf("%s: the port woke a watcher: %v, want %v", what, got, want)
	}
}

// wantFired checks what the poll-first poll of the port (fired) returns.
func (r *watchRig) wantFired(what string, want bool) {
	r.t.Helper()
	if got := r.w.fired(uintptr(r.w.fd)); got != want {
		r.t.Errorf("%s: epoll_wait(port, 0) fired: %v, want %v", what, got, want)
	}
}

// TestWatchPort pins the kernel behaviour the watch port stands on (the
// numbered list in watch_linux.go), by the events the kernel reports: the
// port's own epoll_wait(0), and the edges a mirror epoll instance gets from
// the port as the runtime's netpoller would. Then, through the runtime:
// arming a port with E1 ready wakes a goroutine parked in the port's
// RawRead, and a goroutine in E1's RawRead and one in the port's are each
// woken by their own registration.
func TestWatchPort(t *testing.T) {
	t.Run("1-disarmed", func(t *testing.T) {
		r := newWatchRig(t)
		r.event()
		r.wantEdge("an event on E1, the port disarmed", false)
		r.wantFired("an event on E1, the port disarmed", false)
	})
	t.Run("2-arm-fires-at-once", func(t *testing.T) {
		r := newWatchRig(t)
		r.event() // before the arm: the watcher's last look missed it
		r.arm()
		r.wantEdge("arm with an event on E1", true)
		r.wantFired("arm with an event on E1", true)
		// Armed with E1 quiet: the next event fires.
		r.drainE1()
		r.arm()
		r.wantEdge("arm with E1 quiet", false)
		r.event()
		r.wantEdge("an event after the arm", true)
		r.wantFired("an event after the arm", true)
	})
	t.Run("3-oneshot", func(t *testing.T) {
		r := newWatchRig(t)
		r.arm()
		r.event()
		r.wantEdge("the first event", true)
		r.wantFired("the first event", true)
		r.event()
		r.drainE1()
		r.event()
		r.wantEdge("events after the fire was reported", false)
		r.wantFired("events after the fire was reported", false)
		if n := r.p.st.load(cWatchArms); n != 1 {
			t.Errorf("%d arms counted, want 1", n)
		}
	})
	t.Run("4-arm-disarm", func(t *testing.T) {
		r := newWatchRig(t)
		r.arm()
		r.disarm()
		r.event()
		r.wantEdge("an event after arm and disarm", false)
		r.wantFired("an event after arm and disarm", false)
		// A fire nobody reported is not reported after a disarm.
		r.arm()
		r.wantEdge("arm with an event on E1", true)
		r.disarm()
		r.wantFired("a fire disarmed before it was reported", false)
		if a, d := r.p.st.load(cWatchArms), r.p.st.load(cWatchDisarms); a != 2 || d != 2 {
			t.Errorf("%d arms and %d disarms counted, want 2 and 2", a, d)
		}
	})
	t.Run("5-unreported-fire-trap", func(t *testing.T) {
		r := newWatchRig(t)
		r.event()
		r.arm()
		r.wantEdge("arm with an event on E1", true)
		// Nobody polls the port: the fire stays on its ready list. A new
		// arm, E1 still ready, gives no new edge: a watcher that parked
		// since the first edge without polling the port would sleep until
		// E1's next event.
		r.arm()
		r.wantEdge("a second arm, the first fire unreported", false)
		// The poll-first rule finds it.
		r.wantFired("the poll before parking", true)
		// Reported, the port works again.
		r.arm()
		r.wantEdge("an arm after the fire was reported", true)
		r.wantFired("an arm after the fire was reported", true)
	})
	t.Run("6-runtime", func(t *testing.T) {
		r := newWatchRig(t)
		stop := time.AfterFunc(time.Minute, func() { panic("TestWatchPort/6-runtime: a goroutine was never woken") })
		defer stop.Stop()

		// A watcher parks in the port's RawRead, polling first.
		calls := make(chan int, 1)
		watcher := make(chan error, 1)
		parked := make(chan struct{})
		go func() {
			n := 0
			watcher <- r.w.rc.Read(func(uintptr) bool {
				n++
				if r.w.fired(uintptr(r.w.fd)) {
					calls <- n
					return true
				}
				if n == 1 {
					close(parked)
				}
				return false
			})
		}()
		<-parked
		// E1 in the runtime too, and a holder in its RawRead.
		if err := unix.SetNonblock(r.p.epfd, true); err != nil {
			t.Fatal(err)
		}
		e1 := os.NewFile(uintptr(r.p.epfd), "e1")
		defer func() { e1.Close(); r.p.epfd = -1 }()
		rc, err := e1.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		holder := make(chan error, 1)
		holderIn := make(chan struct{})
		go func() {
			first := true
			holder <- rc.Read(func(uintptr) bool {
				// poll(2), not epoll_wait: E1's event stays for the
				// port's report (epoll_wait on the port polls E1 again
				// and reports nothing if E1 has been drained).
				fds := []unix.PollFd{{Fd: int32(r.p.epfd), Events: unix.POLLIN}}
				n, _ := unix.Poll(fds, 0)
				if first {
					first = false
					close(holderIn)
				}
				return n > 0
			})
		}()
		<-holderIn
		r.arm() // E1 quiet: nothing yet
		r.event()
		if err := <-holder; err != nil {
			t.Fatalf("the holder in E1's RawRead: %v", err)
		}
		if err := <-watcher; err != nil {
			t.Fatalf("the watcher in the port's RawRead: %v", err)
		}
		// Woken once by the fire: the poll on entry found nothing.
		if n := <-calls; n != 2 {
			t.Errorf("the watcher's callback ran %d times; want 2 (the poll on entry, the fire)", n)
		}
	})
}

// TestWatchPortCloseRacesArms races arm and disarm, as goroutines whose CAS
// on the role word came just before stop retired it make them, against the
// port's close, many times: no arm or disarm fails (an epoll_ctl on the
// closed fd would fail with EBADF, or reach whatever the fd's number was
// reused for), none is made once close has returned (the arm and disarm
// counts stand still), and under -race nothing races.
func TestWatchPortCloseRacesArms(t *testing.T) {
	const rounds, racers = 200, 4
	for round := range rounds {
		r := newWatchRig(t)
		w := r.w
		start := make(chan struct{})
		errs := make(chan error, racers)
		for i := range racers {
			go func() {
				<-start
				var err error
				for j := 0; j < 8 && err == nil; j++ {
					if (i+j)%2 == 0 {
						err = w.arm()
					} else {
						err = w.disarm()
					}
				}
				errs <- err
			}()
		}
		close(start)
		w.close()
		calls := w.p.st.c[cWatchArms-numOpCounters].Load() + w.p.st.c[cWatchDisarms-numOpCounters].Load()
		for range racers {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatalf("round %d: an arm or disarm racing close failed: %v", round, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: a racer is stuck", round)
			}
		}
		if got := w.p.st.c[cWatchArms-numOpCounters].Load() + w.p.st.c[cWatchDisarms-numOpCounters].Load(); got != calls {
			t.Fatalf("round %d: %d arms and disarms made after close returned", round, got-calls)
		}
		if err := w.arm(); err != nil {
			t.Fatalf("round %d: an arm after close: %v, want nothing done", round, err)
		}
		r.close()
	}
}
