// Package loadproto is the message format cmd/loadgen sends to echo servers.
//
// A message has a fixed size, at least HeaderLen bytes:
//
//	[0:4]   mark  uint32, big endian: Plain, or a request the server may
//	              honour before it answers (Delay, Memstats), or an answer
//	              that is not an echo (Stats)
//	[4:8]   seq   uint32, big endian: the message's index on its connection,
//	              modulo 2^32
//	[8:12]  len   uint32, big endian: the size of the whole message
//	[12:16] sum   uint32, big endian: CRC-32C of bytes [0:12] and [16:len]
//	[16:]   body  pseudo-random bytes, a function of the stream seed and seq
//
// An echo server returns the bytes unchanged and needs none of this. The
// client checks each echo byte for byte against the message it sent without
// keeping a copy: a Stream can rebuild message seq at any time. The checksum
// tells a damaged message (ErrCorrupt) from an intact one carrying another
// sequence number (ErrSeq).
//
// A Plain message starts with four zero bytes: a run never reaches 2^32
// messages on a connection, so Plain messages are those the format had
// before marks, when [0:8] was a 64-bit seq.
//
// Marks are for cmd/echoserver, which looks at the first four bytes of
// each Read (MarkOf) and may honour them: a Delay request it answers after
// its -delay (the blocked-neighbour cell), a Memstats request after
// collecting garbage, with a Stats answer carrying its memory figures (the
// idle experiment). A server that knows no marks echoes them like any
// bytes, and the client tells that apart (CheckStats). The marks are
// 32-bit values no Plain message starts with, and unlikely in the middle
// of one: a Read that starts mid-message (a short read) looks marked with
// probability 2^-32.
package loadproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
)

// HeaderLen is the size of the header and so the smallest message.
const HeaderLen = 16

// Mark is the first word of a message.
type Mark uint32

const (
	// Plain is a message to echo.
	Plain Mark = 0
	// Delay asks the server to hold its echo for a time it knows
	// (echoserver -delay): a handler blocked outside the server's poller.
	Delay Mark = 0xec0dde1a
	// Memstats asks the server to collect garbage and return freed memory
	// to the OS, then answer with Stats instead of the echo.
	Memstats Mark = 0xec0d5eed
	// Stats is the answer to Memstats: the request's seq and size, the
	// server's figures (StatsLen bytes) in the body, zeros after them.
	Stats Mark = 0xec0d57a7
)

func (m Mark) String() string {
	switch m {
	case Plain:
		return "plain"
	case Delay:
		return "delay"
	case Memstats:
		return "memstats"
	case Stats:
		return "stats"
	}
	return fmt.Sprintf("mark %#08x", uint32(m))
}

var (
	// ErrCorrupt reports an echo whose bytes differ from the message sent.
	ErrCorrupt = errors.New("corrupt echo")
	// ErrSeq reports an intact message that is not the one expected next.
	ErrSeq = errors.New("echo out of sequence")
	// ErrEchoed reports that a Memstats request came back as its echo:
	// the server does not collect on request.
	ErrEchoed = errors.New("the server echoed the memstats request")
)

// offsets is how many distinct bodies a Stream cycles through; prime, so
// the body offset does not line up with pipelines of power-of-two depth.
const offsets = 251

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// A Stream makes and checks the messages of one connection. It is not safe
// for concurrent use.
type Stream struct {
	size int
	// pool holds the bodies: message seq carries
	// pool[seq%offsets:][:size-HeaderLen]. Consecutive messages differ in
	// every byte but cost only a copy to build and a compare to check.
	pool []byte
}

// NewStream returns the stream of messages of the given size whose bodies
// derive from seed. Streams with different seeds have different bodies.
func NewStream(size int, seed uint64) (*Stream, error) {
	if size < HeaderLen || uint64(size) > math.MaxUint32 {
		return nil, fmt.Errorf("loadproto: message size %d outside [%d, %d]", size, HeaderLen, uint64(math.MaxUint32))
	}
	pool := make([]byte, size-HeaderLen+offsets)
	rng := rand.NewPCG(seed, 0x6c6f616470726f74) // "loadprot"
	for i := 0; i < len(pool); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		copy(pool[i:], w[:])
	}
	return &Stream{size: size, pool: pool}, nil
}

// Size returns the size of every message of the stream.
func (s *Stream) Size() int { return s.size }

func (s *Stream) body(seq uint64) []byte {
	off := seq % offsets
	return s.pool[off : off+uint64(s.size-HeaderLen)]
}

// Put writes message seq with mark m into b, which must be Size bytes long.
func (s *Stream) Put(b []byte, seq uint64, m Mark) {
	if len(b) != s.size {
		panic("loadproto: Put buffer length differs from the stream's message size")
	}
	binary.BigEndian.PutUint32(b[0:4], uint32(m))
	binary.BigEndian.PutUint32(b[4:8], uint32(seq))
	binary.BigEndian.PutUint32(b[8:12], uint32(s.size))
	copy(b[HeaderLen:], s.body(seq))
	binary.BigEndian.PutUint32(b[12:16], checksum(b))
}

