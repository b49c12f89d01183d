package loadproto

import (
	"bytes"
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
			s.Put(b, seq)
			if err := s.Check(b, seq); err != nil {
				t.Fatalf("size %d seq %d: %v", size, seq, err)
			}
		}
	}
}

func TestBodiesDiffer(t *testing.T) {
	s := newStream(t, 64, 1)
	a, b := make([]byte, 64), make([]byte, 64)
	s.Put(a, 1)
	s.Put(b, 2)
	if bytes.Equal(a[HeaderLen:], b[HeaderLen:]) {
		t.Error("consecutive messages carry the same body")
	}
	newStream(t, 64, 2).Put(b, 1)
	if bytes.Equal(a[HeaderLen:], b[HeaderLen:]) {
		t.Error("streams with different seeds carry the same body")
	}
}

func TestCheckDetects(t *testing.T) {
	const size = 64
	s := newStream(t, size, 7)
	msg := make([]byte, size)
	s.Put(msg, 42)

	for i := range size {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(msg)
			b[i] ^= mask
			if err := s.Check(b, 42); !errors.Is(err, ErrCorrupt) {
				t.Errorf("byte %d ^ %#x: got %v, want ErrCorrupt", i, mask, err)
			}
		}
	}

	tests := []struct {
		name string
		msg  func() []byte
		want error
	}{
		{"other seq", func() []byte { b := make([]byte, size); s.Put(b, 43); return b }, ErrSeq},
		{"other stream", func() []byte { b := make([]byte, size); newStream(t, size, 8).Put(b, 42); return b }, ErrCorrupt},
		{"short", func() []byte { return msg[:size-1] }, ErrCorrupt},
		{"long", func() []byte { return append(bytes.Clone(msg), 0) }, ErrCorrupt},
		{"zeros", func() []byte { return make([]byte, size) }, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Check(tt.msg(), 42); !errors.Is(err, tt.want) {
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

// FuzzCheck feeds arbitrary echoes to Check: it must not panic and must
// accept only the exact message.
func FuzzCheck(f *testing.F) {
	s := newStream(f, 32, 3)
	msg := make([]byte, 32)
	s.Put(msg, 5)
	f.Add(msg, uint64(5))
	f.Add(msg[:20], uint64(5))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64) {
		err := s.Check(b, seq)
		want := make([]byte, 32)
		s.Put(want, seq)
		if exact := bytes.Equal(b, want); exact != (err == nil) {
			t.Fatalf("exact message %v, Check error %v", exact, err)
		}
	})
}
