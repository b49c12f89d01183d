package netpoll_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// What a Group, its Listener and Conn, and a Server do on every OS: on
// Linux through epoll, elsewhere through package net. They run on Linux,
// and on js/wasm under node (package net's in-process network), which
// runs the other systems' code (group_other.go, listener_other.go,
// conn_other.go, serve_other.go):
//
//	GOOS=js GOARCH=wasm go test -exec "$(go env GOROOT)/lib/wasm/go_js_wasm_exec" -run Portable .

// portablePair returns a connected pair from g: dialed, and accepted by l.
func portablePair(t *testing.T, g *netpoll.Group, l *netpoll.Listener) (dialed, accepted *netpoll.Conn) {
	t.Helper()
	type result struct {
		c   *netpoll.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := l.AcceptConn()
		ch <- result{c, err}
	}()
	dialed, err := g.Dial(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, c := range []*netpoll.Conn{dialed, r.c} {
		// A watchdog: a Read or Write that should not wait fails instead
		// of hanging.
		if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	return dialed, r.c
}

func TestPortableGroup(t *testing.T) {
	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, b := portablePair(t, g, l)
	if st := g.Stats(); st.Conns != 2 || st.Accepts != 1 {
		t.Errorf("Stats with a pair open = %+v, want Conns 2, Accepts 1", st)
	}
	samples := []netpoll.Sample{{Name: "/netpoll/conns:conns"}, {Name: "/netpoll/accepts:conns"}}
	if err := g.ReadStats(samples); err != nil || samples[0].Value != 2 || samples[1].Value != 1 {
		t.Errorf("ReadStats = %+v, %v; want 2 conns, 1 accept", samples, err)
	}

	if _, err := a.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v; want ping", buf, err)
	}
	if err := b.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("Read after the peer's CloseWrite = %d, %v; want 0, io.EOF", n, err)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a second Close: %v, want net.ErrClosed", err)
	}
	if st := g.Stats(); st.Conns != 1 {
		t.Errorf("Stats.Conns after one Close = %d, want 1", st.Conns)
	}

	// Close ends a Read blocked on the group's connection, and the
	// listener's Accept. The Read's peer is not the group's, so that
	// nothing but the Close can end it.
	peer, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	d, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	d.SetDeadline(time.Now().Add(time.Minute)) // watchdog
	if st := g.Stats(); st.Conns != 2 || st.Accepts != 2 {
		t.Errorf("Stats with b and d open = %+v, want Conns 2, Accepts 2", st)
	}
	blocked := make(chan error, 2)
	go func() {
		_, err := d.Read(buf)
		blocked <- err
	}()
	go func() {
		_, err := l.Accept()
		blocked <- err
	}()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-blocked; !errors.Is(err, net.ErrClosed) {
			t.Errorf("a Read or Accept across Group.Close: %v, want net.ErrClosed", err)
		}
	}
	if st := g.Stats(); st.Conns != 0 {
		t.Errorf("Stats.Conns after Group.Close = %d, want 0", st.Conns)
	}
	if err := g.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a second Group.Close: %v, want net.ErrClosed", err)
	}
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Listener.Close after Group.Close: %v, want net.ErrClosed", err)
	}
	if _, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0"); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Listen on a closed group: %v, want net.ErrClosed", err)
	}
	if _, err := g.Dial(context.Background(), "tcp", l.Addr().String()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Dial on a closed group: %v, want net.ErrClosed", err)
	}
}

func TestPortableErrors(t *testing.T) {
	if _, err := netpoll.New(netpoll.Config{Pollers: -1}); err == nil {
		t.Error("New with Pollers -1 succeeded")
	} else if _, ok := errors.AsType[*netpoll.ConfigError](err); !ok {
		t.Errorf("New with Pollers -1: %v, want a *ConfigError", err)
	}
	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"listen", func() error { _, err := g.Listen(context.Background(), "udp", "127.0.0.1:0"); return err }},
		{"dial", func() error { _, err := g.Dial(context.Background(), "udp", "127.0.0.1:1"); return err }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			op, ok := errors.AsType[*net.OpError](err)
			if !ok || op.Op != tt.name {
				t.Fatalf("%s on udp: %v, want a *net.OpError with Op %q", tt.name, err, tt.name)
			}
			if _, ok := errors.AsType[net.UnknownNetworkError](err); !ok {
				t.Errorf("%s on udp: %v, want it to wrap net.UnknownNetworkError", tt.name, err)
			}
		})
	}

	// ReadStats reads every group statistic AllStats names and fails on
	// another name, reading the rest all the same.
	var samples []netpoll.Sample
	for _, d := range netpoll.AllStats() {
		if !d.Server {
			samples = append(samples, netpoll.Sample{Name: d.Name})
		}
	}
	if err := g.ReadStats(samples); err != nil {
		t.Errorf("ReadStats of every group statistic: %v", err)
	}
	bad := []netpoll.Sample{{Name: "/netpoll/no-such:calls"}, {Name: "/server/conns:conns"}, {Name: "/netpoll/conns:conns", Value: 7}}
	if err := g.ReadStats(bad); !errors.Is(err, netpoll.ErrUnknownStat) || bad[2].Value != 0 {
		t.Errorf("ReadStats with unknown names: %v, conns %d; want ErrUnknownStat, conns read (0)", err, bad[2].Value)
	}
}

func TestPortableServer(t *testing.T) {
	g, err := netpoll.New(netpoll.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	l, err := g.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		_, err = c.Write(buf[:n])
		return err
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	c, err := g.Dial(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(time.Minute)) // watchdog
	buf := make([]byte, 3)
	for _, msg := range []string{"one", "two"} {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitRead(); errors.Is(err, errors.ErrUnsupported) {
			t.Logf("WaitRead: %v", err)
		} else if err != nil {
			t.Fatalf("WaitRead: %v", err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %q, %v; want %q", buf, err, msg)
		}
	}
	if st := srv.Stats(); st.Conns != 1 || st.HandlerRuns < 2 {
		t.Errorf("Server.Stats = %+v, want 1 connection, at least 2 handler runs", st)
	}
	c.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, netpoll.ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v, want ErrServerClosed", err)
	}
	if st := srv.Stats(); st.Conns != 0 {
		t.Errorf("Server.Stats.Conns after Shutdown = %d, want 0", st.Conns)
	}
}
