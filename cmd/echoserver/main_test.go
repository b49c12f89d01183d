package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startServer runs serve with args until the test ends and returns the
// address it announced.
func startServer(t *testing.T, args ...string) (addr string) {
	t.Helper()
	return startServerTo(t, io.Discard, args...)
}

// startServerTo is startServer with the server's stderr going to stderr,
// which the test may read once it has ended.
func startServerTo(t *testing.T, stderr io.Writer, args ...string) (addr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := serve(ctx, args, pw, stderr)
		pw.CloseWithError(fmt.Errorf("serve returned: %v", err))
		done <- err
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case line, ok := <-lines:
		m := regexp.MustCompile(`^echoserver listening on (\S+) \(impl=`).FindStringSubmatch(line)
		if !ok || m == nil {
			t.Fatalf("first line %q does not announce an address", line)
		}
		return m[1]
	case <-time.After(30 * time.Second):
		t.Fatal("server never announced its address")
	}
	return ""
}

// TestEcho runs the server in each implementation and mode and checks that
// every byte of many messages over several connections comes back.
func TestEcho(t *testing.T) {
	for _, args := range [][]string{
		{"-impl", "net"},
		{"-impl", "netpoll", "-mode", "et"},
		{"-impl", "netpoll", "-mode", "oneshot"},
		{"-impl", "netpoll", "-mode", "lt", "-pollers", "2", "-sharing", "reuseport"},
		{"-impl", "netpoll", "-spin", "forever"},
		{"-impl", "netpoll", "-pollers", "2", "-sharing", "exclusive", "-wait", "block"},
		{"-impl", "netpoll", "-waitread", "-buf", "100"},
		{"-impl", "netpoll", "-mode", "lt", "-wait", "inline", "-waitread"},
		{"-impl", "netpoll", "-ondemand"},
		{"-impl", "netpoll", "-ondemand", "-buf", "100"},
		{"-impl", "netpoll", "-mode", "oneshot", "-ondemand", "-buf", "100", "-zerocopy=false"},
		{"-impl", "netpoll", "-mode", "lt", "-wait", "inline", "-ondemand", "-buf", "100"},
		{"-impl", "net", "-ondemand"},
		{"-impl", "net", "-ondemand", "-buf", "100", "-zerocopy=false"},
		{"-impl", "netpoll", "-idletimeout", "1m"},
		{"-impl", "netpoll", "-ondemand", "-idletimeout", "1m"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			goroutines, fds := runtime.NumGoroutine(), countFDs(t)
			t.Run("serve", func(t *testing.T) {
				addr := startServer(t, args...)
				const conns, msgs = 8, 200
				var wg sync.WaitGroup
				var mu sync.Mutex
				verified := 0
				for i := range conns {
					wg.Add(1)
					go func() {
						defer wg.Done()
						c, err := net.Dial("tcp", addr)
						if err != nil {
							t.Error(err)
							return
						}
						defer c.Close()
						for m := range msgs {
							msg := bytes.Repeat([]byte{byte(i), byte(m)}, 1+m%300)
							if _, err := c.Write(msg); err != nil {
								t.Error(err)
								return
							}
							got := make([]byte, len(msg))
							if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
								t.Errorf("conn %d message %d: %v, echo differs", i, m, err)
								return
							}
							mu.Lock()
							verified++
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				if verified != conns*msgs {
					t.Errorf("%d of %d echoes verified", verified, conns*msgs)
				}
			})
			// serve has returned: nothing of it may be left.
			for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(end); {
				runtime.Gosched()
			}
			if n := runtime.NumGoroutine(); n > goroutines {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines after the server stopped, want %d:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
			}
			if n := countFDs(t); n != fds {
				t.Errorf("%d fds after the server stopped, want %d", n, fds)
			}
		})
	}
}

// TestLifetime: the server exits by itself after -lifetime.
func TestLifetime(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-lifetime", "50ms"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "echoserver listening on 127.0.0.1:") {
		t.Errorf("output %q", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{"-impl fast", `"fast"`},
		{"-mode edgy", `"edgy"`},
		{"-spin soon", `"soon"`},
		{"-pollers -2", `"-2"`},
		{"-sharing exclusive -wait nested", "epoll_wait"},
		{"-buf 0", "-buf 0"},
		{"-impl net -waitread", "-waitread needs -impl netpoll"},
		{"-ondemand -waitread", "-ondemand and -waitread"},
		{"-impl net -waitread -ondemand", "-ondemand and -waitread"},
		{"-idletimeout -1s", "bad -idletimeout -1s"},
		{"-ondemand -idletimeout -5ms", "bad -idletimeout -5ms"},
		{"-delay -2ms", "bad -delay -2ms"},
		{"-zeroread", "-zeroread needs -impl net"},
		{"-impl netpoll -zeroread", "-zeroread needs -impl net"},
		{"-impl net -zeroread -ondemand", "not with -ondemand or -waitread"},
		{"-impl net -zeroread -waitread", "not with -ondemand or -waitread"},
		{"-impl netpoll -zeroread -waitread", "not with -ondemand or -waitread"},
		{"extra", "unexpected"},
	} {
		err := run(strings.Fields(tt.args), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%s) = %v, want an error mentioning %s", tt.args, err, tt.want)
		}
	}
}

