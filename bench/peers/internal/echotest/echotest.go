// Package echotest runs a peer echo server inside a test and checks its
// echoes byte for byte.
package echotest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Watchdog bounds every wait of a test: for the announce line, for an echo,
// for the server to return. A server that hangs fails the test instead.
const Watchdog = 30 * time.Second

// Sizes are the message sizes Check sends: around the 16-byte loadgen
// header, a TCP segment and powers of two up to 64 KiB.
var Sizes = []int{1, 2, 15, 16, 17, 100, 1000, 1460, 4096, 10000, 16384, 65535, 65536}

// Server is a server started by Start.
type Server struct {
	Addr   string // the address announced
	Labels string // the labels announced, k=v/k=v
	done   chan error
	stderr lockedBuffer
}

var announce = regexp.MustCompile(`^echoserver listening on (\S+) \(([^()]*)\)$`)

// Start calls serve in a goroutine, with pipes for stdout and stderr, and
// returns once the first line of stdout announced the address. The test
// must call Wait before it ends; its stderr is logged if the test fails.
func Start(t testing.TB, serve func(stdout, stderr io.Writer) error) *Server {
	t.Helper()
	s := &Server{done: make(chan error, 1)}
	pr, pw := io.Pipe()
	go func() {
		err := serve(pw, &s.stderr)
		pw.CloseWithError(fmt.Errorf("server returned: %v", err))
		s.done <- err
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
		if t.Failed() {
			t.Logf("server stderr:\n%s", s.stderr.String())
		}
	})
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("server returned before announcing: %v\n%s", <-s.done, s.stderr.String())
		}
		m := announce.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("first line %q is not %q", line, "echoserver listening on ADDR (LABELS)")
		}
		s.Addr, s.Labels = m[1], m[2]
	case <-time.After(Watchdog):
		t.Fatal("server never announced its address")
	}
	return s
}

// Wait returns what serve returned, failing the test if that takes longer
// than Watchdog.
func (s *Server) Wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(Watchdog):
		t.Fatal("server did not return")
		return nil
	}
}

// Check opens conns connections to addr at once and on each sends rounds
// messages of every size in sizes, each written in one to three pieces of
// random length while the echo is read, and checks every echo byte for
// byte before the next message.
func Check(t testing.TB, addr string, conns, rounds int, sizes []int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := check(addr, uint64(i), rounds, sizes); err != nil {
				errs <- fmt.Errorf("conn %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func check(addr string, seed uint64, rounds int, sizes []int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(Watchdog)); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 0x6563686f)) // "echo"
	longest := slices.Max(sizes)
	msg, got := make([]byte, longest), make([]byte, longest)
	for r := range rounds {
		for _, n := range sizes {
			msg := msg[:n]
			for i := range msg {
				msg[i] = byte(rng.Uint32())
			}
			cut1, cut2 := rng.IntN(n+1), rng.IntN(n+1)
			if cut1 > cut2 {
				cut1, cut2 = cut2, cut1
			}
			wrote := make(chan error, 1)
			go func() {
				for _, piece := range [][]byte{msg[:cut1], msg[cut1:cut2], msg[cut2:]} {
					if len(piece) == 0 {
						continue
					}
					if _, err := c.Write(piece); err != nil {
						wrote <- err
						return
					}
				}
				wrote <- nil
			}()
			_, rerr := io.ReadFull(c, got[:n])
			if err := <-wrote; err != nil {
				return fmt.Errorf("round %d, %d bytes: write: %w", r, n, err)
			}
			if rerr != nil {
				return fmt.Errorf("round %d, %d bytes: read: %w", r, n, rerr)
			}
			if i := firstDiff(got[:n], msg); i >= 0 {
				return fmt.Errorf("round %d, %d bytes: echo differs from byte %d on", r, n, i)
			}
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// lockedBuffer is a bytes.Buffer that a server's goroutines may write to
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A Case is one configuration of a server under test.
type Case struct {
	Name   string
	Args   []string
	Labels string // what the announced labels must start with
}

// ServeFunc is a command's serve: it runs the server until ctx ends.
type ServeFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// RunFunc is a command's run: it runs the server until its lifetime ends.
type RunFunc func(args []string, stdout, stderr io.Writer) error

// TestEcho runs serve in each case, checks every byte of three rounds of
// all Sizes over eight connections at once, then ends serve through its
// context and checks that it returns without error.
func TestEcho(t *testing.T, serve ServeFunc, cases []Case) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := Start(t, func(stdout, stderr io.Writer) error {
				return serve(ctx, tt.Args, stdout, stderr)
			})
			if !strings.HasPrefix(s.Labels, tt.Labels) {
				t.Errorf("labels %q, want them to start with %q", s.Labels, tt.Labels)
			}
			Check(t, s.Addr, 8, 3, Sizes)
			cancel()
			if err := s.Wait(t); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
}

// TestLifetime checks that run with -lifetime echoes, then returns by
// itself without error.
func TestLifetime(t *testing.T, run RunFunc) {
	s := Start(t, func(stdout, stderr io.Writer) error {
		return run([]string{"-lifetime", "1s"}, stdout, stderr)
	})
	Check(t, s.Addr, 2, 1, []int{1, 1000})
	if err := s.Wait(t); err != nil {
		t.Errorf("run: %v", err)
	}
}

// TestBadFlags checks that run refuses each key of bad (flags split at
// spaces) with an error that mentions its value.
func TestBadFlags(t *testing.T, run RunFunc, bad map[string]string) {
	for args, want := range bad {
		err := run(strings.Fields(args), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run(%s) = %v, want an error mentioning %s", args, err, want)
		}
	}
}
