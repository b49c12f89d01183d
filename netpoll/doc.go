// Package netpoll is a netpoller for goroutine-per-connection servers and
// clients. On Linux its Listener and Conn run on epoll instances of its own
// instead of the Go runtime's, with the choices inside a netpoller
// (registration mode, wait strategy, spinning) open to switch and measure; a
// Server holds idle connections with no goroutine and no buffer. Both are
// drop-ins for package net's: hand the listener to http.Server.Serve,
// tls.NewListener or a gRPC server, and use the conn as any net.Conn.
//
//	l, err := netpoll.Listen("tcp", ":8080")
//	...
//	err = http.Serve(l, handler)
//
// # Groups and configuration
//
// A Group is a set of pollers. The package-level Listen, ListenContext,
// Dial, DialContext and FileListener use the default group, Default, which
// is configured by the NETPOLL environment variable (EnvVar) and nothing
// else. A program that wants its own creates one with New; New never reads
// the environment. Group.Close closes every listener and connection of the
// group (blocked operations fail with net.ErrClosed) and returns once its
// descriptors are closed and its goroutines have returned.
//
//	g, err := netpoll.New(netpoll.Config{Pollers: 2, Sharing: netpoll.ReusePort})
//	defer g.Close()
//	c, err := g.Dial(ctx, "tcp", "127.0.0.1:8080")
//
// The zero Config is the default: DefaultPollers pollers, one acceptor per
// listener (Single), adaptive spinning, TCP keep-alive as package net has
// it. KeepAlive, KeepAliveConfig and Control mean what they mean on
// net.ListenConfig and net.Dialer. Experiment holds the lab's axes, which
// are not fields: registration mode, wait strategy, a fixed spin budget,
// kernel busy polling, short reads off, wake-all sharing, in the syntax
// NETPOLL uses (comma-separated key=value pairs, for example
// "mode=oneshot,wait=block"; ParseConfig reads a whole such string into a
// Config). A bad key or value is a *ConfigError naming it, from New and
// ParseConfig, and for NETPOLL from every package-level call; there is no
// silent fallback. Default returns a bad NETPOLL's error every time, but an
// error creating the group (out of file descriptors, say) to that call only:
// the next call tries again.
//
// Group.Listen and Group.Dial return a *Listener and a *Conn;
// Listener.Accept returns a net.Conn and Listener.AcceptConn the *Conn, as
// package net's AcceptTCP does. Only stream sockets are served: tcp, tcp4,
// tcp6 and unix.
//
// # Package net's contract
//
// A Conn is a net.Conn and has the rest of *net.TCPConn's surface that code
// type-asserts for: CloseRead, CloseWrite, SetNoDelay (on by default),
// SetKeepAlive, SetKeepAlivePeriod, SetLinger, SetReadBuffer,
// SetWriteBuffer, File (a duplicate) and SyscallConn. ReadFrom sends a file
// with sendfile(2) and splices from a stream socket, this package's or
// package net's; WriteTo splices to one; so io.Copy, http.FileServer and
// http.ServeContent move bytes inside the kernel, with deadlines and Close
// applying (io.Copy from a *net.TCPConn copies: package net's WriteTo hides
// the TCPConn, so call the Conn's ReadFrom to splice). A Listener is a
// net.Listener with SetDeadline, File and SyscallConn. Accepted and dialed
// TCP connections have keep-alive probes on, with package net's idle time,
// interval and count.
//
// All methods of Group, Listener, Conn and Server are safe for concurrent
// use. Concurrent Reads (or Writes) on one Conn are serialized, as in
// package net; a Read and a Write run in parallel. A Read of an empty slice
// returns 0, nil at once.
//
// A Read that returns fewer bytes than it asked for shows the socket
// drained, so the next Read parks without the syscall that would return
// EAGAIN (after a short TCP Write, likewise the next write), unless the
// socket's events have announced urgent data, end of input, a hang-up or an
// error. Code that has had the descriptor of a Conn or of a Listener
// (SyscallConn, File, Config.Control, FileListener), and so may have set
// options that end reads early, turns this off for that Conn, or for the
// Conns accepted after it. A Read into memory that cannot be faulted in (a
// foreign mmap) is not supported while it is on.
//
// # Errors
//
// Errors are package net's: a *net.OpError around an *os.SyscallError, a
// bare io.EOF on orderly shutdown, an error wrapping net.ErrClosed after
// Close, and one wrapping os.ErrDeadlineExceeded (Timeout() true) after a
// deadline. The package's own:
//
//   - ErrServed, in a *net.OpError: a Read or WaitRead from outside the
//     handler on an idle connection a Server is serving.
//   - ErrServerClosed: Server.Serve after Shutdown or Close.
//   - ErrSharedListener, which wraps errors.ErrUnsupported: what a listener
//     shared by pollers (Exclusive, ReusePort, wake-all) cannot do: a raw
//     Read or Write, and File of a ReusePort listener with more than one
//     socket.
//   - *ConfigError: a bad Config or NETPOLL value.
//
// An epoll_ctl that fails on a registration already made fails that
// connection or listener: its operations, parked ones included, return an
// error wrapping the syscall error, and so does a Conn's Close. Unlike
// package net's, Accept does not return accept4's EMFILE, ENFILE, ENOBUFS or
// ENOMEM: it backs off (5ms doubling to 1s) until descriptors or memory are
// free.
//
// # Serving on demand
//
// A Server runs a Handler, written in ordinary blocking style, on a
// goroutine only while a connection has work, so that an idle connection
// holds no goroutine and no buffer. The handler is called when the
// connection is readable (data, EOF, an error such as a reset) or its read
// deadline has passed; write readiness alone never calls it. It may block as
// long as it likes mid-request, and at most one call runs per connection at
// a time; there is no pool of handler goroutines that handlers waiting on
// each other could exhaust. A call runs on the goroutine the runtime woke
// for the poller, with no goroutine started and no channel between them
// (package net's cost, where a goroutine per call wakes a second thread
// whenever a CPU is idle); the first event that comes while it runs hands
// the poller to another goroutine, so a call that blocks anywhere holds up
// no other connection, and a connection whose calls block runs them on a
// goroutine of their own until four in a row return quickly. A batch of
// connections ready at once runs on pooled goroutines, in parallel when
// GOMAXPROCS is above one (with one P the goroutine that polled runs the
// first). A busy connection's goroutine reads its next input itself, into
// a pooled buffer that the handler's Read takes, as package net's reader
// reads before it parks: while such input is pending, a RawConn's Read and
// File fail with ErrReadAhead (they would read behind it); Read, WriteTo
// and WaitRead take it first. What a call may rely on about its goroutine
// is in Handler's documentation. When it returns nil, whatever is
// queued in the socket then, or comes later, calls it again, exactly once;
// what it keeps in its own buffers (a bufio.Reader's Buffered bytes) the
// Server cannot see, so it returns only when they hold nothing it must act
// on. Per-connection state lives in the handler's own value
// (Server.NewHandler makes one per connection).
//
// A non-nil error closes the connection; so does a nil return after its Read
// met EOF or an error, or with its read deadline already past (a handler
// that answers a deadline, with a ping say, sets a new one or none). A read
// deadline that passes while the connection is idle calls the handler once,
// whose Read reports the timeout. A connection idle for Server.IdleTimeout
// is closed, as http.Server's is, and Close from anywhere ends an idle
// connection without a call. A panicking handler is logged with its stack
// (Server.ErrorLog) and its connection closed; the Server goes on.
// Server.ConnState reports new, active, idle and closed, closed exactly once
// per connection: the cleanup hook, since an idle connection has no stack to
// defer on. Other goroutines may write to an idle connection at any time (a
// slow reader's backpressure parks only that writer); a Read from outside
// the handler fails with ErrServed. Shutdown closes the listeners and the
// idle connections and waits for running handlers; Close ends everything at
// once. Server.Conns lists the connections with their states (an idle one is
// in no goroutine dump), and every call starts with the pprof label
// netpoll=handler.
//
// On connections of another package (package net's listener, or one that
// wraps this package's connections) Serve falls back to one goroutine per
// connection that waits for readability with no buffer, then calls the same
// handler, so a program can switch with a flag. A *tls.Conn cannot be served
// on demand: crypto/tls keeps records the Server cannot see.
//
// # Waiting without a buffer
//
// Conn.WaitRead parks until a Read would not: data, EOF or an error is
// queued, including what was queued before it was called. A goroutine that
// keeps its connection waits with its stack alone and takes a buffer (from a
// sync.Pool, say) only when there is something to read. The read deadline
// and Close end it as they end Read. A nil return is no promise that the
// next Read gets data: another goroutine may read first.
//
// # Statistics
//
// Group.Stats returns the counts a user watches (connections, accepts,
// parks, wakeups) and Server.Stats a Server's (connections, idle, running,
// handler runs, panics). The rest are named samples in the style of
// runtime/metrics: AllStats lists every name with its meaning, and
// Group.ReadStats and Server.ReadStats fill a []Sample with the values of
// the names it holds.
//
// # Other systems
//
// The epoll pollers are Linux's. On other systems the package builds with
// the same types, and Listen, Dial, FileListener, Group and Server run on
// package net; a Server there serves each connection with the fallback's
// goroutine. WaitRead waits through the connection's RawConn: with poll(2)
// on other Unix systems, with package net's zero-byte receive on Windows;
// where package net cannot wait for readability without a read (plan9, js,
// wasip1) it returns an error wrapping errors.ErrUnsupported.
//
// What the experiments gain and cost, as measured, is BENCHMARKS.md at the
// repository's root; how the package works and why it is safe (the
// descriptor state machine, the spinning policy and its bound, short reads
// against the kernel's sources, the Server's hand-off) is netpoll/DESIGN.md.
package netpoll
