package netpoll_test

import (
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
