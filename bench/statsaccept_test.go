package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aclements/go-moremath/stats"
	"golang.org/x/sys/unix"

	"github.com/edgepoll/edgepoll/netpoll"
)

// BenchmarkStatsAccept asks whether reading a group's counters stalls
// Accept: 18,000 idle connections (idleConns; 1,000 under -short;
// NETPOLL_IDLE_CONNS sets another count) held on a server by a child
// process, as BenchmarkIdleGC holds them, while a second child dials the
// server's other listener and closes each connection once the server
// has accepted and closed it (churnDialers at a time, each reset on
// close). One op is one connection accepted and closed. A run alternates
// windows of statsWindow without Stats calls (off) and with a goroutine
// calling Group.Stats every statsEvery (stats), so that each run, one
// -count repetition, is a round that measures both under the same load:
// the host's drift between rounds cancels in the round's ratio. It
// reports accepts per second in each (off-accepts/s, stats-accepts/s),
// their ratio (stats/off: 1 when a scrape costs Accept nothing), and what
// a scrape costs by itself: the Stats calls' median and longest durations
// and how many the run made. A run shorter than two windows reports no
// ratio. After the last round it prints the rounds' paired ratio and its
// 95% interval (printPaired).
//
// Every -count repetition runs the sub-benchmark again over the same
// server and idle connections: they are set up once, in the top-level
// function, which package testing runs once however many repetitions
// are asked for (sub-benchmarks of a top-level benchmark repeat inside it;
// that is also why off and stats are windows of one sub-benchmark and not
// two sub-benchmarks, which -count would run as all of one, then all of
// the other). See doc.go for the command.
func BenchmarkStatsAccept(b *testing.B) {
	def := idleConns
	if testing.Short() {
		def = shortIdleConns
	}
	idle, err := idleConnCount(def)
	if err != nil {
		b.Fatal(err)
	}
	s := startStatsAccept(b, idle)
	name := fmt.Sprintf("idle=%d/stats=%v", idle, statsEvery)
	// Package testing starts every repetition with a run of one op, then
	// runs more until the benchmark time is spent, and reports the last:
	// a run of one op opens a round, and each run replaces the round's
	// ratio, so that the round keeps the reported run's.
	var rounds []float64
	b.Run(name, func(b *testing.B) {
		if b.N == 1 || len(rounds) == 0 {
			rounds = append(rounds, math.NaN())
		}
		first := s.runs % 2 // whose window comes first alternates from run to run
		s.runs++
		b.ResetTimer()
		r, err := s.measure(b.N, first, statsEvery, statsWindow)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		rounds[len(rounds)-1] = r.report(b)
	})
	printPaired(os.Stdout, name, rounds)
}

// printPaired prints the rounds' paired stats/off ratio as the issue's
// target reads it: the geometric mean of the rounds' ratios and its 95%
// interval (exp of the Student t-interval of the mean log ratio, as
// cmd/netpollbench's paired.go computes it). The line starts with neither
// "Benchmark" nor a lower-case key, so benchstat skips it.
func printPaired(w io.Writer, name string, rounds []float64) {
	var logs []float64
	for _, r := range rounds {
		if r > 0 { // false for NaN: a round too short for both windows
			logs = append(logs, math.Log(r))
		}
	}
	if len(logs) < 2 {
		return
	}
	mean, lo, hi := stats.MeanCI(logs, 0.95)
	fmt.Fprintf(w, "StatsAccept/%s paired over %d rounds: stats/off %.3f, 95%% interval [%.3f, %.3f]\n",
		name, len(logs), math.Exp(mean), math.Exp(lo), math.Exp(hi))
}

const (
	// shortIdleConns is BenchmarkStatsAccept's idle connections under
	// -short.
	shortIdleConns = 1000

	// statsEvery is how often the stats windows call Group.Stats: a
	// scrape every millisecond, far more often than any metrics system
	// asks, so that a stall shows.
	statsEvery = time.Millisecond

	// statsWindow is how long each window, off or stats, lasts: 50 Stats
	// calls per stats window, and 20 windows of each in a 2 s run.
	statsWindow = 50 * time.Millisecond

	// churnDialers is how many connections the dialing child keeps in
	// flight. More than one, so that the accept queue is rarely empty and
	// the server's accept loop, not the client, sets the pace; few enough
	// that the listen backlog never fills (a dropped SYN costs a second's
	// retransmission).
	churnDialers = 8
)

// Which window a figure belongs to.
const (
	phaseOff   = iota // no Stats calls
	phaseStats        // a goroutine calls Stats every statsEvery
)

