package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Running the check's children and reading what they print.

type checker struct {
	self   string
	rounds int
	out    io.Writer
}

// child runs itself with GODEBUG=godebug and env added to its environment,
// and returns its stdout and stderr.
func (c checker) child(godebug string, env, wrap []string, args ...string) (stdout, stderr []byte, err error) {
	argv := append(wrap, c.self, "child")
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), env...), "GODEBUG="+godebug)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("%q: %v\n%s", argv, err, e.Bytes())
	}
	return o.Bytes(), e.Bytes(), nil
}

// straced runs a child workload under strace -f with the given -e
// expression and hands the trace file to count before removing it.
func (c checker) straced(godebug, expr string, count func(trace string) error, args ...string) (stdout, stderr []byte, err error) {
	dir, err := os.MkdirTemp("", "edgepoll-check")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	trace := filepath.Join(dir, "strace.out")
	wrap := []string{"strace", "-f", "-qq", "-o", trace, "-e", expr}
	if stdout, stderr, err = c.child(godebug, nil, wrap, args...); err != nil {
		return nil, nil, err
	}
	return stdout, stderr, count(trace)
}

var statRE = regexp.MustCompile(`(?m)^edgepoll:.*$`)

// stat returns the named counter from the runtime's first netpollstats
// line.
func stat(stderr []byte, name string) (uint64, error) {
	lines := statLines(stderr)
	if len(lines) == 0 {
		return 0, fmt.Errorf("no edgepoll line in the child's stderr (is netpollstats=1 honoured?):\n%s", stderr)
	}
	return statIn(lines[0], name)
}

// statLines returns the runtime's netpollstats lines, in order: one when
// main returns, and one before it at each runtime.ReadMemStats.
func statLines(stderr []byte) []string {
	var lines []string
	for _, l := range statRE.FindAll(stderr, -1) {
		lines = append(lines, string(l))
	}
	return lines
}

// statIn returns the named counter from one netpollstats line.
func statIn(line, name string) (uint64, error) {
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %q", name, line)
}

// fields parses the named key=value integers of line.
func fields(line string, names ...string) (map[string]int, error) {
	kv := map[string]int{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("%s in %q: %v", k, line, err)
			}
			kv[k] = n
		}
	}
	for _, name := range names {
		if _, ok := kv[name]; !ok {
			return nil, fmt.Errorf("no %s in %q", name, line)
		}
	}
	return kv, nil
}
