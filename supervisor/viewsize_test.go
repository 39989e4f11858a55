package supervisor

import (
	"testing"
	"unsafe"
)

// TestViewSize: a published View is 224 bytes on a 64-bit platform, the
// size class every renewal's copy is allocated in; the flag that once
// followed Deadline made it 232, which rounds up to 240.
func TestViewSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are checked on 64-bit platforms")
	}
	if got, want := unsafe.Sizeof(View{}), uintptr(224); got > want {
		t.Fatalf("got a %d-byte View, want at most %d", got, want)
	}
}