// acceptServer is BenchmarkStatsAccept's server: a netpoll group with its
// default configuration and two loopback listeners, one for the idle
// connections, which it holds, and one for the dialed connections, which
// its accept loop closes at once. The dialed connections need a listener
// of their own: the kernel picks a connecting socket's port by scanning
// the ephemeral range for one whose (address, port) pair to that
// destination is free, even ports first, and 18,000 idle connections to
// the same listener take every even port of the default range (14,116 of
// 32768-60999), so each dial to it would scan them all (3 ms a dial on
// the machine this was written on) and the client, not Accept, would set
// the pace.
type acceptServer struct {
	g       *netpoll.Group
	l       net.Listener // the dialed connections'
	held    []net.Conn   // the idle connections, once startStatsAccept returns
	dialers *child       // the dialing child, running from startStatsAccept on
	runs    int          // runs of the sub-benchmark so far; the sub-benchmark's goroutines alone use it, one after another

	exited chan struct{} // closed when the accept loop returns; err is set then
	err    error         // why the accept loop returned

	mu       sync.Mutex    // guards the fields below; the accept loop takes it once per accept
	accepted uint64        // dialed connections accepted and closed
	goal     uint64        // when accepted reaches goal, reached is closed
	reached  chan struct{} // nil when nobody waits
}

// startStatsAccept starts the server, the idle child holding idle
// connections and the dialing child, and registers their teardown with
// tb.Cleanup. It skips where the machine cannot hold the connections.
func startStatsAccept(tb testing.TB, idle int) *acceptServer {
	// The server's fds: one per idle connection, the listeners, each
	// poller's epoll and wakeup fds, at most churnDialers dialed
	// connections being closed, stdio and the children's pipes. The idle
	// child raises its own limit to the same (holdIdleClients).
	if err := raiseNoFile(idle + 200); errors.Is(err, errFewFiles) {
		tb.Skip(err)
	} else if err != nil {
		tb.Fatal(err)
	}
	// Each idle connection keeps a port of the ephemeral range; a dialed
	// connection's port is free again as soon as its reset is sent.
	if ports, err := localPorts(); err != nil {
		tb.Fatal(err)
	} else if need := idle + 100; ports < need {
		tb.Skipf("ip_local_port_range holds %d ports, below the %d wanted", ports, need)
	}

	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	s := &acceptServer{g: g, exited: make(chan struct{})}
	var stopIdle func()
	// The server closes first, so that the TIME_WAIT of the idle
	// connections' closing is on its side (the listener's port) and no
	// client's ephemeral port waits in it.
	tb.Cleanup(func() {
		if s.l != nil {
			s.l.Close()
			<-s.exited
		}
		g.Close()
		if stopIdle != nil {
			stopIdle()
		}
	})
	il, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer il.Close() // once every idle connection is held, nothing more dials it
	heldc := make(chan error, 1)
	go func() { heldc <- s.hold(il, idle) }()
	tb.Cleanup(func() {
		// Say why the server gave up on the idle connections, when it
		// did and the idle child's failure ended the benchmark first.
		select {
		case err := <-heldc:
			if err != nil {
				tb.Error(err)
			}
		default:
		}
	})
	stopIdle = idleClients(tb, il.Addr().(*net.TCPAddr).Port, idle)
	// The idle child said ready once the server had echoed on every idle
	// connection; hold returns once it has them all.
	if err := <-heldc; err != nil {
		tb.Fatal(err)
	}

	if s.l, err = g.Listen(context.Background(), "tcp", "127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	go s.loop()
	port := s.l.Addr().(*net.TCPAddr).Port
	s.dialers = startChild(tb, dialClientsEnv, strconv.Itoa(port)+","+strconv.Itoa(churnDialers))
	tb.Cleanup(func() {
		if err := s.dialers.stop(); err != nil {
			tb.Errorf("dialing child: %v", err)
		}
	})
	return s
}

// hold accepts n connections from l, reads each one's byte and echoes it,
// and keeps them in s.held. If it fails, it closes l and the connection
// at hand, so that the idle child, waiting on one or the other, fails too
// instead of waiting for ever.
func (s *acceptServer) hold(l net.Listener, n int) (err error) {
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for range n {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err != nil {
			c.Close()
			return fmt.Errorf("idle connection's byte: %w", err)
		}
		if _, err := c.Write(one[:]); err != nil {
			c.Close()
			return fmt.Errorf("idle connection's echo: %w", err)
		}
		s.held = append(s.held, c)
	}
	return nil
}

// loop accepts dialed connections and closes them, until the listener
// closes.
func (s *acceptServer) loop() {
	defer close(s.exited)
	for {
		c, err := s.l.Accept()
		if err != nil {
			s.err = err
			return
		}
		c.Close()
		s.mu.Lock()
		s.accepted++
		if s.accepted == s.goal && s.reached != nil {
			close(s.reached)
			s.reached = nil
		}
		s.mu.Unlock()
	}
}

// count is how many dialed connections the server has accepted so far.
func (s *acceptServer) count() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// after returns a channel closed once the server has accepted n (> 0)
// more dialed connections.
func (s *acceptServer) after(n int) <-chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	s.goal = s.accepted + uint64(n)
	s.reached = ch
	s.mu.Unlock()
	return ch
}

