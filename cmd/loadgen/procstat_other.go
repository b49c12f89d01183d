//go:build !linux

package main

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

var errNoProcStat = fmt.Errorf("CPU and context switch counters on %s: %w", runtime.GOOS, errors.ErrUnsupported)

func selfCPU() (time.Duration, error) { return 0, errNoProcStat }

type procSample struct {
	cpu       time.Duration
	cpuSource string
	ctxsw     int64
}

func sampleProc(pid int) (procSample, error) { return procSample{}, errNoProcStat }

func cpuModel() string { return "" }

func readRSS(pid int) (int64, error) { return 0, errNoProcStat }

func readSlab() (int64, error) { return 0, errNoProcStat }

func portRange() (lo, hi int, err error) { return 0, 0, errNoProcStat }
