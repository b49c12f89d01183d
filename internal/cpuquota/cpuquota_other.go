//go:build !linux

package cpuquota

import (
	"errors"
	"fmt"
)

var errUnsupported = fmt.Errorf("%w: cgroups are Linux only: %w", ErrUnavailable, errors.ErrUnsupported)

// Group is a cgroup whose processes share a CPU quota; there are none here.
type Group struct{}

// New checks frac and reports that this OS has no cgroups.
func New(frac float64) (*Group, error) {
	if _, err := quotaUS(frac); err != nil {
		return nil, err
	}
	return nil, errUnsupported
}

func (g *Group) Add(pid int) error   { return errUnsupported }
func (g *Group) Stat() (Stat, error) { return Stat{}, errUnsupported }
func (g *Group) Frac() float64       { return 0 }
func (g *Group) Close() error        { return nil }
