// Command cloudwegoecho is an echo server on github.com/cloudwego/netpoll
// with the flags and first output line of cmd/echoserver, so that the same
// scripts and cmd/loadgen drive it. bench/peers/README.md says why each
// default is what it is.
//
//	taskset -c 0 cloudwegoecho -addr 127.0.0.1:7000 -lifetime 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bytedance/gopkg/util/gopool"
	"github.com/cloudwego/netpoll"

	"github.com/edgepoll/edgepoll/bench/peers/internal/peercmd"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		peercmd.Exit("cloudwegoecho", err)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	ctx, stop := peercmd.SignalContext()
	defer stop()
	return serve(ctx, args, stdout, stderr)
}

// runners are the values of -runner: how netpoll runs OnRequest.
var runners = map[string]func(ctx context.Context, f func()){
	// A goroutine per burst of input, what netpoll.DisableGopool sets.
	"go": func(_ context.Context, f func()) { go f() },
	// bytedance/gopkg's goroutine pool, netpoll's default.
	"gopool": gopool.CtxGo,
}

// serve runs the event loop until its lifetime passes or ctx ends, then
// shuts it down (which closes every connection) and returns.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cloudwegoecho", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f peercmd.Flags
	f.Register(fs)
	loops := fs.Int("loops", 1, "pollers, each a goroutine with its epoll (Config.PollerNum)")
	runner := fs.String("runner", "go", "what runs OnRequest: go (a goroutine each time, DisableGopool) or gopool (Config.Runner)")
	if err := peercmd.Parse(fs, args); err != nil {
		return err
	}
	if *loops < 1 {
		return fmt.Errorf("bad -loops %d: want at least 1", *loops)
	}
	runTask, ok := runners[*runner]
	if !ok {
		return fmt.Errorf("bad -runner %q: want go or gopool", *runner)
	}

	// The pollers are global and start with the first listener or
	// connection; Configure before that takes effect, as netpoll's guide
	// does in init. Its logger writes to stderr already.
	if err := netpoll.Configure(netpoll.Config{
		PollerNum:    *loops,
		Runner:       runTask,
		LoggerOutput: stderr,
	}); err != nil {
		return fmt.Errorf("netpoll: %w", err)
	}
	ln, err := netpoll.CreateListener("tcp", f.Addr)
	if err != nil {
		return fmt.Errorf("netpoll: %w", err)
	}
	evl, err := netpoll.NewEventLoop(echo)
	if err != nil {
		ln.Close()
		return fmt.Errorf("netpoll: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- evl.Serve(ln) }()
	peercmd.Announce(stdout, ln.Addr().String(),
		"impl=cloudwego",
		peercmd.Label("loops", *loops),
		peercmd.Label("runner", *runner))

	if err := f.Wait(ctx, served); err != nil {
		return fmt.Errorf("netpoll: %w", err)
	}
	// Shutdown closes the listener, then every connection as soon as it
	// is idle (nothing being processed, nothing buffered either way).
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := evl.Shutdown(stopCtx); err != nil {
		return fmt.Errorf("netpoll shutdown: %w", err)
	}
	return <-served
}

// echo is the OnRequest callback: netpoll calls it, on a goroutine of the
// runner, while the connection has input it has read, one call at a time
// per connection. It writes all of that input back. Next returns the bytes
// in place; WriteBinary may keep a reference to them instead of copying,
// so they are released only once Flush has sent everything, waiting for
// the socket to be writable when the send buffer is full.
func echo(_ context.Context, c netpoll.Connection) error {
	r, w := c.Reader(), c.Writer()
	buf, err := r.Next(r.Len())
	if err != nil {
		return err
	}
	defer r.Release()
	if _, err := w.WriteBinary(buf); err != nil {
		return err
	}
	return w.Flush()
}
