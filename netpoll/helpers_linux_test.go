package netpoll_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// The lab's axes are reached through Config.Experiment, in the NETPOLL
// syntax (ParseConfig): the tests spell them as that syntax does, so that a
// subtest's name ("mode=et/wait=nested") is the setting it runs.

// modes are the registration modes: edge-triggered, one-shot and
// level-triggered.
var modes = []string{"et", "oneshot", "lt"}

// nestedWaits are the waits on the runtime's netpoller: the default's and
// wait=inline, where the parking operation waits on the epoll fd itself.
var nestedWaits = []string{"nested", "inline"}

// cfgOf parses s, in the NETPOLL syntax, into a Config, and fails the test
// if it does not parse: a test's configuration is never silently the
// default.
func cfgOf(t testing.TB, s string) netpoll.Config {
	t.Helper()
	c, err := netpoll.ParseConfig(s)
	if err != nil {
		t.Fatalf("ParseConfig(%q): %v", s, err)
	}
	return c
}

// inExperiment reports whether setting, such as "mode=oneshot", is one of
// cfg's experiment settings: what a test asks of a Config that ParseConfig
// (cfgOf) made, whose Experiment holds each key once, canonical.
func inExperiment(cfg netpoll.Config, setting string) bool {
	return slices.Contains(strings.Split(cfg.Experiment, ","), setting)
}

// join joins NETPOLL settings with commas, leaving out empty ones.
func join(settings ...string) string {
	var b []string
	for _, s := range settings {
		if s != "" {
			b = append(b, s)
		}
	}
	return strings.Join(b, ",")
}

// newGroup starts a group and closes it when the test ends.
func newGroup(t testing.TB, cfg netpoll.Config) *netpoll.Group {
	t.Helper()
	g, err := netpoll.New(cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", cfg, err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// listen listens on a fresh local address of network ("tcp" or "unix").
func listen(t testing.TB, g *netpoll.Group, network string) net.Listener {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "sock")
	}
	l, err := g.Listen(context.Background(), network, addr)
	if err != nil {
		t.Fatalf("Listen(%s): %v", network, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pipe returns both ends of one connection on g: dialed and accepted.
func pipe(t testing.TB, g *netpoll.Group, l net.Listener) (client, server net.Conn) {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	c, err := g.Dial(context.Background(), l.Addr().Network(), l.Addr().String())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	client = c // not before the check: a nil *Conn in a net.Conn is not nil
	r := <-ch
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return client, r.c
}

// netClient dials l with package net and returns both ends.
func netClient(t *testing.T, l net.Listener) (client, server net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		client.Close()
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// watchdog fails the test if it is not done within d, instead of hanging
// until the test binary's timeout. Call the returned func when done.
func watchdog(t testing.TB, d time.Duration) (done func(), expired <-chan struct{}) {
	t.Helper()
	stop := make(chan struct{})
	exp := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-time.After(d):
			close(exp)
		}
	}()
	return func() { close(stop) }, exp
}

// missing ends t because tool is unavailable: t.Fatal when the CI
// environment variable is set (.ci/run installs every such tool), t.Skip
// otherwise. It is the root module's internal/testtool.Missing, which
// this module cannot import.
func missing(t testing.TB, tool string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing and CI is set (.ci/run installs it): %v", tool, err)
	}
	t.Skipf("%s is missing (CI would fail here): %v", tool, err)
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// stdPipe dials l with package net and accepts on l.
func stdPipe(t testing.TB, l net.Listener) (client, server net.Conn) {
	t.Helper()
	client, err := net.Dial(l.Addr().Network(), l.Addr().String())
	if err != nil {
		t.Fatalf("net.Dial: %v", err)
	}
	server, err = l.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// await yields until cond holds or stop is closed, and reports whether cond
// held. Tests use it to wait for a state another goroutine reaches, with a
// watchdog's channel as stop, instead of sleeping.
func await(stop <-chan struct{}, cond func() bool) bool {
	for !cond() {
		select {
		case <-stop:
			return false
		default:
			runtime.Gosched()
		}
	}
	return true
}

// eachNestedWait runs f in a subtest, on a group of its own, for every
// mode with each of nestedWaits.
func eachNestedWait(t *testing.T, f func(t *testing.T, g *netpoll.Group)) {
	eachNestedWaitWith(t, "", f)
}

// eachNestedWaitWith is eachNestedWait with more settings, such as
// "hotread=off", in every group.
func eachNestedWaitWith(t *testing.T, more string, f func(t *testing.T, g *netpoll.Group)) {
	if more != "" {
		more = "," + more
	}
	for _, mode := range modes {
		for _, wait := range nestedWaits {
			t.Run("mode="+mode+"/wait="+wait, func(t *testing.T) {
				f(t, newGroup(t, cfgOf(t, "mode="+mode+",wait="+wait+more)))
			})
		}
	}
}

// pingPongConn sends rounds one-byte round trips from client to server and
// back.
func pingPongConn(t *testing.T, client, server net.Conn, rounds int) {
	t.Helper()
	pingPongOne(t, client, server, rounds, false)
}

// pingPongParked is pingPongConn where the client sends each byte only once
// server's read direction is waiting, so that every request parks the
// server's Read once: a client that raced ahead of the Read let 35-99% of
// 2,000 requests park, by the machine's speed.
func pingPongParked(t *testing.T, client, server net.Conn, rounds int) {
	t.Helper()
	pingPongOne(t, client, server, rounds, true)
}

// pingPongOne is pingPongConn, and with afterPark pingPongParked.
func pingPongOne(t *testing.T, client, server net.Conn, rounds int, afterPark bool) {
	t.Helper()
	done, expired := watchdog(t, 2*time.Minute)
	defer done()
	errc := make(chan error, 1)
	go func() { errc <- echoBytes(server, rounds) }()
	b := make([]byte, 1)
	for i := range rounds {
		if afterPark && !netpoll.AwaitReadState(server, "waiting", expired) {
			t.Fatalf("round %d: the server's Read did not park", i)
		}
		b[0] = byte(i)
		if _, err := client.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, b); err != nil || b[0] != byte(i) {
			t.Fatalf("round %d: %v, got %d", i, err, b[0])
		}
		select {
		case <-expired:
			t.Fatal("ping-pong hung")
		default:
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// echoBytes reads rounds single bytes from c and writes each back.
func echoBytes(c net.Conn, rounds int) error {
	b := make([]byte, 1)
	for range rounds {
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if _, err := c.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// handOffStats is the Server's hand-off counters, read by name
// (Server.ReadStats): times a connection went idle with no goroutine, the
// socket checks those hand-offs made, the ones that needed none, and the
// checks that found input queued.
type handOffStats struct{ HandOffs, Checks, Skips, Found uint64 }

func readHandOffs(t testing.TB, s *netpoll.Server) handOffStats {
	t.Helper()
	samples := []netpoll.Sample{
		{Name: "/server/hand-offs:calls"},
		{Name: "/server/hand-off-checks:calls"},
		{Name: "/server/hand-off-skips:calls"},
		{Name: "/server/hand-off-found:calls"},
	}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	return handOffStats{samples[0].Value, samples[1].Value, samples[2].Value, samples[3].Value}
}

// idleTimeouts reads the Server's count of connections closed by
// IdleTimeout (Server.ReadStats).
func idleTimeouts(t testing.TB, s *netpoll.Server) uint64 {
	t.Helper()
	samples := []netpoll.Sample{{Name: "/server/idle-timeouts:conns"}}
	if err := s.ReadStats(samples); err != nil {
		t.Fatalf("Server.ReadStats: %v", err)
	}
	return samples[0].Value
}
