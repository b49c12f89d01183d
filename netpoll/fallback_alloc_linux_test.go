package netpoll

import (
	"net"
	"testing"
)

// TestFallbackWaitAllocatesNothing: the fallback's wait for readability on
// a package net connection (rawWaiter) allocates nothing per request once
// the connection's waiter is made, and reports the data it waited for.
func TestFallbackWaitAllocatesNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	rc, err := server.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	w := &rawWaiter{rc: rc}
	w.check = w.readable
	var b [1]byte
	request := func() {
		if _, err := client.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		if err := w.wait(); err != nil || !w.waited || w.hangUp {
			t.Fatalf("wait = %v, waited %v, hang-up %v; want nil, true, false", err, w.waited, w.hangUp)
		}
		if _, err := server.Read(b[:]); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(1000, request); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
	client.Close()
	if err := w.wait(); err != nil || !w.hangUp {
		t.Errorf("after the peer closed: wait = %v, hang-up %v; want nil, true", err, w.hangUp)
	}
}
