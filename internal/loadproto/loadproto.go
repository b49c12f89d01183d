// Package loadproto is the message format cmd/loadgen sends to echo servers.
//
// A message has a fixed size, at least HeaderLen bytes:
//
//	[0:8]   seq   uint64, big endian: the message's index on its connection
//	[8:12]  len   uint32, big endian: the size of the whole message
//	[12:16] sum   uint32, big endian: CRC-32C of bytes [0:12] and [16:len]
//	[16:]   body  pseudo-random bytes, a function of the stream seed and seq
//
// An echo server returns the bytes unchanged and needs none of this. The
// client checks each echo byte for byte against the message it sent without
// keeping a copy: a Stream can rebuild message seq at any time. The checksum
// tells a damaged message (ErrCorrupt) from an intact one carrying another
// sequence number (ErrSeq).
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

var (
	// ErrCorrupt reports an echo whose bytes differ from the message sent.
	ErrCorrupt = errors.New("corrupt echo")
	// ErrSeq reports an intact message that is not the one expected next.
	ErrSeq = errors.New("echo out of sequence")
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

// Put writes message seq into b, which must be Size bytes long.
func (s *Stream) Put(b []byte, seq uint64) {
	if len(b) != s.size {
		panic("loadproto: Put buffer length differs from the stream's message size")
	}
	binary.BigEndian.PutUint64(b[0:8], seq)
	binary.BigEndian.PutUint32(b[8:12], uint32(s.size))
	copy(b[HeaderLen:], s.body(seq))
	binary.BigEndian.PutUint32(b[12:16], checksum(b))
}

// Check reports whether b is message seq, byte for byte. The error wraps
// ErrCorrupt if b is damaged and ErrSeq if b is an intact message with
// another sequence number.
func (s *Stream) Check(b []byte, seq uint64) error {
	if len(b) != s.size {
		return fmt.Errorf("%w: %d bytes, want %d", ErrCorrupt, len(b), s.size)
	}
	if got, want := binary.BigEndian.Uint32(b[12:16]), checksum(b); got != want {
		return fmt.Errorf("%w: seq %d: checksum %#08x, computed %#08x", ErrCorrupt, seq, got, want)
	}
	if n := binary.BigEndian.Uint32(b[8:12]); n != uint32(s.size) {
		return fmt.Errorf("%w: seq %d: length field %d, want %d", ErrCorrupt, seq, n, s.size)
	}
	if got := binary.BigEndian.Uint64(b[0:8]); got != seq {
		return fmt.Errorf("%w: got seq %d, want %d", ErrSeq, got, seq)
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

// checksum is the CRC-32C of message b without its sum field.
func checksum(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[:12], castagnoli), castagnoli, b[HeaderLen:])
}
