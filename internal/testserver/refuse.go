package testserver

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// Refuser holds a loopback TCP port on which every connection is refused,
// for tests that need an address nothing listens on. Unlike a port that
// was free a moment ago, its port cannot be taken by another listener while
// the Refuser is open: it is a socket bound to the port (without
// SO_REUSEADDR, so no other socket may bind it) that never listens, and
// the kernel answers every connection attempt with a reset (ECONNREFUSED).
// It starts no goroutine. Close releases the port; Close is idempotent.
// Safe for concurrent use of Addr; Close must not race with itself.
type Refuser struct {
	fd   int
	port int
}

// NewRefuser binds a socket to 127.0.0.1 on a port the kernel picks.
func NewRefuser() (*Refuser, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("testserver: refuser socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("testserver: refuser bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("testserver: refuser getsockname: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok || in4.Port == 0 {
		syscall.Close(fd)
		return nil, fmt.Errorf("testserver: refuser: no port bound")
	}
	return &Refuser{fd: fd, port: in4.Port}, nil
}

// Addr is the "127.0.0.1:port" that refuses every connection while r is open.
func (r *Refuser) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Close releases the port. Idempotent.
func (r *Refuser) Close() {
	if r.fd >= 0 {
		syscall.Close(r.fd)
		r.fd = -1
	}
}