// phases is one round's measurement.
type phases struct {
	accepts [2]uint64        // dialed connections accepted in each phase's windows
	elapsed [2]time.Duration // each phase's windows, summed
	calls   []time.Duration  // every Stats call's duration, in order
}

// measure waits until the server has accepted n more dialed connections,
// alternating windows of window, off and stats, starting with first; in
// the stats windows a goroutine calls Stats every every. It fails if the
// accept loop or the dialing child ends first.
func (s *acceptServer) measure(n, first int, every, window time.Duration) (phases, error) {
	var r phases
	reached := s.after(n)
	phase := first
	var sr *statsReader
	t0, c0 := time.Now(), s.count()
	begin := func() {
		if phase == phaseStats {
			sr = startStatsReader(s.g, every)
		}
	}
	// end closes the current window: the Stats goroutine's last call
	// counts in it, so it stops before the clock and the count are read.
	end := func() {
		if sr != nil {
			r.calls = append(r.calls, sr.stop()...)
			sr = nil
		}
		t, c := time.Now(), s.count()
		r.accepts[phase] += c - c0
		r.elapsed[phase] += t.Sub(t0)
		t0, c0 = t, c
	}
	begin()
	tick := time.NewTicker(window)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			end()
			phase = 1 - phase
			begin()
		case <-reached:
			end()
			return r, nil
		case <-s.exited:
			end()
			return r, fmt.Errorf("accept loop: %w", s.err)
		case <-s.dialers.exited:
			end()
			return r, fmt.Errorf("dialing child exited: %v", s.dialers.err)
		}
	}
}

// report reports r's figures as b's metrics, and returns the ratio
// stats/off, NaN if r lacks a window of either.
func (r phases) report(b *testing.B) float64 {
	rate := func(p int) float64 { return float64(r.accepts[p]) / r.elapsed[p].Seconds() }
	if r.elapsed[phaseOff] > 0 {
		b.ReportMetric(rate(phaseOff), "off-accepts/s")
	}
	if r.elapsed[phaseStats] > 0 {
		b.ReportMetric(rate(phaseStats), "stats-accepts/s")
	}
	ratio := math.NaN()
	if r.elapsed[phaseOff] > 0 && r.elapsed[phaseStats] > 0 && r.accepts[phaseOff] > 0 {
		ratio = rate(phaseStats) / rate(phaseOff)
		b.ReportMetric(ratio, "stats/off")
	}
	b.ReportMetric(float64(len(r.calls)), "stats-calls")
	if len(r.calls) > 0 {
		d := slices.Clone(r.calls)
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "stats-p50-ns")
		b.ReportMetric(float64(d[len(d)-1].Nanoseconds()), "stats-max-ns")
	}
	return ratio
}

// statsReader is a goroutine scraping a group on a ticker, as a metrics
// exporter would: Group.Stats and ReadStats of every statistic, timing
// each scrape.
type statsReader struct {
	stopc chan struct{}
	done  chan []time.Duration
}

func startStatsReader(g *netpoll.Group, every time.Duration) *statsReader {
	r := &statsReader{stopc: make(chan struct{}), done: make(chan []time.Duration, 1)}
	var all []netpoll.Sample
	for _, d := range netpoll.AllStats() {
		if !d.Server {
			all = append(all, netpoll.Sample{Name: d.Name})
		}
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		var calls []time.Duration
		for {
			select {
			case <-r.stopc:
				r.done <- calls
				return
			case <-t.C:
				t0 := time.Now()
				g.Stats()
				g.ReadStats(all)
				calls = append(calls, time.Since(t0))
			}
		}
	}()
	return r
}

