// Package stream measures netpollshortread (patch 004) under the load its
// guard is for: one saturated HTTP/2 connection at GOMAXPROCS=2, whose
// reads are short all the time with the next frame already queued. Run it
// with the patched toolchain, the setting on and off in alternate rounds
// (run.sh), and compare with benchstat; with the stock toolchain both
// rounds measure stock Go.
package stream

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	streams = 8         // concurrent HTTP/2 streams on the one connection
	chunk   = 16 << 10  // bytes per round trip on a stream
	procs   = 2         // GOMAXPROCS: the guard is for a P with other work queued
	maxLat  = 100000000 // latencies kept per benchmark run, at most
)

// BenchmarkH2Stream: streams bidirectional HTTP/2 streams (h2c, package
// net's server and client in one process) each echo chunk-byte messages
// back to back, so that the server and the client always have frames
// queued. One op is one message's round trip on one stream; p50-ns and
// p99-ns are its latency. The name carries the setting the process runs
// under (GODEBUG), so that one benchstat table pairs the two.
func BenchmarkH2Stream(b *testing.B) {
	setting := "off"
	if strings.Contains(os.Getenv("GODEBUG"), "netpollshortread=1") {
		setting = "on"
	}
	b.Run(fmt.Sprintf("shortread=%s/streams=%d/chunk=%d", setting, streams, chunk), func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		h2Stream(b)
	})
}

func h2Stream(b *testing.B) {
	w, err := newWorkload()
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	b.ResetTimer()
	all, err := w.run(max(1, b.N/streams))
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
	b.SetBytes(2 * chunk / streams) // each op moves a chunk each way on one stream; ns/op is over all streams
}

// workload is the server, the client and the open streams.
type workload struct {
	srv *http.Server
	tr  *http.Transport
	ss  []stream
	msg []byte
}

type stream struct {
	w    *io.PipeWriter
	body io.ReadCloser
}

// newWorkload starts the server and opens the streams (one connection:
// HTTP/2 multiplexes them), with a warm-up round trip on each.
func newWorkload() (*workload, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	w := &workload{
		srv: &http.Server{Protocols: &protos, Handler: http.HandlerFunc(echo)},
		tr:  &http.Transport{Protocols: &protos},
		msg: bytes.Repeat([]byte("s"), chunk),
	}
	go w.srv.Serve(l)
	client := &http.Client{Transport: w.tr}
	for range streams {
		pr, pw := io.Pipe()
		req, err := http.NewRequest("POST", "http://"+l.Addr().String()+"/", pr)
		if err != nil {
			w.close()
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			w.close()
			return nil, err
		}
		w.ss = append(w.ss, stream{pw, resp.Body})
		if resp.ProtoMajor != 2 {
			w.close()
			return nil, fmt.Errorf("%s, want HTTP/2", resp.Proto)
		}
		if err := roundTrip(pw, resp.Body, w.msg, make([]byte, chunk)); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

func (w *workload) close() {
	for _, s := range w.ss {
		s.w.Close()
		s.body.Close()
	}
	w.tr.CloseIdleConnections()
	w.srv.Close()
}

// run makes per round trips on every stream at once and returns their
// latencies, sorted.
func (w *workload) run(per int) ([]time.Duration, error) {
	lat := make([][]time.Duration, len(w.ss))
	errs := make(chan error, len(w.ss))
	var wg sync.WaitGroup
	for i, s := range w.ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]byte, chunk)
			l := make([]time.Duration, 0, min(per, maxLat/streams))
			for range per {
				t0 := time.Now()
				if err := roundTrip(s.w, s.body, w.msg, got); err != nil {
					errs <- err
					return
				}
				if len(l) < cap(l) {
					l = append(l, time.Since(t0))
				}
			}
			lat[i] = l
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	return all, nil
}

// roundTrip writes msg on a stream and reads its echo into got.
func roundTrip(w io.Writer, r io.Reader, msg, got []byte) error {
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if _, err := io.ReadFull(r, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("the echo differs")
	}
	return nil
}

// echo copies a request's body back as it arrives, flushing each read.
func echo(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	buf := make([]byte, chunk)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestH2Stream runs the workload briefly, so that `go test ./...` proves
// it works: every echo of 64 round trips per stream arrives intact over
// HTTP/2.
func TestH2Stream(t *testing.T) {
	w, err := newWorkload()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	lat, err := w.run(64)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 64*streams {
		t.Errorf("%d round trips timed, want %d", len(lat), 64*streams)
	}
}
