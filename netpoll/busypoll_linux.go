package netpoll

import (
	"errors"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// epollParams is the kernel's struct epoll_params (Linux 6.9+,
// include/uapi/linux/eventpoll.h), 8 bytes.
type epollParams struct {
	busyPollUsecs  uint32
	busyPollBudget uint16
	preferBusyPoll uint8
	pad            uint8 // must be zero
}

// busyPollBudget is packets per busy poll: the kernel's default
// (BUSY_POLL_BUDGET); above NAPI_POLL_WEIGHT would need CAP_NET_ADMIN.
const busyPollBudget = 8

// setBusyPoll turns on per-epoll kernel busy polling with EPIOCSPARAMS.
func setBusyPoll(epfd int, d time.Duration) error {
	usecs := uint32((d + time.Microsecond - 1) / time.Microsecond)
	p := epollParams{busyPollUsecs: usecs, busyPollBudget: busyPollBudget}
	// unsafe: the kernel reads sizeof(struct epoll_params) bytes at the
	// pointer during the call; p lives until the call returns, and the
	// conversion to uintptr is in the call expression, as the unsafe.Pointer
	// rules require for syscalls.
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(epfd), unix.EPIOCSPARAMS, uintptr(unsafe.Pointer(&p)))
	if errno == 0 {
		return nil
	}
	reason := "ioctl EPIOCSPARAMS: " + errno.Error()
	if errors.Is(errno, unix.ENOTTY) || errors.Is(errno, unix.EINVAL) {
		reason = "this kernel lacks per-epoll busy polling (EPIOCSPARAMS, Linux 6.9+): " + errno.Error()
	}
	return &ConfigError{"busypoll", d.String(), reason}
}

// busyPollParams reads the epoll fd's busy-poll settings (EPIOCGPARAMS).
func busyPollParams(epfd int) (usecs uint32, budget uint16, err error) {
	var p epollParams
	// unsafe: as in setBusyPoll; the kernel writes the 8-byte struct.
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(epfd), unix.EPIOCGPARAMS, uintptr(unsafe.Pointer(&p)))
	if errno != 0 {
		return 0, 0, errno
	}
	return p.busyPollUsecs, p.busyPollBudget, nil
}
