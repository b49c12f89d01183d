package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/panjf2000/gnet/v2/pkg/logging"
)

// logger sends gnet's log to stderr: its default logger writes to stdout,
// whose first line belongs to the announce line. Debug is dropped.
type logger struct {
	mu sync.Mutex // guards w: event loops log concurrently
	w  io.Writer
}

var _ logging.Logger = (*logger)(nil)

func newLogger(w io.Writer) *logger { return &logger{w: w} }

func (l *logger) printf(level, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "gnet %s: %s\n", level, fmt.Sprintf(format, args...))
}

func (l *logger) Debugf(string, ...any)             {}
func (l *logger) Infof(format string, args ...any)  { l.printf("info", format, args...) }
func (l *logger) Warnf(format string, args ...any)  { l.printf("warn", format, args...) }
func (l *logger) Errorf(format string, args ...any) { l.printf("error", format, args...) }

// Fatalf does not return, like the zap logger it replaces.
func (l *logger) Fatalf(format string, args ...any) {
	l.printf("fatal", format, args...)
	os.Exit(1)
}
