package main

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// errKind sorts request failures for the report.
type errKind int

const (
	kindConn    errKind = iota // write or read failed: reset, timeout, ...
	kindShort                  // connection ended before a full response
	kindCorrupt                // echo differs from the request
	kindSeq                    // intact echo of another request
	kindProto                  // HTTP response malformed, undelimited or closing
	kindStatus                 // HTTP status not 2xx
	numKinds
)

var kindNames = [numKinds]string{"conn", "short", "corrupt", "seq", "proto", "status"}

func (k errKind) String() string { return kindNames[k] }

func classify(err error) errKind {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return kindShort
	case errors.Is(err, loadproto.ErrCorrupt):
		return kindCorrupt
	case errors.Is(err, loadproto.ErrSeq):
		return kindSeq
	case errors.Is(err, errMalformed):
		return kindProto
	case errors.Is(err, errStatus):
		return kindStatus
	}
	return kindConn
}

// complete reports whether a failure of this kind came with a whole
// response, which then counts as a request and has a latency.
func (k errKind) complete() bool {
	return k == kindCorrupt || k == kindSeq || k == kindStatus
}

// A tally collects the outcomes of one connection's requests. The
// connection's goroutine owns it. responses and errs are atomic because the
// progress reporter reads them while the goroutine runs; the other fields
// are read after it has returned.
type tally struct {
	start, end time.Time // the measured window; earlier outcomes are warmup

	lat       *latency // of the complete responses in the window
	wake      *latency // open loop: how late sleeps for requests due in the window ended
	completed int64    // complete responses in the window, checked or not
	verified  int64    // of which passed the checks
	err       error    // the first failure

	responses atomic.Int64 // complete responses since warmup began
	errs      [numKinds]atomic.Int64
}

func newTally(start, end time.Time) *tally {
	return &tally{start: start, end: end, lat: newLatency(), wake: newLatency()}
}

// record notes the outcome of a request that was sent, or in the open loop
// was due, at sent and whose response was read, or failed, at now. It
// reports whether the connection goes on: not past the window's end, and
// not after a failure, which leaves the connection in an unknown state.
func (t *tally) record(sent, now time.Time, err error) bool {
	if err != nil && !now.Before(t.end) && errors.Is(err, os.ErrDeadlineExceeded) {
		return false // the run is over: the connection deadline is its end
	}
	complete := err == nil
	if err != nil {
		k := classify(err)
		t.errs[k].Add(1)
		if t.err == nil {
			t.err = err
		}
		complete = k.complete()
	}
	if complete {
		t.responses.Add(1)
		if !now.Before(t.start) && now.Before(t.end) {
			t.completed++
			t.lat.record(now.Sub(sent))
			if err == nil {
				t.verified++
			}
		}
	}
	return err == nil && now.Before(t.end)
}

// woke notes that a sleep until due ended at now.
func (t *tally) woke(due, now time.Time) {
	if !due.Before(t.start) && due.Before(t.end) {
		t.wake.record(now.Sub(due))
	}
}
