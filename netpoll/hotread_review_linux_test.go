package netpoll_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
	"golang.org/x/sys/unix"
)

// Review tests for hot reads (hotread, hotread_linux.go). Each runs its
// script with hotread=off, where it must pass (the script itself is
// sound), and with hotread=on, where it shows a defect. hotReadPair sets
// the sweeper's tick to an hour, which also makes every second woken park
// "busy": only the test's own script decides.

// TestHotReadReviewNonReadParks: a connection whose reads park in WaitRead
// (golang/go#15735's pattern, which WaitRead is for: wait with no buffer,
// then Read what came) or in a raw Read never parks in Conn.Read, so hot
// reads cannot save it a hop. Yet desc.awaitReady calls woken for every
// read park, so two such parks make it hot, and from then on each of its
// parks arms the disarmed registration (an EPOLL_CTL_MOD per park, where
// mode=et makes none) and the dup is held for nothing: the Reads keep the
// sweeper from finding it idle. Under hotread=off the same script makes no
// epoll_ctl at all.
func TestHotReadReviewNonReadParks(t *testing.T) {
	waits := map[string]func(c *netpoll.Conn, b []byte) error{
		"WaitRead": func(c *netpoll.Conn, b []byte) error {
			if err := c.WaitRead(); err != nil {
				return err
			}
			_, err := c.Read(b)
			return err
		},
		"raw": func(c *netpoll.Conn, b []byte) error {
			rc, err := c.SyscallConn()
			if err != nil {
				return err
			}
			var rerr error
			if err := rc.Read(func(fd uintptr) bool {
				_, rerr = unix.Read(int(fd), b)
				return rerr != unix.EAGAIN
			}); err != nil {
				return err
			}
			return rerr
		},
	}
	for name, wait := range waits {
		for _, set := range []string{"hotread=off", "hotread=on"} {
			t.Run(name+"/"+set, func(t *testing.T) {
				g, client, server, expired := hotReadPair(t, set)
				const rounds = 20
				before := netpoll.Counters(g).Total
				b := make([]byte, 1)
				for i := range rounds {
					res := make(chan error, 1)
					go func() { res <- wait(server, b) }()
					if !netpoll.AwaitReadState(server, "waiting", expired) {
						t.Fatalf("round %d: the read never parked", i)
					}
					if _, err := client.Write([]byte{byte(i)}); err != nil {
						t.Fatal(err)
					}
					if err := awaitResult(t, res, expired, "the read"); err != nil {
						t.Fatalf("round %d: %v", i, err)
					}
				}
				d := netpoll.Counters(g).Total
				if mods := d.CtlMod - before.CtlMod; mods != 0 || d.HotEntries != 0 {
					t.Errorf("%d parks outside Conn.Read: EPOLL_CTL_MOD %d, hot entries %d; want 0 and 0 (nothing a hot Read saves)",
						rounds, mods, d.HotEntries)
				}
			})
		}
	}
}

