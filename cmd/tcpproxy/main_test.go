package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects the server's stderr (its -stats line).
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hashBackend answers each connection with the SHA-256 of everything it
// read until EOF, then closes.
func hashBackend(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				h := sha256.New()
				io.Copy(h, c)
				c.Write(h.Sum(nil))
			}()
		}
	}()
	return l.Addr().String()
}

// TestProxy sends 8 MiB through the proxy, both implementations, with and
// without zero copy, and checks the backend's digest of it comes back; with
// netpoll it checks from -stats that the bytes were spliced, or not.
func TestProxy(t *testing.T) {
	backend := hashBackend(t)
	const size = 8 << 20
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{4}).Read(data)
	want := sha256.Sum256(data)
	for _, args := range [][]string{
		{"-impl", "net"},
		{"-impl", "net", "-zerocopy=false"},
		{"-impl", "netpoll"},
		{"-impl", "netpoll", "-zerocopy=false"},
		{"-impl", "netpoll", "-mode", "oneshot"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			pr, pw := io.Pipe()
			var stderr syncBuffer
			done := make(chan error, 1)
			go func() {
				err := serve(ctx, append(args, "-to", backend, "-stats"), pw, &stderr)
				pw.Close()
				done <- err
			}()
			line, err := bufio.NewReader(pr).ReadString('\n')
			go io.Copy(io.Discard, pr)
			m := regexp.MustCompile(`^tcpproxy listening on (\S+) \(impl=`).FindStringSubmatch(line)
			if err != nil || m == nil {
				cancel()
				t.Fatalf("first line %q (%v) does not announce an address", line, err)
			}
			for range 2 {
				c, err := net.Dial("tcp", m[1])
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					c.Write(data)
					c.(*net.TCPConn).CloseWrite()
				}()
				c.SetDeadline(time.Now().Add(time.Minute))
				got, err := io.ReadAll(c)
				c.Close()
				if err != nil || string(got) != string(want[:]) {
					t.Fatalf("digest through the proxy %x, %v; want %x", got, err, want)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("serve: %v", err)
			}
			if args[1] != "netpoll" {
				return
			}
			sm := regexp.MustCompile(`/netpoll/zerocopy/splice:bytes=(\d+)`).FindStringSubmatch(stderr.String())
			if sm == nil {
				t.Fatalf("no /netpoll/zerocopy/splice:bytes in -stats: %q", stderr.String())
			}
			spliced, _ := strconv.Atoi(sm[1])
			wantSpliced := 2 * (size + sha256.Size) // both ways, both connections
			if strings.Contains(fmt.Sprint(args), "zerocopy=false") {
				wantSpliced = 0
			}
			if spliced != wantSpliced {
				t.Errorf("spliced %d bytes, want %d", spliced, wantSpliced)
			}
		})
	}
}
