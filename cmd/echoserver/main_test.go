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
	"strings"
	"sync"
	"testing"
	"time"
)

// startServer runs serve with args until the test ends and returns the
// address it announced.
func startServer(t *testing.T, args ...string) (addr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := serve(ctx, args, pw, io.Discard)
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
		{"extra", "unexpected"},
	} {
		err := run(strings.Fields(tt.args), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%s) = %v, want an error mentioning %s", tt.args, err, tt.want)
		}
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1
}
