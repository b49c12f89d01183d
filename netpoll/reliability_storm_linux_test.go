package netpoll_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestFaultDeadlineStorm moves the deadlines of parked readers (and of a
// parked writer) thousands of times a second. Each move wakes the park, which
// re-checks and parks again; no data may be lost, no timeout may come while
// every deadline is in the future, and when the last deadline is near, each
// reader times out after it, not before, then still reads what comes next.
func TestFaultDeadlineStorm(t *testing.T) {
	const readers, messages = 8, 50
	moves := 20000
	if raceEnabled {
		moves = 4000
	}
	for _, mode := range modes {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			g := newGroup(t, netpoll.Config{Mode: mode})
			l := listen(t, g, "tcp")
			by := newBystander(t, g, l)
			done, expired := watchdog(t, 2*time.Minute)
			defer done()
			clients, servers := make([]net.Conn, readers), make([]net.Conn, readers)
			for i := range readers {
				clients[i], servers[i] = pipe(t, g, l)
			}

			// storm moves every server's read deadline, far in the future
			// (or clears it), until stop is closed and it has made at least
			// least moves per conn, and reports how many moves it made and how
			// many times the readers parked meanwhile (each move that finds
			// a reader parked wakes it, and it parks again).
			storm := func(least int, stop <-chan struct{}) (n int, rate float64, parks uint64) {
				start, before := time.Now(), g.Stats().Total.ReadParks
				for i := 0; ; i++ {
					if i >= least {
						select {
						case <-stop:
							return i * readers, float64(i*readers) / time.Since(start).Seconds(), g.Stats().Total.ReadParks - before
						default:
						}
					}
					runtime.Gosched() // let the woken readers park again
					for _, s := range servers {
						dl := time.Now().Add(time.Hour + time.Duration(i))
						if i%7 == 0 {
							dl = time.Time{}
						}
						s.SetReadDeadline(dl)
					}
				}
			}

			// Phase 1: messages reach parked readers through the storm.
			var wg sync.WaitGroup
			errc := make(chan error, readers+1)
			for i, s := range servers {
				wg.Go(func() {
					var b [8]byte
					for k := range messages {
						if _, err := io.ReadFull(s, b[:]); err != nil {
							errc <- fmt.Errorf("reader %d, message %d: %w", i, k, err)
							return
						}
						if got := int(b[0]) | int(b[1])<<8; got != k {
							errc <- fmt.Errorf("reader %d: message %d arrived as %d", i, k, got)
							return
						}
					}
				})
			}
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				for k := range messages {
					for i, c := range clients {
						// Each message goes to a reader that is parked.
						if !netpoll.AwaitReadState(servers[i], "waiting", expired) {
							return
						}
						if _, err := c.Write([]byte{byte(k), byte(k >> 8), 0, 0, 0, 0, 0, 0}); err != nil {
							errc <- err
							return
						}
					}
				}
			}()
			n, rate, parks := storm(moves, sent)
			if !waitAll(&wg, expired) {
				t.Fatalf("readers hung in the storm (%d moves)", n)
			}
			close(errc)
			for err := range errc {
				t.Error(err)
			}
			t.Logf("phase 1: %d messages to each of %d parked readers through %d deadline moves (%.0f/s, %d read parks)", messages, readers, n, rate, parks)

			// Phase 2: parked readers, a storm, then a near deadline.
			type result struct {
				err error
				at  time.Time
			}
			results := make(chan result, readers)
			var parkedOnce sync.WaitGroup
			for _, s := range servers {
				go func() {
					_, err := s.Read(make([]byte, 1))
					results <- result{err, time.Now()}
				}()
				parkedOnce.Go(func() { netpoll.AwaitReadState(s, "waiting", expired) })
			}
			parkedOnce.Wait()
			stop := make(chan struct{})
			close(stop)
			n, rate, parks = storm(moves, stop)
			select {
			case r := <-results:
				t.Fatalf("a Read returned during a storm of future deadlines: %v", r.err)
			default:
			}
			final := time.Now().Add(20 * time.Millisecond)
			for _, s := range servers {
				s.SetReadDeadline(final)
			}
			for range readers {
				r := awaitResult(t, results, expired, "Read past its deadline")
				var ne net.Error
				if !errors.As(r.err, &ne) || !ne.Timeout() || !errors.Is(r.err, os.ErrDeadlineExceeded) {
					t.Errorf("Read past its deadline: %v, want a timeout wrapping os.ErrDeadlineExceeded", r.err)
				}
				wantOpError(t, "Read past its deadline", r.err, "read", os.ErrDeadlineExceeded)
				if r.at.Before(final) {
					t.Errorf("Read timed out %v before its deadline", final.Sub(r.at))
				}
			}
			t.Logf("phase 2: %d readers timed out after, not before, their deadline, following %d moves (%.0f/s, %d read parks)", readers, n, rate, parks)

			// Phase 3: with the deadline cleared, data still arrives.
			for i, s := range servers {
				s.SetReadDeadline(time.Time{})
				if _, err := clients[i].Write([]byte("after")); err != nil {
					t.Fatal(err)
				}
				b := make([]byte, 5)
				if _, err := io.ReadFull(s, b); err != nil || string(b) != "after" {
					t.Fatalf("Read after the timeouts = %q, %v", b, err)
				}
			}

			// A parked writer through a storm of write deadlines: every
			// byte arrives once the peer reads.
			w, r := servers[0], clients[0]
			payload := randomBytes(8<<20, 1)
			wres := make(chan ioResult, 1)
			go func() { n, err := w.Write(payload); wres <- ioResult{n, err} }()
			if !netpoll.AwaitWriteState(w, "waiting", expired) {
				t.Fatal("Write never parked")
			}
			start := time.Now()
			for i := range moves {
				w.SetWriteDeadline(time.Now().Add(time.Hour + time.Duration(i)))
			}
			rate = float64(moves) / time.Since(start).Seconds()
			got := make([]byte, len(payload))
			if _, err := io.ReadFull(r, got); err != nil {
				t.Fatal(err)
			}
			if res := awaitResult(t, wres, expired, "Write"); res.err != nil || res.n != len(payload) {
				t.Fatalf("Write through the storm = %d, %v; want %d, nil", res.n, res.err, len(payload))
			}
			if crc32.ChecksumIEEE(got) != crc32.ChecksumIEEE(payload) {
				t.Fatal("the parked writer's bytes arrived corrupted")
			}
			t.Logf("writer: %d MiB through %d write deadline moves (%.0f/s), intact", len(payload)>>20, moves, rate)
			by.check(t, "after the storms")
		})
	}
}

