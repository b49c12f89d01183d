package netpoll

import (
	"testing"
	"unsafe"
)

// TestServerConnSize pins the Server's record of a connection, which every
// idle connection served on demand holds: inline dispatch's demotion count
// lives in the padding after state, so it costs nothing per connection;
// dispatch=hot's pointer to a busy connection's wait (hot) and the time of
// its last return (returned) cost 16 bytes, which take the record from the
// 64-byte size class to the 80-byte one.
func TestServerConnSize(t *testing.T) {
	if n := unsafe.Sizeof(serverConn{}); n != 80 {
		t.Errorf("serverConn is %d bytes, want 80", n)
	}
}
