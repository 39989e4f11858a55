package testserver

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefuserRefusesAndHoldsItsPort: a dial to a Refuser's address is
// refused, and no listener can take the port while the Refuser is open.
func TestRefuserRefusesAndHoldsItsPort(t *testing.T) {
	t.Parallel()
	r, err := NewRefuser()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range 3 {
		c, err := net.DialTimeout("tcp", r.Addr(), 5*time.Second)
		if err == nil {
			c.Close()
			t.Fatal("dial to a refuser succeeded")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial: %v; want ECONNREFUSED", err)
		}
	}
	if ln, err := net.Listen("tcp", r.Addr()); err == nil {
		ln.Close()
		t.Fatal("a listener took the refuser's port")
	}
	r.Close()
	r.Close() // idempotent
}
