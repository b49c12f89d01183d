package netpoll_test

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/netpoll"
)

// TestServeBatchBlockedOneP is FuzzServeRole's script "Bab" on a real
// Server: at GOMAXPROCS=1 one poll readies two served connections, a and
// b; a's handler blocks outside netpoll until b's handler has run. Run
// inline after a, as the role first did, b waited in the role's queue with
// its edge taken from the epoll fd by that poll, so the armed watch port
// had nothing to fire on and no other event came: the test failed at its
// watchdog. b now runs on a worker (serveRole.spread). The watchdog fails
// the test rather than hang.
func TestServeBatchBlockedOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	g := newGroup(t, cfgOf(t, "spin=off,dispatch=inline"))
	l := listen(t, g, "tcp")
	done, stop := watchdog(t, 10*time.Second)
	defer done()
	bRan := make(chan struct{})
	s := &netpoll.Server{Handler: netpoll.HandlerFunc(func(c net.Conn) error {
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		switch b[0] {
		case 'a':
			select {
			case <-bRan:
			case <-stop:
				return errors.New("b's handler never ran while a's blocked")
			}
		case 'b':
			close(bRan)
		}
		_, err := c.Write(b[:])
		return err
	})}
	serveOn(t, s, l)
	ca, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	got := make([]byte, 1)
	for _, c := range []net.Conn{ca, cb} {
		if err := echo1(c, []byte("x"), got); err != nil {
			t.Fatal(err)
		}
	}
	awaitRest(t, g, s, stop)

	entered, releasePoll := make(chan struct{}), make(chan struct{})
	armed := make(chan struct{}, 1)
	armed <- struct{}{}
	defer netpoll.SetServePollHook(func() {
		select {
		case <-armed:
			close(entered)
			<-releasePoll
		default:
		}
	})()
	ca.Write([]byte("a"))
	<-entered // the holder is about to poll: both edges will be in it
	cb.Write([]byte("b"))
	close(releasePoll)
	// b's echo comes once b's handler has run: at once, or, with b
	// stranded, only after the watchdog has made a's handler return.
	if _, err := io.ReadFull(cb, got); err != nil {
		t.Fatalf("b's echo: %v", err)
	}
	select {
	case <-stop:
		t.Fatal("b was served only after the watchdog fired: stranded in the role's queue behind a's blocked handler")
	default:
	}
	if _, err := io.ReadFull(ca, got); err != nil {
		t.Fatalf("a's echo: %v", err)
	}
}
