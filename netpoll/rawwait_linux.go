package netpoll

import "golang.org/x/sys/unix"

// fionread is FIONREAD for readiness (rawwait_unix.go): SIOCINQ on
// Linux, whose value x/sys/unix has for each architecture.
const fionread = unix.SIOCINQ
