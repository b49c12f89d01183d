// Package cref builds echo.c, the reference echo server in C for the
// cross-process benchmarks: one thread, edge-triggered epoll, and the
// command line and first output line of cmd/echoserver, so that the same
// scripts and cmd/loadgen drive it. It is the floor the Go servers are
// measured against.
package cref

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

//go:embed echo.c
var source []byte

// cflags are the flags echo.c is compiled with; it compiles without a
// warning under them.
var cflags = []string{"-O2", "-Wall", "-Wextra"}

// ErrNoCompiler reports that Build found no C compiler.
var ErrNoCompiler = errors.New("no C compiler (cc) on PATH: the C reference is skipped")

// Build compiles echo.c with cc into dir, which it creates if need be, and
// returns the path of the binary. The binary's name carries a hash of the
// source and flags, so a later Build with the same dir reuses it until
// echo.c changes. Without cc on PATH the error wraps ErrNoCompiler; on a
// system other than Linux it wraps errors.ErrUnsupported.
func Build(dir string) (path string, err error) {
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("cref: echo.c needs Linux (epoll, signalfd, timerfd): %w", errors.ErrUnsupported)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("cref: %w", ErrNoCompiler)
	}
	h := sha256.New()
	h.Write(source)
	h.Write([]byte(strings.Join(cflags, " ")))
	path = filepath.Join(dir, "echo-"+hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cref: %w", err)
	}
	// Compile to a temporary name and rename, so that a Build running at
	// the same time never sees, or runs, a half-written binary.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("cref: %w", err)
	}
	defer os.RemoveAll(tmp)
	src, bin := filepath.Join(tmp, "echo.c"), filepath.Join(tmp, "echo")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("cref: %w", err)
	}
	args := append(append([]string{}, cflags...), "-o", bin, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cref: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	if err := os.Rename(bin, path); err != nil {
		return "", fmt.Errorf("cref: %w", err)
	}
	return path, nil
}
