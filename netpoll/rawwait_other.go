//go:build !unix && !windows

package netpoll

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
)

// Where package net cannot wait for readability without a read (plan9,
// js, wasip1): no poll(2), and no zero-byte receive.

var errNoWait = fmt.Errorf("waiting for readability without a read on %s: %w", runtime.GOOS, errors.ErrUnsupported)

// waitReadable fails with an error wrapping errors.ErrUnsupported.
func waitReadable(syscall.RawConn) error { return errNoWait }

// readable is the fallback's wait callback (rawWaiter.wait): done at once,
// so the handler is called again as soon as it returns, and its Read
// waits, holding its buffer. A hang-up is not told apart: the handler
// must return an error (such as io.EOF) when its Read gets one. On plan9,
// package net's RawConn.Read is not implemented, and the fallback closes
// each connection.
func (w *rawWaiter) readable(uintptr) bool {
	w.waited = true
	return true
}

// acceptRetries: none is known to pass with time here.
var acceptRetries []error
