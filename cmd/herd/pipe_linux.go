package main

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// pipeSource is the kernel test's source: an event is one byte in a pipe.
// Both ends are non-blocking: the reader so that a waiter that lost the race
// gets EAGAIN, the writer so that it never blocks behind stalled waiters.
type pipeSource struct {
	r, w int
}

func newPipeSource() (*pipeSource, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	return &pipeSource{r: p[0], w: p[1]}, nil
}

func (s *pipeSource) fd(int) int { return s.r }

func (s *pipeSource) emit() error {
	b := [1]byte{'x'}
	_, err := unix.Write(s.w, b[:])
	if err != nil && err != unix.EAGAIN {
		return os.NewSyscallError("write", err)
	}
	return err
}

func (s *pipeSource) take(fd int) (bool, error) {
	var b [1]byte
	n, err := unix.Read(fd, b[:])
	switch {
	case err == unix.EAGAIN:
		return false, nil
	case err != nil:
		return false, os.NewSyscallError("read", err)
	case n == 0:
		return false, io.ErrUnexpectedEOF // the write end is open until close
	}
	return true, nil
}

func (s *pipeSource) close() error {
	return errors.Join(closeFD("pipe", s.r), closeFD("pipe", s.w))
}
