package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestReservePort: reserved ports lie outside the ephemeral range, are
// distinct while held, and are locked against every other reservation
// (another test binary's included: flock on another open file) until
// released.
//
// Not parallel: while another test of this process starts a server, the
// forked child shares every open file description, the lock files'
// included, until its exec closes them, so for that moment a released
// port still reads as locked (seen in a full run: 9 of 50 ports at once).
// Sequential tests run while no parallel test does.
func TestReservePort(t *testing.T) {
	ranges := serverPortRanges()
	inRange := func(p int) bool {
		for _, r := range ranges {
			if p >= r[0] && p <= r[1] {
				return true
			}
		}
		return false
	}
	held := map[int]*reservedPort{}
	for range 50 {
		r, err := reservePort()
		if err != nil {
			t.Fatal(err)
		}
		if !inRange(r.port) {
			t.Fatalf("port %d outside %v", r.port, ranges)
		}
		if _, dup := held[r.port]; dup {
			t.Fatalf("port %d reserved twice", r.port)
		}
		held[r.port] = r
	}
	for port, r := range held {
		if r.lock == nil {
			t.Skip("lock directory unusable here")
		}
		f, err := os.Open(filepath.Join(portLockDir(), strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			t.Errorf("port %d: a second lock succeeded while reserved", port)
		}
		r.release()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Errorf("port %d: lock after release: %v", port, err)
		}
		f.Close()
		r.release() // idempotent
	}
}

// TestServerPortRangesAvoidTheEphemeralRange: no drawn range overlaps the
// kernel's ephemeral range (when it leaves room outside it).
func TestServerPortRangesAvoidTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ip_local_port_range")
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo <= 10000 && hi >= 65535 {
		t.Skip("the whole range is ephemeral")
	}
	for _, r := range serverPortRanges() {
		if r[0] <= hi && r[1] >= lo {
			t.Errorf("range %v overlaps the ephemeral range %d-%d", r, lo, hi)
		}
	}
}