// TestZeroReadRefused: under the stock toolchain go test builds with, a
// zero-byte Read returns at once, so -zeroread is refused before the
// server listens. Its serving path (a zero-byte Read that waits) needs the
// patched toolchain (runtime_patch/build.sh) with GODEBUG=netpollzeroread=1
// and cannot be tested here; netpollbench's rt-zeroread row runs it.
func TestZeroReadRefused(t *testing.T) {
	if strings.Contains(os.Getenv("GODEBUG"), "netpollzeroread=1") {
		t.Skip("GODEBUG has netpollzeroread=1: on the patched toolchain the zero-byte Read waits")
	}
	var out bytes.Buffer
	err := run([]string{"-impl", "net", "-zeroread", "-lifetime", "1s"}, &out, io.Discard)
	if err != errZeroRead {
		t.Errorf("run(-impl net -zeroread) = %v, want %q", err, errZeroRead)
	}
	if !strings.Contains(errZeroRead.Error(), "runtime_patch/build.sh") || !strings.Contains(errZeroRead.Error(), "GODEBUG=netpollzeroread=1") {
		t.Errorf("the refusal %q does not say how to get a zero-byte Read that waits", errZeroRead)
	}
	if out.Len() > 0 {
		t.Errorf("refused, yet it announced: %q", out.String())
	}
}

