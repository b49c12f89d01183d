package netpoll

import (
	"testing"
	"unsafe"
)

// TestServerConnSize pins the Server's record of a connection, which every
// idle connection served on demand holds: inline dispatch's demotion count
// lives in the padding after state, so it costs nothing per connection.
func TestServerConnSize(t *testing.T) {
	if n := unsafe.Sizeof(serverConn{}); n != 64 {
		t.Errorf("serverConn is %d bytes, want 64", n)
	}
}
