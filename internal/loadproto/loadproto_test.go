package loadproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func newStream(t testing.TB, size int, seed uint64) *Stream {
	t.Helper()
	s, err := NewStream(size, seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	for _, size := range []int{HeaderLen, HeaderLen + 1, 64, 4096} {
		s := newStream(t, size, 1)
		b := make([]byte, size)
		for seq := range uint64(2 * offsets) {
			s.Put(b, seq, Plain)
			if err := s.Check(b, seq, Plain); err != nil {
				t.Fatalf("size %d seq %d: %v", size, seq, err)
			}
		}
	}
}

func TestBodiesDiffer(t *testing.T) {
	s := newStream(t, 64, 1)
	a, b := make([]byte, 64), make([]byte, 64)
	s.Put(a, 1, Plain)
	s.Put(b, 2, Plain)
	if bytes.Equal(a[HeaderLen:], b[HeaderLen:]) {
		t.Error("consecutive messages carry the same body")
	}
	newStream(t, 64, 2).Put(b, 1, Plain)
	if bytes.Equal(a[HeaderLen:], b[HeaderLen:]) {
		t.Error("streams with different seeds carry the same body")
	}
}

func TestCheckDetects(t *testing.T) {
	const size = 64
	s := newStream(t, size, 7)
	msg := make([]byte, size)
	s.Put(msg, 42, Plain)

	for i := range size {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(msg)
			b[i] ^= mask
			if err := s.Check(b, 42, Plain); !errors.Is(err, ErrCorrupt) {
				t.Errorf("byte %d ^ %#x: got %v, want ErrCorrupt", i, mask, err)
			}
		}
	}

	tests := []struct {
		name string
		msg  func() []byte
		want error
	}{
		{"other seq", func() []byte { b := make([]byte, size); s.Put(b, 43, Plain); return b }, ErrSeq},
		{"other stream", func() []byte { b := make([]byte, size); newStream(t, size, 8).Put(b, 42, Plain); return b }, ErrCorrupt},
		{"other mark", func() []byte { b := make([]byte, size); s.Put(b, 42, Delay); return b }, ErrCorrupt},
		{"short", func() []byte { return msg[:size-1] }, ErrCorrupt},
		{"long", func() []byte { return append(bytes.Clone(msg), 0) }, ErrCorrupt},
		{"zeros", func() []byte { return make([]byte, size) }, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Check(tt.msg(), 42, Plain); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestNewStreamSize(t *testing.T) {
	if _, err := NewStream(HeaderLen-1, 0); err == nil {
		t.Errorf("size %d accepted", HeaderLen-1)
	}
}

// TestPlainFormat: a Plain message is the one the format had before
// marks, when [0:8] was a 64-bit big-endian seq: four zero bytes, then
// seq's low 32 bits.
func TestPlainFormat(t *testing.T) {
	s := newStream(t, 64, 1)
	b := make([]byte, 64)
	s.Put(b, 0x01020304, Plain)
	if want := []byte{0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 64}; !bytes.Equal(b[:12], want) {
		t.Errorf("header % x, want % x", b[:12], want)
	}
	if MarkOf(b) != Plain || MarkOf(b[:3]) != Plain {
		t.Errorf("MarkOf a plain message: %v", MarkOf(b))
	}
}

// TestMarks: a marked message carries its mark where MarkOf reads it, and
// checks only against that mark.
func TestMarks(t *testing.T) {
	s := newStream(t, 64, 1)
	for _, m := range []Mark{Plain, Delay, Memstats, Stats} {
		b := make([]byte, 64)
		s.Put(b, 9, m)
		if got := MarkOf(b); got != m {
			t.Errorf("MarkOf(%v message) = %v", m, got)
		}
		if err := s.Check(b, 9, m); err != nil {
			t.Errorf("%v: %v", m, err)
		}
		for _, other := range []Mark{Plain, Delay, Memstats, Stats} {
			if err := s.Check(b, 9, other); other != m && !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v message checked as %v: %v, want ErrCorrupt", m, other, err)
			}
		}
	}
}

// TestStats: PutStats answers exactly one whole Memstats request, and
// CheckStats reads the figures back; the request's echo is ErrEchoed; a
// damaged answer is ErrCorrupt and another seq's ErrSeq.
func TestStats(t *testing.T) {
	s := newStream(t, 64, 1)
	want := Figures{HeapLive: 123488, HeapObjects: 377, Goroutines: 16, Stacks: 360448}
	req := make([]byte, 64)
	s.Put(req, 3, Memstats)
	if _, err := s.CheckStats(req, 3); !errors.Is(err, ErrEchoed) {
		t.Errorf("the echoed request: %v, want ErrEchoed", err)
	}
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"plain", func() []byte { b := make([]byte, 64); s.Put(b, 3, Plain); return b }()},
		{"delay", func() []byte { b := make([]byte, 64); s.Put(b, 3, Delay); return b }()},
		{"short read", bytes.Clone(req[:40])},
		{"two requests", append(bytes.Clone(req), req...)},
		{"damaged", func() []byte { b := bytes.Clone(req); b[30] ^= 1; return b }()},
	} {
		b := bytes.Clone(tt.b)
		if PutStats(b, want) || !bytes.Equal(b, tt.b) {
			t.Errorf("%s: PutStats answered, or changed the bytes", tt.name)
		}
	}
	if n := newStream(t, HeaderLen+StatsLen-1, 1); true {
		b := make([]byte, n.Size())
		n.Put(b, 0, Memstats)
		if PutStats(b, want) {
			t.Errorf("PutStats answered a %d-byte request: no room for the figures", len(b))
		}
		if _, err := n.CheckStats(b, 0); err == nil || errors.Is(err, ErrEchoed) {
			t.Errorf("CheckStats on a %d-byte stream: %v, want an error saying it has no room", len(b), err)
		}
	}
	ans := bytes.Clone(req)
	if !PutStats(ans, want) {
		t.Fatal("PutStats did not answer a whole request")
	}
	if MarkOf(ans) != Stats {
		t.Errorf("answer marked %v", MarkOf(ans))
	}
	if got, err := s.CheckStats(ans, 3); err != nil || got != want {
		t.Errorf("CheckStats = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.CheckStats(ans, 4); !errors.Is(err, ErrSeq) {
		t.Errorf("answer to another request: %v, want ErrSeq", err)
	}
	for i := range ans {
		b := bytes.Clone(ans)
		b[i] ^= 0x40
		if _, err := s.CheckStats(b, 3); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrSeq) {
			t.Errorf("answer with byte %d damaged: %v, want ErrCorrupt or ErrSeq", i, err)
		}
	}
}

