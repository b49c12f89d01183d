package netpoll_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// The soak's size. The defaults keep `go test -race ./...` short; the
// full-size run (45 configurations, about 10s each on 2 vCPUs):
//
//	cd netpoll && NETPOLL_SOAK_CONNS=10000 NETPOLL_SOAK_ROUNDS=20 go test -run TestSoak -v -timeout 2h .
//
// Both ends of every connection live in this process, two fds each; the
// test raises RLIMIT_NOFILE to fit, past the hard limit where it may
// (CAP_SYS_RESOURCE), and otherwise runs as many connections as the limit
// allows: with a hard limit of 20,000 that is 9,963, and the log says so.
// NETPOLL_SOAK_SEED replays a run (the seed is logged).
const (
	soakConnsEnv  = "NETPOLL_SOAK_CONNS"
	soakRoundsEnv = "NETPOLL_SOAK_ROUNDS"
	soakSeedEnv   = "NETPOLL_SOAK_SEED"

	soakHeader = 12       // sequence number, length, CRC-32 of the payload
	soakMaxMsg = 64 << 10 // payloads are 1 byte to 64 KiB

	// The race detector allows 8128 live goroutines; the soak uses two per
	// connection.
	soakRaceMaxConns = 3000
)

func soakDefaults() (conns, rounds int) {
	if raceEnabled {
		return 200, 20
	}
	return 1000, 20
}

// TestSoak runs connections concurrently through our listener and our Dial
// in every Mode × Sharing × Spin (two pollers; exclusive sharing with both
// thread wait strategies, the others nested), each doing round trips of 1 B
// to 64 KiB messages that both ends check by sequence number, CRC-32 and
// content. No byte may be lost or corrupted, no connection may hang (a lost
// wakeup would), and Group.Close must leave no goroutine and no fd behind.
func TestSoak(t *testing.T) {
	conns, rounds := soakDefaults()
	conns = envInt(t, soakConnsEnv, conns)
	rounds = envInt(t, soakRoundsEnv, rounds)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(soakSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", soakSeedEnv, s, err)
		}
	}
	if raceEnabled && conns > soakRaceMaxConns {
		t.Logf("race detector: %d connections, not %d (it allows 8128 goroutines)", soakRaceMaxConns, conns)
		conns = soakRaceMaxConns
	}
	const slack = 64 // fds the test binary and the group's pollers use besides the conns
	limit := raiseFDLimit(t, uint64(2*conns+slack+countFDs(t)))
	if fit := (int(limit) - countFDs(t) - slack) / 2; conns > fit {
		t.Logf("RLIMIT_NOFILE %d fits %d connections, not %d", limit, fit, conns)
		conns = fit
	}
	pool := make([]byte, 2*soakMaxMsg)
	prng := rand.New(rand.NewPCG(seed, 0))
	for i := 0; i < len(pool); i += 8 {
		binary.LittleEndian.PutUint64(pool[i:], prng.Uint64())
	}
	initRuntimePoller(t)
	t.Logf("%d connections × %d round trips per configuration, %s=%d", conns, rounds, soakSeedEnv, seed)

	var total soakTally
	var configs int // configurations run; seeds each one's message sizes
	start := time.Now()
	for _, mode := range modes {
		for _, sh := range sharings {
			waits := nestedWaits
			if sh == "exclusive" {
				waits = []string{"block"} // New refuses exclusive with nested pollers
			}
			for _, sp := range spins {
				for _, wait := range waits {
					if wait == "inline" && sp.budget {
						continue // New refuses a spin budget with wait=inline (TestNewRejectsOutOfRange)
					}
					cfg := cfgOf(t, join("mode="+mode, "pollers=2", "sharing="+sh, sp.set, "wait="+wait))
					name := fmt.Sprintf("mode=%s/sharing=%s/spin=%s/wait=%s", mode, sh, sp.name, wait)
					t.Run(name, func(t *testing.T) {
						r := soak(t, cfg, conns, rounds, pool, seed+uint64(configs))
						total.roundTrips += r.roundTrips
						total.bytes += r.bytes
						configs++
					})
				}
			}
		}
	}
	t.Logf("soak: %d configurations × %d connections: %d round trips, %d bytes (%.1f MiB) echoed and checked, 0 lost, 0 corrupted, in %v",
		configs, conns, total.roundTrips, total.bytes, float64(total.bytes)/(1<<20), time.Since(start).Round(time.Millisecond))
}

// spins are the spin settings every soak and leak test runs: never, a
// fixed budget, forever, and the default (adaptive, but with wait=block,
// where a poller never spins adaptively). name is the one the subtests
// had when these were Config fields; set is the NETPOLL setting, empty for
// the default; budget is a fixed budget, which wait=inline refuses.
var spins = []struct {
	name, set string
	budget    bool
}{
	{"0s", "spin=off", false},
	{"1ms", "spin=1ms", true},
	{"forever", "spin=forever", true},
	{"auto", "", false},
}