// Check reports whether b is message seq with mark m, byte for byte. The
// error wraps ErrCorrupt if b is damaged and ErrSeq if b is an intact
// message with another sequence number.
func (s *Stream) Check(b []byte, seq uint64, m Mark) error {
	if err := s.intact(b, seq); err != nil {
		return err
	}
	if got := MarkOf(b); got != m {
		return fmt.Errorf("%w: seq %d: %v, want %v", ErrCorrupt, seq, got, m)
	}
	if want := s.body(seq); !bytes.Equal(b[HeaderLen:], want) {
		i := 0
		for b[HeaderLen+i] == want[i] {
			i++
		}
		return fmt.Errorf("%w: seq %d: body differs at byte %d", ErrCorrupt, seq, HeaderLen+i)
	}
	return nil
}

// intact checks b's size, checksum, length field and seq.
func (s *Stream) intact(b []byte, seq uint64) error {
	if len(b) != s.size {
		return fmt.Errorf("%w: %d bytes, want %d", ErrCorrupt, len(b), s.size)
	}
	if got, want := binary.BigEndian.Uint32(b[12:16]), checksum(b); got != want {
		return fmt.Errorf("%w: seq %d: checksum %#08x, computed %#08x", ErrCorrupt, seq, got, want)
	}
	if n := binary.BigEndian.Uint32(b[8:12]); n != uint32(s.size) {
		return fmt.Errorf("%w: seq %d: length field %d, want %d", ErrCorrupt, seq, n, s.size)
	}
	if got := binary.BigEndian.Uint32(b[4:8]); got != uint32(seq) {
		return fmt.Errorf("%w: got seq %d, want %d", ErrSeq, got, uint32(seq))
	}
	return nil
}

// MarkOf returns the mark b starts with: the server's view of the bytes
// of one Read. Fewer than 4 bytes are Plain.
func MarkOf(b []byte) Mark {
	if len(b) < 4 {
		return Plain
	}
	return Mark(binary.BigEndian.Uint32(b))
}

// Figures are what a server answers a Memstats request with, read after
// its collection (runtime/metrics' /gc/heap/live:bytes,
// /gc/heap/objects:objects, /sched/goroutines:goroutines and
// /memory/classes/heap/stacks:bytes: servecmd.Memstats).
type Figures struct {
	HeapLive, HeapObjects, Goroutines, Stacks uint64
}

// MemstatsPath is the HTTP counterpart of a Memstats request, for the
// idle experiment over net/http: cmd/httpserver answers GET MemstatsPath,
// after the same collection, with Figures as a JSON object (its field
// names as keys). A server that does not know it answers 404, as a server
// that knows no marks echoes a Memstats request.
const MemstatsPath = "/debug/memstats"

// StatsLen is the size of the figures in a Stats answer's body; a
// Memstats request must be at least HeaderLen+StatsLen bytes.
const StatsLen = 32

// PutStats turns b, the bytes of one Read, into the Stats answer with
// figures f if b is exactly one Memstats request (its length field, its
// checksum and room for the figures), and reports whether it did;
// otherwise b is left as it was, to be echoed.
func PutStats(b []byte, f Figures) bool {
	if MarkOf(b) != Memstats || len(b) < HeaderLen+StatsLen || binary.BigEndian.Uint32(b[8:12]) != uint32(len(b)) ||
		binary.BigEndian.Uint32(b[12:16]) != checksum(b) {
		return false
	}
	binary.BigEndian.PutUint32(b[0:4], uint32(Stats))
	body := b[HeaderLen:]
	clear(body)
	for i, v := range []uint64{f.HeapLive, f.HeapObjects, f.Goroutines, f.Stacks} {
		binary.BigEndian.PutUint64(body[8*i:], v)
	}
	binary.BigEndian.PutUint32(b[12:16], checksum(b))
	return true
}

// CheckStats reads b, the answer to the Memstats request seq. It returns
// the figures of a Stats answer; ErrEchoed if b is the request's echo (the
// server does not know the mark); otherwise an error wrapping ErrCorrupt
// or ErrSeq, as Check's.
func (s *Stream) CheckStats(b []byte, seq uint64) (Figures, error) {
	if s.size < HeaderLen+StatsLen {
		return Figures{}, fmt.Errorf("loadproto: a %d-byte stream has no room for the memstats figures (%d bytes)", s.size, HeaderLen+StatsLen)
	}
	if s.Check(b, seq, Memstats) == nil {
		return Figures{}, ErrEchoed
	}
	if err := s.intact(b, seq); err != nil {
		return Figures{}, err
	}
	if m := MarkOf(b); m != Stats {
		return Figures{}, fmt.Errorf("%w: seq %d: %v, want the stats answer", ErrCorrupt, seq, m)
	}
	body := b[HeaderLen:]
	for i, c := range body[StatsLen:] {
		if c != 0 {
			return Figures{}, fmt.Errorf("%w: seq %d: stats answer not zero after its figures, at byte %d", ErrCorrupt, seq, HeaderLen+StatsLen+i)
		}
	}
	return Figures{binary.BigEndian.Uint64(body[0:]), binary.BigEndian.Uint64(body[8:]),
		binary.BigEndian.Uint64(body[16:]), binary.BigEndian.Uint64(body[24:])}, nil
}

// checksum is the CRC-32C of message b without its sum field.
func checksum(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[:12], castagnoli), castagnoli, b[HeaderLen:])
}
