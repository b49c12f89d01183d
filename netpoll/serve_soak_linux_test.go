package netpoll_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// The on-demand soak's size. The defaults keep `go test -race ./...`
// short; the full size, 9,000 connections in one process (both ends, two
// fds each, under the 20,000-fd limit):
//
//	cd netpoll && NETPOLL_SERVE_SOAK_CONNS=9000 go test -run TestServeSoak -v -timeout 1h .
const serveSoakConnsEnv = "NETPOLL_SERVE_SOAK_CONNS"

// TestServeSoak serves connections on demand in every registration mode,
// with short-read skipping on and off: each client idles a random time
// (so that most connections are idle at any moment), then sends a
// checksummed message of random size (sequence number, length, CRC-32,
// payload) in random segments, and checks the echo, for several rounds.
// The handler checks every message as it echoes it. Nothing may be lost,
// corrupted or left hanging, and Shutdown and Group.Close must leave no
// goroutine and no fd.
func TestServeSoak(t *testing.T) {
	conns := 400
	if raceEnabled {
		conns = 150
	}
	conns = envInt(t, serveSoakConnsEnv, conns)
	const rounds, slack = 6, 64
	limit := raiseFDLimit(t, uint64(2*conns+slack+countFDs(t)))
	if fit := (int(limit) - countFDs(t) - slack) / 2; conns > fit {
		t.Logf("RLIMIT_NOFILE %d fits %d connections, not %d", limit, fit, conns)
		conns = fit
	}
	initRuntimePoller(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("%d connections × %d messages per configuration, seed %d", conns, rounds, seed)
	eachServeConfig(t, func(t *testing.T, cfg netpoll.Config) {
		serveSoak(t, cfg, conns, rounds, seed)
	})
}

// TestServeSoakBlocking is the soak with handlers that block outside
// netpoll (a sleep of up to 2 ms before one echo in three, as a backend call
// would), at GOMAXPROCS 1 and 2, with connections served hot (the default,
// with spinning and without), handlers run inline (dispatch=inline, with
// spinning and without), on the poller's loop (dispatch=loop) and on a
// goroutine per call (dispatch=go): the role passes on while a handler
// sleeps (the loop's watchdog takes it), connections are demoted and promoted,
// batches spread to workers. Nothing may be lost or left hanging, and
// Shutdown and Group.Close must leave no goroutine (the pool's workers and
// watcher included) and no fd.
func TestServeSoakBlocking(t *testing.T) {
	conns := 120
	if raceEnabled {
		conns = 60
	}
	const rounds = 6
	initRuntimePoller(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("%d connections × %d messages per configuration, seed %d", conns, rounds, seed)
	for _, procs := range []int{1, 2} {
		for _, exp := range []string{"", "spin=off", "dispatch=inline", "dispatch=inline,spin=off", "dispatch=go", "wait=block,dispatch=loop"} {
			t.Run(fmt.Sprintf("procs=%d/%s", procs, exp), func(t *testing.T) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				serveSoakWith(t, cfgOf(t, exp), conns, rounds, seed, true)
			})
		}
	}
}

func serveSoak(t *testing.T, cfg netpoll.Config, conns, rounds int, seed uint64) {
	serveSoakWith(t, cfg, conns, rounds, seed, false)
}

func serveSoakWith(t *testing.T, cfg netpoll.Config, conns, rounds int, seed uint64, blocking bool) {
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)
	stopWatchdog, stop := watchdog(t, 5*time.Minute)
	done := sync.OnceFunc(stopWatchdog)
	defer done()
	g, err := netpoll.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var bad atomic.Int64
	var sessions atomic.Uint64
	s := &netpoll.Server{NewHandler: func(c net.Conn) netpoll.Handler {
		ss := &soakSession{br: bufio.NewReaderSize(c, 512), bad: &bad}
		if blocking {
			ss.rng = rand.New(rand.NewPCG(seed, sessions.Add(1)))
		}
		return ss
	}}
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	var wg sync.WaitGroup
	var echoed, bytesEchoed atomic.Int64
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, b, err := serveSoakClient(l.Addr().String(), seed+uint64(i), rounds, stop)
			echoed.Add(n)
			bytesEchoed.Add(b)
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, ho, in := s.Stats(), readHandOffs(t, s), readInline(t, g, s)
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, netpoll.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	g.Close()
	if n := bad.Load(); n != 0 {
		t.Errorf("the server saw %d corrupt messages", n)
	}
	if n := echoed.Load(); n != int64(conns*rounds) {
		t.Errorf("%d messages echoed, want %d", n, conns*rounds)
	}
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds open after Shutdown and Group.Close, want %d", n, fds)
	}
	done() // the watchdog's goroutine
	awaitGoroutines(t, goroutines)
	t.Logf("%d messages, %d bytes echoed and checked, 0 lost; handler calls %d, hand-offs %d (checks %d, skips %d); inline %+v",
		echoed.Load(), bytesEchoed.Load(), st.HandlerRuns, ho.HandOffs, ho.Checks, ho.Skips, in)
}

