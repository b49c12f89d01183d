// Command gnetecho is an echo server on github.com/panjf2000/gnet/v2 with the
// flags and first output line of cmd/echoserver, so that the same scripts
// and cmd/loadgen drive it. bench/peers/README.md says why each default is
// what it is.
//
//	taskset -c 0 gnetecho -addr 127.0.0.1:7000 -lifetime 30s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/edgepoll/edgepoll/bench/peers/internal/peercmd"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		peercmd.Exit("gnetecho", err)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := peercmd.SignalContext()
	defer stop()
	return serve(ctx, args, stdout, stderr)
}

// serve runs the engine until its lifetime passes or ctx ends, then stops
// it (which closes every connection) and returns.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gnetecho", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f peercmd.Flags
	f.Register(fs)
	loops := fs.Int("loops", 1, "event loops (0: one per usable CPU, gnet's WithMulticore)")
	et := fs.Bool("et", false, "edge-triggered epoll (WithEdgeTriggeredIO)")
	reusePort := fs.Bool("reuseport", false, "a SO_REUSEPORT listener in every event loop instead of one accepting reactor (WithReusePort)")
	lockOSThread := fs.Bool("lockosthread", true, "lock every event loop to its OS thread (WithLockOSThread)")
	if err := peercmd.Parse(fs, args); err != nil {
		return err
	}
	if *loops < 0 {
		return fmt.Errorf("bad -loops %d: want 0 or more", *loops)
	}
	nloops := *loops
	if nloops == 0 {
		nloops = runtime.NumCPU() // what gnet's Multicore starts
	}

	addr := f.Addr
	var reserved net.Listener
	if *reusePort {
		var err error
		if reserved, err = reservePort(ctx, addr); err != nil {
			return err
		}
		defer reserved.Close()
		addr = reserved.Addr().String()
	}

	es := &echoServer{booted: make(chan boot, 1)}
	served := make(chan error, 1)
	go func() {
		served <- gnet.Run(es, "tcp://"+addr,
			gnet.WithNumEventLoop(*loops),
			gnet.WithMulticore(*loops == 0),
			gnet.WithEdgeTriggeredIO(*et),
			gnet.WithReusePort(*reusePort),
			gnet.WithLockOSThread(*lockOSThread),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithLogger(newLogger(stderr)),
		)
	}()
	var b boot
	select {
	case b = <-es.booted:
	case err := <-served:
		return fmt.Errorf("gnet: %w", err)
	}
	if b.err != nil {
		<-served // OnBoot said Shutdown: Run returns at once
		return b.err
	}
	if reserved != nil {
		// gnet's first listener holds the port now; the others join it
		// with SO_REUSEPORT. Nothing has connected: the address is not out.
		reserved.Close()
	}
	peercmd.Announce(stdout, b.addr,
		"impl=gnet",
		peercmd.Label("loops", nloops),
		peercmd.Label("et", *et),
		peercmd.Label("reuseport", *reusePort),
		peercmd.Label("lockosthread", *lockOSThread),
		peercmd.Label("poll_opt", pollOpt))

	if err := f.Wait(ctx, served); err != nil {
		return fmt.Errorf("gnet: %w", err)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.eng.Stop(stopCtx); err != nil {
		return fmt.Errorf("gnet stop: %w", err)
	}
	return <-served
}

// boot is what OnBoot hands to serve.
type boot struct {
	eng  gnet.Engine
	addr string // the address the listener is bound to
	err  error
}

// echoServer writes back whatever a connection has read. gnet calls it on
// the connection's event loop, one callback at a time per loop.
type echoServer struct {
	gnet.BuiltinEventEngine
	booted chan boot
}

var _ gnet.EventHandler = (*echoServer)(nil)

// OnBoot runs once the listener is bound, before the event loops start;
// connections made before they start wait in the backlog.
func (es *echoServer) OnBoot(eng gnet.Engine) gnet.Action {
	addr, err := boundAddr(eng)
	es.booted <- boot{eng: eng, addr: addr, err: err}
	if err != nil {
		return gnet.Shutdown
	}
	return gnet.None
}

// OnTraffic echoes all the bytes read so far. Next(-1) returns them
// without a copy, valid until OnTraffic returns; Write sends what the
// socket takes at once and copies the rest into the connection's outbound
// buffer, which the event loop flushes when the socket is writable again.
func (es *echoServer) OnTraffic(c gnet.Conn) gnet.Action {
	buf, err := c.Next(-1)
	if err != nil {
		return gnet.Close
	}
	c.Write(buf) // on a write error gnet has closed c already
	return gnet.None
}

// boundAddr is the address of the engine's listener, port 0 resolved.
func boundAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", fmt.Errorf("gnet listener: %w", err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", os.NewSyscallError("getsockname", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return (&net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}).String(), nil
	case *unix.SockaddrInet6:
		return (&net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}).String(), nil
	}
	return "", errors.New("gnet listener: not a TCP socket")
}

// reservePort binds addr with SO_REUSEPORT and returns the listener, so
// that every event loop's listener binds the same, known port: gnet binds
// one listener per loop to the address it is given, and port 0 would give
// each loop a port of its own.
func reservePort(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		if err != nil {
			return err
		}
		return os.NewSyscallError("setsockopt", serr)
	}}
	return lc.Listen(ctx, "tcp", addr)
}