// TestHotReadReviewSweepLoadsFirst: the sweeper loads a wait's sequence
// word before it sets cold (hotSet.sweep, then hotWait.goCold), where
// hotread_linux.go's invariant says it sets cold first. A Read that begins
// between the two finds cold unset and waits hot, and the sweeper, with
// the even word it loaded, kicks nobody: the Conn it decided to make cold
// stays hot, its Read waiting on the dup. The next sweep finds the word
// changed and leaves it too, so the Read waits hot through a third sweep
// (an hour each here), where the documented bound is two. With cold
// stored before the word is (re)loaded, the staged sweep kicks the Read
// and it goes on waiting cold, on the poller.
func TestHotReadReviewSweepLoadsFirst(t *testing.T) {
	_, client, server, expired := hotReadPair(t, "hotread=on")
	heatRead(t, client, server)
	netpoll.SweepConnsHot() // the first after going hot: it finds the word changed
	finish := netpoll.SweepConnStaged(server)
	res := readAsync(server, 1)
	awaitHotWait(t, server, expired)
	finish() // the second sweep without a Read, as the sweeper saw it
	netpoll.SweepConnsHot()
	done, stuck := watchdog(t, 10*time.Second)
	defer done()
	if !await(stuck, func() bool { return netpoll.ReadState(server) == "waiting" }) {
		hot, waiting := netpoll.ConnHot(server)
		t.Errorf("after three sweeps, the last two with no Read finished: hot %v, waiting there %v; want the Read waiting cold", hot, waiting)
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := awaitResult(t, res, expired, "the Read"); err != nil {
		t.Fatal(err)
	}
}

// TestHotReadReviewEventErrSpins: readHot takes every error of the dup's
// RawConn.Read for a kick and loops. But the runtime also fails a read
// with ErrNotPollable while the last event its epoll reported for the fd
// was EPOLLERR alone (netpollcheckerr's eventErr), which prepareRead then
// returns at once, before the callback, on every try: the hot Read spins,
// a full CPU, until another event on the dup, and its sequence word moves
// on each turn, so no sweep ever finds it idle. A socket reports EPOLLERR
// alone whenever its error queue holds something (here a TX_ACK timestamp,
// SO_TIMESTAMPING) while it is neither readable nor writable. Cold, the
// Read wakes on that edge, finds EAGAIN and parks again; package net's
// Read returns the error. Here the Read must end up parked on the poller
// (cold) and then read what comes, as under hotread=off.
func TestHotReadReviewEventErrSpins(t *testing.T) {
	for _, set := range []string{"hotread=off", "hotread=on"} {
		t.Run(set, func(t *testing.T) {
			_, client, server, expired := hotReadPair(t, set)
			// A receive window the server's writes close at once, behind
			// a send queue that stays full (unwritable) through what
			// follows.
			if err := client.(*net.TCPConn).SetReadBuffer(8 << 10); err != nil {
				t.Fatal(err)
			}
			if err := server.SetWriteBuffer(256 << 10); err != nil {
				t.Fatal(err)
			}
			if set == "hotread=on" {
				heatRead(t, client, server)
			}
			rc, err := server.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			// SOF_TIMESTAMPING_TX_ACK | SOF_TIMESTAMPING_SOFTWARE |
			// SOF_TIMESTAMPING_OPT_TSONLY: a timestamp on the error queue
			// as the last byte of each send is acknowledged.
			const tsFlags = 1<<9 | 1<<4 | 1<<11
			var serr error
			rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPING, tsFlags)
			})
			if serr != nil {
				t.Skipf("SO_TIMESTAMPING: %v", serr)
			}
			res := readAsync(server, 1)
			if !netpoll.AwaitReadState(server, "waiting", expired) {
				t.Fatal("the Read never waited")
			}
			// Fill the send queue until the socket is not writable.
			chunk := make([]byte, 1024)
			rc.Control(func(fd uintptr) {
				for {
					if _, err := unix.Write(int(fd), chunk); err != nil {
						if err != unix.EAGAIN {
							serr = err
						}
						return
					}
				}
			})
			if serr != nil {
				t.Fatal(serr)
			}
			// Open the window by a few segments (64 KiB, loopback's MSS
			// and a fraction of what is queued): they go, are
			// acknowledged, and their timestamps queue an error while the
			// socket has nothing to read and stays unwritable.
			if _, err := io.ReadFull(client, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			done, stuck := watchdog(t, 5*time.Second)
			defer done()
			if !await(stuck, func() bool { return netpoll.ReadState(server) == "waiting" }) {
				hot, waiting := netpoll.ConnHot(server)
				t.Fatalf("the Read never parked on the poller after EPOLLERR alone (hot %v, waiting hot %v): it spins in readHot", hot, waiting)
			}
			if _, err := client.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := awaitResult(t, res, expired, "the Read"); err != nil {
				t.Fatalf("the Read: %v", err)
			}
		})
	}
}
