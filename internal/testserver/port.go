package testserver

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A private server's port must stay ours for the server's whole life,
// restarts included (Restart keeps the address, and between the old
// process's exit and the new one's bind nothing holds the port). A port
// that was merely free a moment ago (one a port-0 listener got and closed)
// can be taken in that gap by any listener on port 0 or any outgoing
// connection, since the kernel hands those out from the same ephemeral
// range. So servers get their ports from
// reservePort instead:
//
//   - ports outside the kernel's ephemeral range (ip_local_port_range), which
//     the kernel never gives to a port-0 listener or an outgoing connection;
//   - each held, for as long as the server lives, by an exclusive flock on a
//     file named after the port in a directory shared by every test binary
//     of the machine, so two test binaries never pick the same port (the
//     kernel drops the lock when the holder exits, even on SIGKILL);
//   - and checked free by a bind before use, against anything else.

// reservedPort is a port held by this process through its lock file.
// Not safe for concurrent use; its owner releases it once.
type reservedPort struct {
	port int
	lock *os.File // nil when the lock directory is unusable: bind check only
}

// release gives the port back. Idempotent.
func (r *reservedPort) release() {
	if r != nil && r.lock != nil {
		_ = r.lock.Close() // drops the flock
		r.lock = nil
	}
}

// portLockDir is the directory of the port lock files: under /tmp when
// there is one, whatever TMPDIR says, so that test binaries run with
// different TMPDIRs still see each other's reservations; otherwise under
// os.TempDir().
func portLockDir() string {
	parent := "/tmp"
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		parent = os.TempDir()
	}
	return filepath.Join(parent, "leasekit-testserver-ports")
}

// portTries bounds the random draws of reservePort.
const portTries = 200

// reservePort picks a random free loopback port outside the ephemeral range
// and locks it for this process.
func reservePort() (*reservedPort, error) {
	ranges := serverPortRanges()
	total := 0
	for _, r := range ranges {
		total += r[1] - r[0] + 1
	}
	dir := portLockDir()
	useLocks := os.MkdirAll(dir, 0o777) == nil
	if useLocks {
		_ = os.Chmod(dir, 0o1777|os.ModeSticky) // shared by every user's test binaries; best effort
	}
	var lastErr error = errors.New("no port tried")
	for range portTries {
		n := rand.IntN(total)
		port := 0
		for _, r := range ranges {
			if size := r[1] - r[0] + 1; n < size {
				port = r[0] + n
				break
			} else {
				n -= size
			}
		}
		var lock *os.File
		if useLocks {
			f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDONLY|os.O_CREATE, 0o644) // flock needs no write access
			switch {
			case err != nil:
				// Not ours to lock (another user's file): the bind check
				// below still applies.
			case syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil:
				f.Close() // another test binary holds it
				lastErr = fmt.Errorf("port %d reserved by another test binary", port)
				continue
			default:
				lock = f
			}
		}
		l, err := net.Listen("tcp", Addr(port))
		if err != nil {
			if lock != nil {
				lock.Close()
			}
			lastErr = err
			continue
		}
		l.Close()
		return &reservedPort{port: port, lock: lock}, nil
	}
	return nil, fmt.Errorf("testserver: no free port outside the ephemeral range in %d tries: %w", portTries, lastErr)
}

// serverPortRanges returns the inclusive port ranges reservePort draws from:
// 10000 to 65535 minus the kernel's ephemeral range (Linux's default,
// 32768–60999, leaves 10000–32767 and 61000–65535).
func serverPortRanges() [][2]int {
	lo, hi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				lo, hi = l, h
			}
		}
	}
	var out [][2]int
	if lo > 10000 {
		out = append(out, [2]int{10000, lo - 1})
	}
	if hi < 65535 {
		out = append(out, [2]int{max(hi+1, 10000), 65535})
	}
	if len(out) == 0 { // the whole range is ephemeral: the lock still helps
		out = append(out, [2]int{10000, 65535})
	}
	return out
}