// TestIdleTimeout: with -idletimeout, in every way the server waits, a
// connection that never sends and one that echoes once and then stays
// quiet are closed by the server (the client reads EOF), and one that
// talks more often than the timeout stays open and echoes. The times are
// not asserted: watchdog is only a bound on a hung test.
func TestIdleTimeout(t *testing.T) {
	const (
		timeout  = 200 * time.Millisecond
		interval = 20 * time.Millisecond // between the talker's echoes
		talk     = 4 * timeout           // how long the talker talks
		watchdog = 10 * time.Second
	)
	for _, args := range [][]string{
		{"-impl", "net"},
		{"-impl", "netpoll"},
		{"-impl", "netpoll", "-waitread"},
		{"-impl", "netpoll", "-ondemand"},
		{"-impl", "netpoll", "-ondemand", "-zerocopy=false"},
		{"-impl", "net", "-ondemand"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			addr := startServer(t, append(args, "-idletimeout", timeout.String(), "-buf", "100")...)
			dial := func() net.Conn {
				t.Helper()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			echoOnce := func(c net.Conn, msg []byte) error {
				c.SetDeadline(time.Now().Add(watchdog))
				defer c.SetDeadline(time.Time{})
				if _, err := c.Write(msg); err != nil {
					return err
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil {
					return err
				}
				if !bytes.Equal(got, msg) {
					return fmt.Errorf("echo %q, sent %q", got, msg)
				}
				return nil
			}
			// closed waits for the server to close c: its Read returns
			// io.EOF, with nothing before it.
			closed := func(c net.Conn, what string) {
				c.SetReadDeadline(time.Now().Add(watchdog))
				n, err := c.Read(make([]byte, 1))
				if n != 0 || err != io.EOF {
					t.Errorf("%s: Read = %d, %v; want 0, EOF: the server closing it", what, n, err)
				}
			}
			silent, quiet, talker := dial(), dial(), dial()
			if err := echoOnce(quiet, []byte("once")); err != nil {
				t.Fatalf("quiet's echo: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				for i := 0; ; i++ {
					if err := echoOnce(talker, []byte(fmt.Sprintf("message %d", i))); err != nil {
						done <- fmt.Errorf("message %d: %w", i, err)
						return
					}
					if i > 0 && time.Duration(i)*interval >= talk {
						done <- nil
						return
					}
					time.Sleep(interval) // the behaviour under test: talking every interval, inside the timeout
				}
			}()
			closed(silent, "a connection that never sent")
			closed(quiet, "a connection quiet after one echo")
			if err := <-done; err != nil {
				t.Errorf("a connection talking every %v: %v", interval, err)
			}
		})
	}
}

// TestOnDemand: with -ondemand, connections that have echoed and gone
// quiet hold no handler goroutine on netpoll's listener and one each on
// package net's (the Server's fallback), and -stats prints the Server's
// counters as they were when it stopped.
func TestOnDemand(t *testing.T) {
	const conns = 20
	for _, tt := range []struct {
		impl  string
		stats *regexp.Regexp
	}{
		{"netpoll", regexp.MustCompile(`(?m)^netpoll server stats: /server/conns:conns=20 /server/idle:conns=20 /server/running:handlers=0 /server/handler-runs:calls=(\d+) /server/panics:calls=0 /server/idle-timeouts:conns=0 /server/hand-offs:calls=(\d+) /server/hand-off-checks:calls=\d+ /server/hand-off-skips:calls=\d+ /server/hand-off-found:calls=\d+ /server/inline-calls:calls=\d+ /server/worker-calls:calls=\d+ /server/demotions:conns=\d+ /server/promotions:conns=\d+ /server/hot-entries:conns=\d+ /server/hot-exits:conns=\d+ /server/hot-calls:calls=\d+ /server/hot-reads-ahead:calls=\d+ /server/hot-skips:calls=\d+ /server/hot-refused:conns=0 /server/batch-spread:calls=\d+$`)},
		{"net", regexp.MustCompile(`(?m)^netpoll server stats: /server/conns:conns=20 /server/idle:conns=\d+ /server/running:handlers=\d+ /server/handler-runs:calls=(\d+) /server/panics:calls=0 /server/idle-timeouts:conns=0 /server/hand-offs:calls=(0) /server/hand-off-checks:calls=0 /server/hand-off-skips:calls=0 /server/hand-off-found:calls=0 /server/inline-calls:calls=0 /server/worker-calls:calls=0 /server/demotions:conns=0 /server/promotions:conns=0 /server/hot-entries:conns=0 /server/hot-exits:conns=0 /server/hot-calls:calls=0 /server/hot-reads-ahead:calls=0 /server/hot-skips:calls=0 /server/hot-refused:conns=0 /server/batch-spread:calls=0$`)},
	} {
		t.Run(tt.impl, func(t *testing.T) {
			var stderr bytes.Buffer
			var cs []net.Conn
			defer func() {
				for _, c := range cs {
					c.Close()
				}
			}()
			t.Run("serve", func(t *testing.T) {
				addr := startServerTo(t, &stderr, "-impl", tt.impl, "-ondemand", "-stats", "-buf", "100")
				for i := range conns {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					cs = append(cs, c)
					// Longer than -buf: one handler call echoes 100 bytes,
					// and the rest calls it again.
					msg := bytes.Repeat([]byte{byte(i)}, 250)
					got := make([]byte, len(msg))
					if _, err := c.Write(msg); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
						t.Fatalf("conn %d: %v, echo differs", i, err)
					}
				}
				// Handlers return once their echoes are out; the fallback's
				// goroutines start waiting.
				want := map[string]int{"netpoll": 0, "net": conns}[tt.impl]
				n := handlerGoroutines(t)
				for end := time.Now().Add(5 * time.Second); n != want && time.Now().Before(end); n = handlerGoroutines(t) {
					runtime.Gosched()
				}
				if n != want {
					t.Errorf("%d idle connections on -impl %s: %d handler goroutines, want %d", conns, tt.impl, n, want)
				}
			})
			m := tt.stats.FindStringSubmatch(stderr.String())
			if m == nil {
				t.Fatalf("stderr lacks the Server's counters matching %s:\n%s", tt.stats, stderr.String())
			}
			if starts, _ := strconv.Atoi(m[1]); starts < 2*conns {
				t.Errorf("%d handler calls, want at least 2 per connection (one Read of 100 bytes each time, 250 sent)", starts)
			}
			if handOffs, _ := strconv.Atoi(m[2]); tt.impl == "netpoll" && handOffs < conns {
				t.Errorf("%d hand-offs, want one per connection at least", handOffs)
			}
		})
	}
}

// handlerGoroutines counts the goroutines labelled netpoll=handler, which
// netpoll.Server runs handlers on (and its fallback waits on).
func handlerGoroutines(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	// Records are "N @ pcs" followed by "# labels: {...}" if labelled.
	n, count := 0, 0
	for _, l := range strings.Split(b.String(), "\n") {
		if c, _, ok := strings.Cut(l, " @ "); ok {
			count, _ = strconv.Atoi(c)
		} else if l == `# labels: {"netpoll":"handler"}` {
			n += count
		}
	}
	return n
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1
}