// TestFaultSlowReader: a peer that reads only once our writer has parked
// makes every write wait for EPOLLOUT. Stats count the write parks, and
// every byte arrives in order.
func TestFaultSlowReader(t *testing.T) {
	const size = 4 << 20
	payload := randomBytes(size, 2)
	for _, mode := range modes {
		t.Run("mode="+mode.String(), func(t *testing.T) {
			g := newGroup(t, netpoll.Config{Mode: mode})
			l := listen(t, g, "tcp")
			by := newBystander(t, g, l)
			reader, writer := stdPipe(t, l) // the slow reader is package net's, so the group counts only the writer
			done, expired := watchdog(t, 2*time.Minute)
			defer done()
			if err := writer.(*netpoll.Conn).SetWriteBuffer(32 << 10); err != nil {
				t.Fatal(err)
			}
			if err := reader.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
				t.Fatal(err)
			}
			before := g.Stats().Total
			res := make(chan ioResult, 1)
			var written atomic.Bool
			go func() {
				n, err := writer.Write(payload)
				written.Store(true)
				res <- ioResult{n, err}
			}()
			got, reads := 0, 0
			buf := make([]byte, 16<<10)
			for got < size {
				// Read only once the writer has parked (or finished).
				for netpoll.WriteState(writer) != "waiting" && !written.Load() {
					select {
					case <-expired:
						t.Fatalf("writer neither parked nor finished, %d of %d bytes read", got, size)
					default:
						runtime.Gosched()
					}
				}
				n, err := reader.Read(buf)
				if err != nil {
					t.Fatalf("after %d bytes: %v", got, err)
				}
				if !bytes.Equal(buf[:n], payload[got:got+n]) {
					t.Fatalf("bytes %d..%d arrived corrupted", got, got+n)
				}
				got += n
				reads++
			}
			if r := awaitResult(t, res, expired, "Write"); r.err != nil || r.n != size {
				t.Fatalf("Write = %d, %v; want %d, nil", r.n, r.err, size)
			}
			after := g.Stats().Total
			parks := after.WriteParks - before.WriteParks
			if parks == 0 {
				t.Fatalf("no write parked for EPOLLOUT (stats %+v)", after)
			}
			t.Logf("%d MiB to a slow reader: %d write parks for EPOLLOUT, %d reads, EPOLL_CTL_MOD %d, all bytes intact",
				size>>20, parks, reads, after.CtlMod-before.CtlMod)
			by.check(t, "after the slow reader")
		})
	}
}