// FuzzCheck feeds arbitrary echoes to Check: it must not panic and must
// accept only the exact message.
func FuzzCheck(f *testing.F) {
	s := newStream(f, 32, 3)
	msg := make([]byte, 32)
	s.Put(msg, 5, Plain)
	f.Add(msg, uint64(5))
	f.Add(msg[:20], uint64(5))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64) {
		err := s.Check(b, seq, Plain)
		want := make([]byte, 32)
		s.Put(want, seq, Plain)
		if exact := bytes.Equal(b, want); exact != (err == nil) {
			t.Fatalf("exact message %v, Check error %v", exact, err)
		}
	})
}

// FuzzStats feeds arbitrary reads to PutStats, as a server would, and
// arbitrary answers to CheckStats: neither panics; PutStats changes only
// a whole Memstats request, into an answer CheckStats accepts with the
// figures given; CheckStats accepts nothing else.
func FuzzStats(f *testing.F) {
	s := newStream(f, 64, 3)
	req := make([]byte, 64)
	s.Put(req, 5, Memstats)
	f.Add(req, uint64(5), uint64(1))
	f.Add(req[:20], uint64(5), uint64(2))
	f.Add([]byte{}, uint64(0), uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, seq, v uint64) {
		in := bytes.Clone(b)
		fig := Figures{v, v + 1, v + 2, v + 3}
		answered := PutStats(b, fig)
		if !answered && !bytes.Equal(b, in) {
			t.Fatal("PutStats changed bytes it did not answer")
		}
		want := make([]byte, 64)
		s.Put(want, seq, Memstats)
		if bytes.Equal(in, want) && !answered {
			t.Fatalf("request %d not answered", seq)
		}
		if answered && len(b) == 64 {
			// Any whole request of the stream's size, whatever its body.
			got, err := s.CheckStats(b, uint64(binary.BigEndian.Uint32(in[4:8])))
			if err != nil || got != fig {
				t.Fatalf("answer % x: %+v, %v; want %+v", b, got, err, fig)
			}
		}
		if _, err := s.CheckStats(b, seq); !answered && err == nil {
			t.Fatalf("CheckStats accepted bytes no server answered: % x", in)
		}
	})
}
