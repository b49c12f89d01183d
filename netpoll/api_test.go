package netpoll_test

import (
	"context"
	"io"
	"iter"
	"net"
	"os"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// The exported surface every OS builds: Linux's epoll types, and package
// net underneath elsewhere (the *_other.go files). CI vets this file for
// darwin and windows, so a method this list names that another OS lacks
// fails the build there; TestSurface fails on the OS it runs on when a
// type has a method the list lacks, so that a method added to one side is
// added here and so to the other.

type connAPI interface {
	net.Conn
	syscall.Conn
	io.ReaderFrom
	io.WriterTo
	CloseRead() error
	CloseWrite() error
	File() (*os.File, error)
	SetKeepAlive(keepalive bool) error
	SetKeepAliveConfig(config net.KeepAliveConfig) error
	SetKeepAlivePeriod(d time.Duration) error
	SetLinger(sec int) error
	SetNoDelay(noDelay bool) error
	SetReadBuffer(bytes int) error
	SetWriteBuffer(bytes int) error
	WaitRead() error
}

type listenerAPI interface {
	net.Listener
	syscall.Conn
	AcceptConn() (*netpoll.Conn, error)
	File() (*os.File, error)
	SetDeadline(t time.Time) error
}

type groupAPI interface {
	Close() error
	Config() netpoll.Config
	Dial(ctx context.Context, network, address string) (*netpoll.Conn, error)
	FileListener(f *os.File) (*netpoll.Listener, error)
	Listen(ctx context.Context, network, address string) (*netpoll.Listener, error)
	ReadPollerStats(poller int, samples []netpoll.Sample) error
	ReadStats(samples []netpoll.Sample) error
	Stats() netpoll.Stats
}

type serverAPI interface {
	Close() error
	Conns() iter.Seq2[net.Conn, netpoll.ConnState]
	ReadStats(samples []netpoll.Sample) error
	Serve(l net.Listener) error
	Shutdown(ctx context.Context) error
	Stats() netpoll.ServerStats
}

var (
	_ connAPI     = (*netpoll.Conn)(nil)
	_ listenerAPI = (*netpoll.Listener)(nil)
	_ groupAPI    = (*netpoll.Group)(nil)
	_ serverAPI   = (*netpoll.Server)(nil)

	_ func(network, address string) (*netpoll.Listener, error)                      = netpoll.Listen
	_ func(ctx context.Context, network, address string) (*netpoll.Listener, error) = netpoll.ListenContext
	_ func(network, address string) (*netpoll.Conn, error)                          = netpoll.Dial
	_ func(ctx context.Context, network, address string) (*netpoll.Conn, error)     = netpoll.DialContext
	_ func() (*netpoll.Group, error)                                                = netpoll.Default
	_ func(cfg netpoll.Config) (*netpoll.Group, error)                              = netpoll.New
	_ func(f *os.File) (*netpoll.Listener, error)                                   = netpoll.FileListener
	_ func(s string) (netpoll.Config, error)                                        = netpoll.ParseConfig
	_ func() []netpoll.StatDescription                                              = netpoll.AllStats

	_ = []error{netpoll.ErrServerClosed, netpoll.ErrServed, netpoll.ErrSharedListener, netpoll.ErrUnknownStat}
)

// TestSurface fails when Conn, Listener, Group or Server has an exported
// method the interfaces above lack (that they have all of those, the
// compiler checks).
func TestSurface(t *testing.T) {
	for _, tt := range []struct {
		name      string
		typ, want reflect.Type
	}{
		{"Conn", reflect.TypeFor[*netpoll.Conn](), reflect.TypeFor[connAPI]()},
		{"Listener", reflect.TypeFor[*netpoll.Listener](), reflect.TypeFor[listenerAPI]()},
		{"Group", reflect.TypeFor[*netpoll.Group](), reflect.TypeFor[groupAPI]()},
		{"Server", reflect.TypeFor[*netpoll.Server](), reflect.TypeFor[serverAPI]()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var extra []string
			for i := range tt.typ.NumMethod() {
				if name := tt.typ.Method(i).Name; !hasMethod(tt.want, name) {
					extra = append(extra, name)
				}
			}
			if len(extra) > 0 {
				t.Errorf("*%s has %v, which api_test.go's list lacks: add them there, and to the other systems' %s", tt.name, extra, tt.name)
			}
		})
	}
}

func hasMethod(t reflect.Type, name string) bool {
	_, ok := t.MethodByName(name)
	return ok
}