// soakSession echoes the soak's messages, checking each; with rng, it
// sleeps up to 2 ms before one echo in three (TestServeSoakBlocking).
type soakSession struct {
	br  *bufio.Reader
	bad *atomic.Int64
	rng *rand.Rand
}

func (ss *soakSession) ServeConn(c net.Conn) error {
	for {
		var hdr [soakHeader]byte
		if _, err := io.ReadFull(ss.br, hdr[:]); err != nil {
			return err
		}
		msg := make([]byte, soakHeader+int(binary.LittleEndian.Uint32(hdr[4:])))
		copy(msg, hdr[:])
		if _, err := io.ReadFull(ss.br, msg[soakHeader:]); err != nil {
			return err
		}
		if crc32.ChecksumIEEE(msg[soakHeader:]) != binary.LittleEndian.Uint32(hdr[8:]) {
			ss.bad.Add(1)
			return errors.New("corrupt message")
		}
		if ss.rng != nil && ss.rng.IntN(3) == 0 {
			time.Sleep(time.Duration(ss.rng.IntN(2000)) * time.Microsecond) // the behaviour under test: a handler blocked outside netpoll
		}
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if ss.br.Buffered() == 0 {
			return nil
		}
	}
}

// serveSoakClient sends rounds messages on one connection, each after a random
// idle time, in random segments, and checks each echo.
func serveSoakClient(addr string, seed uint64, rounds int, stop <-chan struct{}) (n, bytesEchoed int64, err error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(seed, 11))
	for r := range rounds {
		idle := time.NewTimer(time.Duration(rng.IntN(20)) * time.Millisecond) // the workload: idling
		select {
		case <-idle.C:
		case <-stop:
			return n, bytesEchoed, errors.New("watchdog")
		}
		payload := make([]byte, 1+rng.IntN(16<<10))
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		msg := make([]byte, soakHeader, soakHeader+len(payload))
		binary.LittleEndian.PutUint32(msg[0:], uint32(r))
		binary.LittleEndian.PutUint32(msg[4:], uint32(len(payload)))
		binary.LittleEndian.PutUint32(msg[8:], crc32.ChecksumIEEE(payload))
		msg = append(msg, payload...)
		c.SetDeadline(time.Now().Add(time.Minute))
		for rest := msg; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(4<<10))
			if _, err := c.Write(rest[:k]); err != nil {
				return n, bytesEchoed, err
			}
			rest = rest[k:]
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return n, bytesEchoed, fmt.Errorf("message %d: reading the echo: %w", r, err)
		}
		if !bytes.Equal(got, msg) {
			return n, bytesEchoed, fmt.Errorf("message %d: the echo differs", r)
		}
		n++
		bytesEchoed += int64(len(payload))
	}
	return n, bytesEchoed, nil
}
