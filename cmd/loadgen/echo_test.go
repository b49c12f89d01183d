package main

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// echoOnce sends request 7 of a 64-byte stream through a peer that reads it
// and writes back reply(request), then closes. It returns the outcome as
// a tally records it.
func echoOnce(t *testing.T, reply func(req []byte) []byte) (errKind, error) {
	t.Helper()
	client, peer := net.Pipe()
	defer client.Close()
	// Watchdog: a test that would hang fails with a timeout instead.
	deadline := time.Now().Add(5 * time.Second)
	client.SetDeadline(deadline)
	peer.SetDeadline(deadline)

	ec, err := newEchoConn(client, 64, 1, loadproto.Plain)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		defer peer.Close()
		req := make([]byte, 64)
		if _, err := io.ReadFull(peer, req); err != nil {
			done <- err
			return
		}
		_, err := peer.Write(reply(req))
		done <- err
	}()
	if err := ec.send(7); err != nil {
		t.Fatalf("send: %v", err)
	}
	err = ec.recv(7)
	if perr := <-done; perr != nil {
		t.Fatalf("peer: %v", perr)
	}
	if err == nil {
		return 0, nil
	}
	tl := newTally(t0, t0.Add(time.Second))
	if tl.record(t0, t0, err) {
		t.Errorf("connection goes on after %v", err)
	}
	k := classify(err)
	if tl.errs[k].Load() != 1 || tl.err != err {
		t.Errorf("tally did not count %v as %v", err, k)
	}
	return k, err
}

func TestEchoVerifies(t *testing.T) {
	other := make([]byte, 64)
	s, err := loadproto.NewStream(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	s.Put(other, 8, loadproto.Plain)

	tests := []struct {
		name  string
		reply func([]byte) []byte
		ok    bool
		want  errKind
	}{
		{name: "intact", reply: func(b []byte) []byte { return b }, ok: true},
		{name: "next seq", reply: func([]byte) []byte { return other }, want: kindSeq},
		{name: "short", reply: func(b []byte) []byte { return b[:40] }, want: kindShort},
		{name: "nothing", reply: func([]byte) []byte { return nil }, want: kindShort},
		{name: "first half of two", reply: func(b []byte) []byte { return append(b[:32:32], other[32:]...) }, want: kindCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := echoOnce(t, tt.reply)
			if tt.ok != (err == nil) || (!tt.ok && k != tt.want) {
				t.Errorf("got %v (%v), want ok %v kind %v", err, k, tt.ok, tt.want)
			}
		})
	}
}

// TestEchoDetectsCorruptByte flips each byte of the echo in turn, header
// included.
func TestEchoDetectsCorruptByte(t *testing.T) {
	for i := range 64 {
		k, err := echoOnce(t, func(b []byte) []byte {
			b = bytes.Clone(b)
			b[i] ^= 0x20
			return b
		})
		if err == nil || k != kindCorrupt {
			t.Errorf("byte %d flipped: got %v (%v), want a corrupt echo", i, err, k)
		}
	}
}
