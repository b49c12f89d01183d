//go:build !linux

package main

import (
	"errors"
	"fmt"
)

func runOnce(config) (*result, error) {
	return nil, fmt.Errorf("epoll: %w", errors.ErrUnsupported)
}