// stop stops the goroutine, after the call in flight if any, and returns
// the calls' durations.
func (r *statsReader) stop() []time.Duration {
	close(r.stopc)
	return <-r.done
}

// TestStatsAcceptFixture runs BenchmarkStatsAccept's machinery small, so
// that CI keeps it working: the server holds the idle child's
// connections, the dialing child's are accepted and counted in one window
// or the other, and the dialing child runs without an error until asked
// to stop.
func TestStatsAcceptFixture(t *testing.T) {
	const idle, n = 100, 300
	s := startStatsAccept(t, idle)
	type result struct {
		r   phases
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.measure(n, phaseStats, time.Millisecond, 5*time.Millisecond)
		done <- result{r, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%d connections not accepted in a minute: %d were", n, s.count())
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if got := res.r.accepts[phaseOff] + res.r.accepts[phaseStats]; got < n {
		t.Errorf("the windows counted %d accepts, want at least %d", got, n)
	}
	if err := s.dialers.stop(); err != nil {
		t.Errorf("dialing child: %v", err)
	}
	s.l.Close()
	<-s.exited
	if !errors.Is(s.err, net.ErrClosed) {
		t.Errorf("accept loop ended with %v, want net.ErrClosed", s.err)
	}
	if len(s.held) != idle {
		t.Errorf("server holds %d idle connections, want %d", len(s.held), idle)
	}
}

// TestPrintPaired checks the paired line against ratios worked by hand:
// rounds without a ratio (NaN) are left out, and fewer than two rounds
// print nothing.
func TestPrintPaired(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name   string
		rounds []float64
		want   string
	}{
		{"none", nil, ""},
		{"one round", []float64{0.9, nan}, ""},
		{"equal rounds", []float64{0.5, nan, 0.5}, "StatsAccept/x paired over 2 rounds: stats/off 0.500, 95% interval [0.500, 0.500]\n"},
		// Logs -ln 1.1, 0, ln 1.1: mean 0, standard deviation ln 1.1,
		// t(0.975, 2 dof) 4.3027, so exp(±4.3027 ln 1.1 / sqrt 3).
		{"spread", []float64{1 / 1.1, 1, 1.1}, "StatsAccept/x paired over 3 rounds: stats/off 1.000, 95% interval [0.789, 1.267]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf strings.Builder
			printPaired(&buf, "x", tt.rounds)
			if got := buf.String(); got != tt.want {
				t.Errorf("printPaired(%v) = %q, want %q", tt.rounds, got, tt.want)
			}
		})
	}
}

// localPorts is the size of the kernel's ephemeral port range.
func localPorts() (int, error) {
	const path = "/proc/sys/net/ipv4/ip_local_port_range"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("%s: %q", path, b)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || hi < lo {
		return 0, fmt.Errorf("%s: %q", path, b)
	}
	return hi - lo + 1, nil
}

// dialClientsEnv starts the test binary as the dialing clients:
// "port,count".
const dialClientsEnv = "NETPOLL_DIAL_CLIENTS"

// churnClients is the dialing child: count goroutines each dial port,
// wait for the server to close the connection (it was accepted) and close
// their end, over and over, until stdin closes. SO_LINGER 0 makes each
// close a reset, so neither end waits in TIME_WAIT and the client's port
// is free at once: the churn never runs out of ephemeral ports.
func churnClients(v string) error {
	port, n, err := portCount(v)
	if err != nil {
		return err
	}
	failed := make(chan error, n)
	for range n {
		// A Sockaddr each: Connect writes its encoding into it.
		sa := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
		go func() { failed <- churn(sa) }()
	}
	fmt.Println("ready")
	eof := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, os.Stdin)
		eof <- err
	}()
	select {
	case err := <-eof:
		return err
	case err := <-failed:
		return err
	}
}

// churn dials sa and closes each connection once the server has, until a
// call fails.
func churn(sa unix.Sockaddr) error {
	for {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return os.NewSyscallError("socket", err)
		}
		err = dialOnce(fd, sa)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
}

// dialOnce connects fd to sa and reads until the server closes it.
func dialOnce(fd int, sa unix.Sockaddr) error {
	if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		return os.NewSyscallError("connect", err)
	}
	var one [1]byte
	for {
		n, err := unix.Read(fd, one[:])
		switch {
		case err == unix.EINTR:
			continue
		case n == 0 && err == nil, err == unix.ECONNRESET:
			return nil // the server accepted and closed it
		case err != nil:
			return os.NewSyscallError("read", err)
		}
		return fmt.Errorf("the server sent %d bytes on a dialed connection", n)
	}
}
