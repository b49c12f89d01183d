package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// selfUsage returns the context switches and CPU time of the process.
func selfUsage() (processUsage, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return processUsage{}, os.NewSyscallError("getrusage", err)
	}
	u := processUsage{
		VoluntaryCtxSwitches:   int64(ru.Nvcsw),
		InvoluntaryCtxSwitches: int64(ru.Nivcsw),
		UserNanos:              ru.Utime.Nano(),
		SystemNanos:            ru.Stime.Nano(),
	}
	u.CtxSwitches = u.VoluntaryCtxSwitches + u.InvoluntaryCtxSwitches
	u.CPUNanos = u.UserNanos + u.SystemNanos
	return u, nil
}