// soakTally counts one client's work: round trips and payload bytes sent
// and received back.
type soakTally struct {
	roundTrips, bytes int64
}

// soak runs one configuration and checks that closing its group left no fd
// and no goroutine behind.
func soak(t *testing.T, cfg netpoll.Config, conns, rounds int, pool []byte, seed uint64) soakTally {
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)
	start := time.Now()
	sum, st := soakRun(t, cfg, conns, rounds, pool, seed)
	elapsed := time.Since(start)
	if n := countFDs(t); n != fds {
		t.Errorf("%d fds open after Group.Close, want %d as before New", n, fds)
	}
	awaitGoroutines(t, goroutines)
	accepts := make([]uint64, len(st.Pollers))
	for i, p := range st.Pollers {
		accepts[i] = p.Accepts
	}
	t.Logf("%d conns: %d round trips, %d bytes (%.1f MiB) echoed, 0 lost, 0 corrupted, in %v; parks read %d write %d, ready tokens %d, EAGAIN %d, EPOLL_CTL_MOD %d, epoll_wait %d, accepts per poller %v; no fd or goroutine left",
		conns, sum.roundTrips, sum.bytes, float64(sum.bytes)/(1<<20), elapsed.Round(time.Millisecond),
		st.Total.ReadParks, st.Total.WriteParks, st.Total.ReadyTokens, st.Total.EAGAIN, st.Total.CtlMod, st.Total.EpollWaits, accepts)
	return sum
}

// soakRun dials conns connections to a listener of a new group, runs the
// round trips, closes everything and returns what was echoed and the
// group's counters.
func soakRun(t *testing.T, cfg netpoll.Config, conns, rounds int, pool []byte, seed uint64) (soakTally, netpoll.GroupStats) {
	g, err := netpoll.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Errorf("Group.Close: %v", err)
		}
	}()
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.Minute + time.Duration(conns*rounds)*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done, expired := watchdog(t, timeout)
	defer done()

	// The server: every accepted connection checks and echoes until EOF.
	served := make(chan error, conns)
	acceptDone := make(chan error, 1)
	go func() {
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					err = nil
				}
				if n != conns && err == nil {
					err = fmt.Errorf("accepted %d connections, want %d", n, conns)
				}
				acceptDone <- err
				return
			}
			go func() {
				err := soakEcho(c)
				if cerr := c.Close(); err == nil {
					err = cerr
				}
				served <- err
			}()
		}
	}()

	clients := make([]net.Conn, conns)
	sem := make(chan struct{}, 64) // dials in flight: stay under the accept backlog
	var dialing sync.WaitGroup
	var dialErr atomic.Pointer[error]
	for i := range clients {
		sem <- struct{}{}
		dialing.Go(func() {
			defer func() { <-sem }()
			c, err := g.Dial(ctx, "tcp", l.Addr().String())
			if err != nil {
				dialErr.CompareAndSwap(nil, &err)
				return
			}
			clients[i] = c
		})
	}
	dialing.Wait()
	if err := dialErr.Load(); err != nil {
		t.Fatalf("Dial: %v", *err)
	}

	progress := make([]atomic.Int64, conns) // round trips done per client
	tallies := make([]soakTally, conns)
	errc := make(chan error, conns)
	var running sync.WaitGroup
	for i, c := range clients {
		running.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
			r, err := soakClient(c, rng, pool, rounds, &progress[i])
			tallies[i] = r
			if err != nil {
				errc <- fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	if !waitAll(&running, expired) {
		stuck, example := 0, -1
		for i := range progress {
			if progress[i].Load() < int64(rounds) {
				stuck++
				example = i
			}
		}
		t.Fatalf("%d of %d connections hung (a lost wakeup?); conn %d after %d of %d round trips, its read side %s, write side %s; stats %+v",
			stuck, conns, example, progress[example].Load(), rounds, netpoll.ReadState(clients[example]), netpoll.WriteState(clients[example]), netpoll.Counters(g).Total)
	}
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	var sum soakTally
	for _, r := range tallies {
		sum.roundTrips += r.roundTrips
		sum.bytes += r.bytes
	}
	if want := int64(conns * rounds); sum.roundTrips != want {
		t.Errorf("%d round trips completed, want %d: %d lost", sum.roundTrips, want, want-sum.roundTrips)
	}

	for _, c := range clients {
		if err := c.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
	}
	for range conns {
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("server: %v", err)
			}
		case <-expired:
			t.Fatalf("server connections did not see the clients' EOF")
		}
	}
	l.Close()
	if err := <-acceptDone; err != nil {
		t.Error(err)
	}
	st := netpoll.Counters(g)
	if st.Total.Accepts != uint64(conns) {
		t.Errorf("Stats: %d accepts, want %d", st.Total.Accepts, conns)
	}
	return sum, st
}

