//go:build !linux

package main

import (
	"errors"
	"fmt"
	"runtime"
)

// selfUsage returns an error wrapping errors.ErrUnsupported: only Linux is
// supported.
func selfUsage() (processUsage, error) {
	return processUsage{}, fmt.Errorf("process usage on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
