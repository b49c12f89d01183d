package netpoll

import (
	"testing"
	"unsafe"
)

// TestServerConnSize pins the Server's record of a connection, which every
// idle connection served on demand holds: inline dispatch's demotion count
// lives in the padding after state, so it costs nothing per connection.
// dispatch=hot's pointer to a busy connection's wait and the time of its
// last return live in the descriptor (desc.hotw, desc.busy), which a
// Conn's hot reads use too: the record is in the 64-byte size class, the
// descriptor in the 160-byte one (TestDescSize), 224 bytes as before.
func TestServerConnSize(t *testing.T) {
	if n := unsafe.Sizeof(serverConn{}); n != 64 {
		t.Errorf("serverConn is %d bytes, want 64", n)
	}
}