// soakClient sends rounds messages of random sizes, each a random slice of
// pool, and checks the echo of each byte for byte and by CRC-32.
func soakClient(c net.Conn, rng *rand.Rand, pool []byte, rounds int, progress *atomic.Int64) (soakTally, error) {
	var tally soakTally
	var hdr, back [soakHeader]byte
	chunk := make([]byte, 4<<10)
	for seq := range rounds {
		n := min(soakMaxMsg, 1+rng.IntN(1<<rng.IntN(17))) // log-uniform: as many small messages as large
		off := rng.IntN(len(pool) - n + 1)
		msg := pool[off : off+n]
		sum := crc32.ChecksumIEEE(msg)
		binary.LittleEndian.PutUint32(hdr[0:], uint32(seq))
		binary.LittleEndian.PutUint32(hdr[4:], uint32(n))
		binary.LittleEndian.PutUint32(hdr[8:], sum)
		if _, err := c.Write(hdr[:]); err != nil {
			return tally, err
		}
		if _, err := c.Write(msg); err != nil {
			return tally, err
		}
		if _, err := io.ReadFull(c, back[:]); err != nil {
			return tally, fmt.Errorf("round trip %d: reading the echo: %w", seq, err)
		}
		if back != hdr {
			return tally, fmt.Errorf("round trip %d: echoed header %x, sent %x", seq, back, hdr)
		}
		crc := uint32(0)
		for got := 0; got < n; {
			k := min(len(chunk), n-got)
			if _, err := io.ReadFull(c, chunk[:k]); err != nil {
				return tally, fmt.Errorf("round trip %d: reading the echo at byte %d of %d: %w", seq, got, n, err)
			}
			if !bytes.Equal(chunk[:k], msg[got:got+k]) {
				return tally, fmt.Errorf("round trip %d: echo corrupted in bytes %d..%d of %d", seq, got, got+k, n)
			}
			crc = crc32.Update(crc, crc32.IEEETable, chunk[:k])
			got += k
		}
		if crc != sum {
			return tally, fmt.Errorf("round trip %d: echo CRC-32 %08x, sent %08x", seq, crc, sum)
		}
		tally.roundTrips++
		tally.bytes += 2 * int64(n)
		progress.Add(1)
	}
	return tally, nil
}

// soakEcho checks each message's sequence number, length and CRC-32 and
// echoes it, until the client closes.
func soakEcho(c net.Conn) error {
	var hdr [soakHeader]byte
	for seq := uint32(0); ; seq++ {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("message %d: reading the header: %w", seq, err)
		}
		got, n, sum := binary.LittleEndian.Uint32(hdr[0:]), binary.LittleEndian.Uint32(hdr[4:]), binary.LittleEndian.Uint32(hdr[8:])
		if got != seq {
			return fmt.Errorf("message %d arrived numbered %d: lost or reordered", seq, got)
		}
		if n < 1 || n > soakMaxMsg {
			return fmt.Errorf("message %d: length %d out of range", seq, n)
		}
		buf := make([]byte, soakHeader+int(n))
		copy(buf, hdr[:])
		if _, err := io.ReadFull(c, buf[soakHeader:]); err != nil {
			return fmt.Errorf("message %d: reading %d bytes: %w", seq, n, err)
		}
		if crc := crc32.ChecksumIEEE(buf[soakHeader:]); crc != sum {
			return fmt.Errorf("message %d: CRC-32 %08x, header says %08x: corrupted", seq, crc, sum)
		}
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("message %d: echoing: %w", seq, err)
		}
	}
}

// waitAll waits for wg, or reports false once expired is closed.
func waitAll(wg *sync.WaitGroup, expired <-chan struct{}) bool {
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
		return true
	case <-expired:
		return false
	}
}

// envInt reads a positive integer knob from the environment.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// raiseFDLimit raises the soft RLIMIT_NOFILE to want, and the hard limit
// with it if the process may, until the test ends. It returns the soft
// limit now in force.
func raiseFDLimit(t *testing.T, want uint64) uint64 {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if old.Cur >= want {
		return old.Cur
	}
	lim := unix.Rlimit{Cur: want, Max: max(old.Max, want)}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		lim = unix.Rlimit{Cur: old.Max, Max: old.Max} // not allowed past the hard limit
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatalf("setrlimit: %v", err)
		}
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	})
	return lim.Cur
}

// initRuntimePoller makes the runtime open its own epoll instance now, so
// that fd counts taken later do not see it appear.
func initRuntimePoller(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
