package main

import (
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// waiter is one thread in epoll_wait. Its counters belong to its goroutine
// until the goroutine is joined.
type waiter struct {
	epfd  int
	got   int64 // events taken
	empty int64 // wakeups that found the event already taken
}

// loop is a waiter's life: a thread of its own in epoll_wait(-1), taking one
// event per report of the source, until the stop eventfd is readable.
func (w *waiter) loop(x *experiment, ready *sync.WaitGroup) {
	// Never unlocked: the runtime ends the thread with the goroutine, so no
	// idle thread outlives the run.
	runtime.LockOSThread()
	ready.Done()
	var events [2]unix.EpollEvent // the source and the stop eventfd
	for {
		n, err := unix.EpollWait(w.epfd, events[:], -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			x.fail(os.NewSyscallError("epoll_wait", err))
			return
		}
		stop := false
		for _, ev := range events[:n] {
			if int(ev.Fd) == x.stopfd {
				stop = true
				continue
			}
			got, err := x.src.take(int(ev.Fd))
			if err != nil {
				x.fail(err)
				return
			}
			if !got {
				w.empty++
				continue
			}
			w.got++
			if x.delivered.Add(1) == int64(x.cfg.events) {
				close(x.done)
			}
		}
		if stop {
			return
		}
	}
}
