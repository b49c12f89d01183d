package main

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// usage is what the process has used up to a moment. RUSAGE_SELF sums every
// thread of the process, including those that have already exited.
type usage struct {
	at          time.Time
	user, sys   time.Duration
	voluntary   int64 // context switches in which a thread blocked
	involuntary int64 // context switches in which a thread was preempted
}

func readUsage() (usage, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return usage{}, os.NewSyscallError("getrusage", err)
	}
	return usage{
		at:          time.Now(),
		user:        time.Duration(ru.Utime.Nano()),
		sys:         time.Duration(ru.Stime.Nano()),
		voluntary:   ru.Nvcsw,
		involuntary: ru.Nivcsw,
	}, nil
}
