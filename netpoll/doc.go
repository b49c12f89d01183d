// Package netpoll is a Linux netpoller for goroutine-per-connection servers
// and clients, built on its own epoll instances so that the choices inside
// Go's runtime netpoller can be switched and measured.
//
// # Use
//
// A Listener and a Conn are drop-ins for package net's: hand the listener to
// http.Server.Serve, tls.NewListener or a gRPC server; use the conn as any
// net.Conn.
//
// They have the rest of *net.TCPConn's and *net.TCPListener's surface that
// code type-asserts for. Conn.ReadFrom sends a file with sendfile(2) and
// splices from a stream socket (this package's or package net's) through a
// pipe; Conn.WriteTo splices to one; so io.Copy, http.FileServer and
// http.ServeContent move bytes inside the kernel, parked through the
// conn's poller with deadlines and Close applying. One gap against net:
// io.Copy from a *net.TCPConn to a Conn calls net's WriteTo, which hands
// ReadFrom a wrapper only package net can see through, so it copies; call
// the Conn's ReadFrom directly to splice. Conn.File and Listener.File
// return a dup, SyscallConn the raw fd, and Listener.SetDeadline bounds
// Accept.
//
//	l, err := netpoll.Listen("tcp", ":8080") // the default group, configured by NETPOLL
//	...
//	http.Serve(l, handler)
//
// For control, create a Group from a Config and close it when done:
//
//	g, err := netpoll.New(netpoll.Config{Mode: netpoll.OneShot})
//	defer g.Close()
//	c, err := g.Dial(ctx, "tcp", "127.0.0.1:8080")
//
// The default group reads the NETPOLL environment variable on first use,
// for example NETPOLL=mode=oneshot,pollers=2 (see ParseConfig), so any
// program switches modes without a rebuild. A bad value is an error from
// Listen and Dial that names the key and the value; there is no silent
// fallback.
//
// # Model
//
// A Group owns one or more pollers; each poller owns one epoll instance and
// the loop that waits on it. Every fd (connection or listening socket) is a
// descriptor registered with one poller. Each direction of a descriptor,
// read and write, has one state word: idle, ready (an edge was seen since
// the last attempt) or waiting (a goroutine is parked). An operation first
// makes the syscall; only on EAGAIN does it consume a ready token and retry,
// or park until the poller, a deadline or Close wakes it. The state machine
// and its invariant are written out in desc_linux.go. Epoll events carry the
// fd and a per-registration generation, never a pointer, and events for an
// old generation are dropped.
//
// # Modes
//
// EdgeTriggered (the default) registers EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET
// once and never calls epoll_ctl again until close. It is safe because an
// operation always retries the syscall until EAGAIN before parking, and an
// edge that lands between the EAGAIN and the park is kept as a ready token.
//
// OneShot registers with EPOLLONESHOT and re-arms, with one EPOLL_CTL_MOD,
// exactly the directions that are parked, before every park. It is the
// baseline: one more syscall, and a kernel lock, per blocking operation.
//
// LevelTriggered registers EPOLLIN|EPOLLRDHUP once without EPOLLET: reads
// never call epoll_ctl. Level EPOLLOUT would fire on every epoll_wait for an
// idle writable socket, so it is armed (EPOLL_CTL_MOD) only while a writer is
// parked. A level event repeats until its reader reads. A thread poller
// (WaitBlock) that gets only repeats yields the P between polls
// so the readers run, and if they go on for 10ms (a conn whose owner is not
// reading) it disarms those readers until they park again; Stats count the
// disarms and the EPOLL_CTL_MOD that re-arms. A nested poller is not woken
// again for a level event still pending, so it never spins on one; for the
// same reason it arms a parking operation with EPOLL_CTL_DEL and ADD, not
// MOD, which would not wake it for an item epoll still has linked.
//
// # Pollers and sharing
//
// Config.Pollers epoll instances serve a group (DefaultPollers, 1, unless
// set: on the 2-CPU machines this project measures on, one nested poller is
// cheapest, and the runtime itself uses one epoll instance). Dial spreads
// new connections across pollers round-robin; an accepted connection stays
// on the poller that accepted it. Config.Sharing says how pollers share a
// listener:
//
//   - Single: one registration, accepted connections spread round-robin.
//   - Exclusive: the socket is added to every poller with EPOLLEXCLUSIVE, and
//     each poller's acceptor goroutine accepts for itself. The kernel always
//     wakes the same waiter first, so accepts are rebalanced: a poller above
//     the average re-adds itself to the back of the wait queue (as nginx
//     does) and hands its turn, as a ready token, to the least-loaded one.
//   - WakeAll: the same without EPOLLEXCLUSIVE: the thundering-herd baseline.
//   - ReusePort: one SO_REUSEPORT socket per poller (TCP only).
//
// A socket shared by pollers (Exclusive, WakeAll) is registered
// edge-triggered in every Mode: the kernel refuses EPOLLEXCLUSIVE with
// EPOLLONESHOT and with EPOLL_CTL_MOD, and a level-triggered socket shared
// by pollers would report every queued connection to all of them while
// nobody calls Accept. Connections keep the group's Mode.
//
// Exclusive needs pollers that sleep in their own epoll_wait (WaitBlock):
// with no Config.Wait (NETPOLL without a wait key) it gets
// WaitBlock, and New refuses it with WaitNested asked for. The kernel ends an exclusive
// wakeup at the first epoll instance that has a thread asleep in
// epoll_wait on it (ep_poll_callback sets ewake only then). A nested poller
// sleeps in the runtime's epoll instead, so the wakeup walks on through
// every exclusive entry: measured with 32 nested pollers, each connection
// woke every poller, as many wakeups as WakeAll.
//
// With WaitBlock pollers, WakeAll wakes every poller thread for each
// connection and Exclusive cuts context switches per accept fourfold at 8
// pollers and twelvefold at 32 (BenchmarkAcceptStream). With nested pollers
// the runtime's single epoll instance merges the herd's thread wakeups into
// one; WakeAll then costs extra goroutine wakeups, epoll_wait calls and
// failed accepts, not context switches.
//
// # Spinning
//
// Config.Spin > 0 keeps a poller polling with epoll_wait(0), yielding the P
// between polls so the goroutines it woke run, for that long after it last
// saw events, before it blocks. Spin < 0 never blocks: the poller holds a P
// and burns a whole CPU while the group is open, to see each event one
// epoll_wait(0) after it happens instead of through a kernel wakeup. Stats
// count spin polls and the polls that found events.
//
// SpinAuto is the default: the zero Config, and NETPOLL without a spin key,
// spin adaptively; Spin = 0 with SpinPolicy = SpinFixed (NETPOLL spin=0)
// never spins. Measured on a 2-vCPU guest with the server pinned to one CPU
// (testdata/spinauto/): 1 connection back to back, the requests per second
// of spinning forever at the CPU per request of not spinning; open loop at
// 2k and 10k req/s, the latency of not spinning within 10% of its CPU.
//
// Config.SpinPolicy = SpinAuto (NETPOLL spin=auto) lets each poller decide
// at every idle moment, the moment a poll after events finds nothing,
// whether to spin and for how long. It measures two costs on the running
// machine: C, the process CPU time that one blocked idle period costs (the
// park, the sleep and the wakeup; timed on one blocked period in 8, the
// median of the samples that can show it: none while another
// poller spins or finds events, nor from a long period the process spent
// mostly on CPU; Stats.BlockCost), and W, a wakeup round trip through the runtime's
// netpoller (measured when the first SpinAuto group starts, and again
// each second in which there was traffic and no poller held a spinning
// slot, Stats.WakeCost). Then:
//
//   - The budget B is twice the typical idle gap, at least 4W, but at most
//     2C (4W until C is measured) and 1ms (Stats.SpinBudget). A spin that finds no event within B
//     ends, and the poller blocks.
//   - The poller keeps an estimate p of how often a spin of B finds an
//     event, a moving average over its idle periods: a spin that found an
//     event counts as a hit, one that used up B as a miss, and an idle
//     period it blocked through as a hit if the next event came within B
//     (otherwise it tells nothing: the gap it saw holds its own wakeup).
//     It also keeps the same average over its spins alone: a spinner can
//     delay the event it waits for when it takes a CPU the peer needs, so
//     short gaps seen while blocked do not show that spins find events.
//   - It spins through every idle period once p reaches 1/2, until p falls
//     below 3/8, and only while its spins alone find an event at least
//     one time in 4, and while they pay: the time its spins take, hits and
//     misses alike, per event they find is at most 2C, a long average
//     (over about 64 spins). A spin that finds its event saves one blocked
//     period; spins that cost more than two of those per event found buy
//     latency with CPU, which a fixed Spin does on request and SpinAuto
//     does not (idle periods refused for this: Stats.SpinUnpaid). Measured
//     with the server pinned, a 1-connection closed loop's spins cost 1.0C
//     per event found and cut its CPU per request; a 10k req/s open loop's,
//     whose gaps straddle B, 3 to 4C, for no lower median latency.
//     Otherwise it spins only on every 64th idle moment, a probe
//     that notices when the traffic turns back to back, and not at all
//     while the typical gap is over twice B.
//   - At most max(1, GOMAXPROCS-1) pollers spin at once in the process,
//     and a spinning poller yields its P after every poll.
//   - A thread poller (WaitBlock, the default with Exclusive sharing) never
//     spins: on its locked OS thread a yield is a hand-off of the P to
//     another thread and back, so a spin poll costs the context switches
//     of the block it would save (8 Exclusive pollers: 20 context switches
//     per accept spinning, 4 not).
//
// The bound: in one idle period a SpinAuto poller spins at most B <= 2C
// (4W until C is measured) and 1ms, twice the CPU of the block it tries to save,
// so its CPU is at most three times that of the best choice made in
// hindsight (spin-then-block, Karlin et al., SOSP 1991). While its spins
// mostly fail, or cost more than 2C per event found, it spins in at most
// one idle period in 64. An idle poller stops
// spinning at most B after its last event and then blocks, using no CPU.
// C is read from the process CPU clock, so CPU that other goroutines
// spend during a timed blocked period counts too (other pollers' work does
// not: such samples are dropped): the bound is twice the block's cost when
// the poller is the process's only busy part, and looser the more else
// runs beside it.
//
// Under a CPU limit (a container's quota: cgroup v2 cpu.max, v1
// cpu.cfs_quota_us over cpu.cfs_period_us, the tightest from the process's
// cgroup up; Stats.CPULimit) spinning spends quota, and once the group has
// spent its quota the kernel stops every thread of it until the period
// ends: measured, spinning doubled the time a 1-connection echo server in
// a 0.5-CPU group was throttled and made its slowest requests wait 50ms,
// for no more requests per second. So with a limit L under the CPUs the
// process may run on, SpinAuto starts a spin only while the process used
// less than L/2 CPUs over the previous window of one period, has used
// less than that so far in the current one, and the group was not
// throttled in the previous window (cpu.stat's nr_throttled). A process
// that needs half its quota or more does not spin; one under half spins
// into that headroom and no further. Refused spins are counted
// (SpinRefused); the limit is read when the first SpinAuto group starts
// and again each second with traffic. A fixed Spin is not gated.
//
// Stats count the idle periods it spun through (SpinDecisions), the spins
// that found an event (SpinFound) or gave up (SpinGaveUp; a spin cut short
// by Close is neither) and the time spent in them (SpinTime). The policy and its measurements are in
// spin_linux.go.
//
// Config.BusyPoll sets Linux 6.9+ per-epoll kernel busy polling
// (EPIOCSPARAMS): epoll_wait polls the device's NAPI queue before sleeping.
// It needs a NAPI device with busy polling and does nothing on loopback.
//
// # Short reads
//
// A Read that returns fewer bytes than it asked for shows the socket
// drained, so by default (Config.ShortRead, NETPOLL shortread=on|off) the
// next Read on that Conn parks without the read syscall that would return
// EAGAIN, unless an edge came since the short read began; after a short
// TCP Write the rest waits for EPOLLOUT without the write that would return
// EAGAIN. golang/go#8891 tried this in 2014 and reads hung: an edge that
// came after the short read was erased by the next Read's reset, and the
// kernel ends a read early in a few places while more data, an EOF or an
// error is already queued, with no new edge to come. netpoll consumes an
// edge only just before a syscall, never after it, and keeps for good the
// event bits that announce those places (EPOLLPRI, which skipping
// connections register in every mode, EPOLLRDHUP, EPOLLHUP, EPOLLERR): any
// of them turns the saving off for that Conn. Unix sockets are read with
// recvmsg so that a read that stopped at a message carrying fds or other
// credentials (MSG_CTRUNC) does not count as short, and unix writes never
// skip. Code that has had the fd through SyscallConn (and may have set
// SO_RCVLOWAT, TCP_ULP, SO_PASSCRED or read with MSG_OOB) turns the saving
// off for that Conn too, and a Listener's SyscallConn or File turns it off
// for the Conns accepted after it, which inherit the listener's options
// (SO_RCVLOWAT among them). Stats.ShortSkips counts the operations that went
// to wait without a syscall. netpoll/DESIGN.md lists the kernel paths, with
// their lines, and the state machine; Read into memory that cannot be
// faulted in (a foreign mmap) is not supported with the saving on.
//
// # Wait strategies
//
// Config.Wait picks how a poller waits when it has no events: nested in the
// runtime's netpoller (the default), a dedicated OS thread in
// epoll_wait(-1), or, under WaitInline, the operation about to park waiting
// on the epoll fd itself.
// loop_linux.go says what each costs; testdata/core/ in the repository
// holds the measurements behind the default.
//
// WaitInline (opt-in) is WaitNested where the operation about
// to park, when no other watches the epoll fd, waits on it itself: the
// runtime readies it directly, one goroutine hop per wakeup where nested
// takes two (TestInlineOneHop counts it). An operation that leaves with its
// event while others wait leaves them unwatched until the next park, or
// until a timer fires and the poller's goroutine takes over: their wakeup
// can be that much later when a handler blocks outside netpoll between
// Reads. The timer's delay starts at 500 µs and doubles, up to 4 ms, each
// time it finds that an operation took the role back first (a timer per
// 500 µs woke an idle server once per request at 2k req/s); a takeover
// puts it back to 500 µs. So a waiter goes unwatched for at most 8 ms, and
// that only when the handlers stop parking after a run in which they came
// back quickly. With four operations or more waiting, a holder that
// leaves with its event gives the role to the poller's goroutine at once,
// which keeps it while it wakes them (Stats.CrowdHandoffs): a busy server
// waits as WaitNested does. An operation with a deadline waits behind the
// poller's goroutine. inline_linux.go has the rules. Measured (echo,
// testdata/issue21/inline/ and crowd/), it saves most of the nested
// poller's cost unpinned (GOMAXPROCS=2, 1 connection: 0.94-0.97x package
// net's CPU per request where nested spends 1.4-1.6x), and costs an
// epoll_wait per park more pinned to one CPU (1.15-1.18x net's CPU). Two
// things keep it from being the default: that pinned cost, and the
// unwatched window: a connection whose request comes while another's
// handler blocks outside netpoll waits for that handler or the timer
// (bench's BlockedNeighbour, a 2 ms block: worst round trip 2.3-3.4 ms,
// against 0.1 ms on WaitNested and package net). Under SpinAuto the
// operation waiting on the epoll fd spins as the nested loop would, by
// the same policy, and gives its spinning slot back whenever it leaves
// the role; a fixed Spin budget is refused with it.
//
// # Waiting without a buffer
//
// Conn.WaitRead parks until a Read would not: data, EOF or an error is
// queued. A goroutine that keeps its connection can wait with its stack
// alone and take a buffer (from a sync.Pool, say) only when there is
// something to read, which is most of what an idle connection costs
// (golang/go#15735). Unlike a wait on the edge alone, it asks the socket
// first (poll(2)), so what was queued before it, with no edge since, ends
// it at once, and a pending reset still reaches the next Read as a reset.
// The read deadline and Close end it as they end Read. A Read of an empty
// slice returns 0, nil at once, as on package net. grpc-go's readyreader
// pattern (SyscallConn().Read whose callback takes a pooled buffer) works
// too; like any SyscallConn use it turns short-read skipping off for the
// Conn.
//
// # Serving on demand
//
// A Server runs a Handler, written in ordinary blocking style, on a
// goroutine only while a connection has work, so that an idle connection
// holds no goroutine and no buffer (the programs that hold many idle
// connections, websockets, push, long poll, otherwise leave
// goroutine-per-connection for callback libraries for that):
//
//	s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
//		buf := pool.Get().(*[]byte)
//		defer pool.Put(buf)
//		n, err := c.Read(*buf) // blocks as usual if the request is not all here
//		if err != nil {
//			return err // closes the connection
//		}
//		_, err = c.Write((*buf)[:n])
//		return err // nil: call me again when there is more
//	})}
//	err := s.Serve(l)
//
// The guarantees. The handler is called when the connection is readable
// (data, EOF, an error such as a reset) or its read deadline has passed;
// write readiness alone never calls it. It may block as long as it likes
// mid-request, and at most one call runs per connection at a time; there
// is no pool of handler goroutines, so no bound that handlers waiting on
// each other could exhaust (a call is a goroutine, started by the edge
// that makes work and gone when it returns). When
// it returns nil, whatever is queued in the socket then, or comes later,
// calls it again, exactly once: the hand-off asks the socket (poll(2),
// which leaves a pending reset for the next Read, where recv with MSG_PEEK
// would consume it) unless the last Read was short and no edge came since,
// and an edge that may be stale is checked the same way before a call, so
// a handler never parks in Read on a connection with nothing to read. What
// a handler keeps in its own buffers (a bufio.Reader's Buffered bytes) the
// Server cannot see: a handler returns only when they hold nothing it must
// act on. Per-connection state lives in the handler's own value
// (Server.NewHandler makes one per connection).
//
// Ends. A handler's non-nil error closes the connection; so does a nil
// return after its Read met EOF or an error, or with its read deadline
// already past (it would otherwise be called again at once, for ever: a
// handler that answers an idle timeout, with a ping say, sets a new
// deadline or none). A read deadline that passes while the connection is
// idle calls the handler once, whose Read reports the timeout. Close from
// anywhere ends an idle connection without a call. A panicking handler is
// logged with its stack (Server.ErrorLog) and its connection closed; the
// Server goes on, as http.Server does. Server.ConnState reports new,
// active, idle and closed; closed exactly once per connection, which is
// the cleanup hook (an idle connection has no stack to defer on).
// Shutdown closes the listeners and the idle connections and waits for
// running handlers; Close ends everything at once.
//
// Other goroutines may write to an idle connection at any time (push,
// broadcast); a slow reader's backpressure parks only that writer. A Read
// from outside the handler while the connection is idle fails (the Server
// is waiting for it). Server.Conns lists the connections with their
// states, since an idle one is in no goroutine dump, and handler
// goroutines carry the pprof label netpoll=handler. Server.Stats counts
// idle and running connections, handler calls, hand-offs and their socket
// checks.
//
// What an idle connection costs (netpollbench's idle experiment, 18,000
// connections, testdata/issue32/idle): 0.34 KiB of resident memory as it
// is, 0.30 after runtime.GC and debug.FreeOSMemory, against 7.71 on
// package net with net/http's 4 KiB buffer; 267 bytes of live heap in 3
// objects (the descriptor, 144 bytes; the Conn, 48; the Server's record,
// 64) and its fd table slot. After a burst in which every connection was
// active at once, about 1.4 KiB: the runtime keeps the goroutines it
// made. The kernel's socket memory, which every library pays, is about
// 4.5 KiB per socket here (Slab). So a million idle
// connections need about 0.35 GB in the process and 4.5 GB in the kernel,
// and a limit of more than a million open files (RLIMIT_NOFILE,
// fs.nr_open). The garbage collector no longer scans a stack per idle
// connection, but with GOGC's default it collects the small heap more
// often: with 18,000 idle connections and 50 busy ones allocating 1 KiB
// per request (bench's BenchmarkIdleGC), a cycle took about 7.5 ms
// against 45 ms served goroutine-per-connection, but came 8 times as
// often, for 6.3% of the process's CPU against 4.8%. A program that
// holds memory for its own data, or sets GOMEMLIMIT, sees fewer cycles.
//
// On another package's connections (package net's listener), Serve falls
// back to one goroutine per connection that waits for readability with no
// buffer (SyscallConn().Read with the same poll(2) check) and calls the
// same handler, so a program can switch with a flag. The Server knows its
// own connections by their type, *Conn: a listener that wraps them gets
// the fallback, and one whose connections have no SyscallConn cannot be
// served.
//
// TLS: crypto/tls keeps records and buffers of its own, which the socket
// check cannot see, so serving a *tls.Conn on demand is not supported
// (its connections have no SyscallConn); serve the plain stream, or keep
// a goroutine per TLS connection.
//
// # Errors
//
// Errors are package net's: *net.OpError around an *os.SyscallError, a bare
// io.EOF on orderly shutdown, net.ErrClosed after Close, and
// os.ErrDeadlineExceeded (Timeout() true) after a deadline.
//
// An epoll_ctl that fails on a registration after it was added (a OneShot
// or LevelTriggered re-arm) fails that connection or listener: its
// operations, parked ones included, return an error wrapping
// os.NewSyscallError("epoll_ctl", errno), as does a Conn's Close, and a
// connection served on demand has its handler called, whose Read returns
// it. A Conn's Close also returns the error of an EPOLL_CTL_DEL that
// fails. An Exclusive listener's registration that balancing cannot add
// back is retried instead (see below).
//
// # Goroutine safety
//
// All methods of Group, Listener and Conn are safe for concurrent use.
// Concurrent Reads (or Writes) on one Conn are serialized, as in package
// net; a Read and a Write run in parallel.
//
// # Differences from package net
//
// Accept backs off on EMFILE, ENFILE, ENOBUFS and ENOMEM (5ms doubling to 1s,
// counted in Stats) instead of returning the error. An Exclusive
// listener's poller whose registration balancing cannot add back (ENOMEM,
// ENOSPC) returns the error from an Accept and adds it again with the same
// back-off, returning each failure likewise, while the other pollers
// accept. TCP keep-alive is on by default with package net's settings
// (Config.KeepAlive): the listening socket carries it and the connections
// it accepts inherit it, where package net sets it on each.
// Only stream sockets are served: tcp, tcp4, tcp6 and unix.
//
// Only Linux is supported; elsewhere New returns an error wrapping
// errors.ErrUnsupported.
package netpoll
