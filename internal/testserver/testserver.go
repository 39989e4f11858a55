package testserver

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// ErrNoServer means neither the environment nor PATH offers a server.
var ErrNoServer = errors.New("testserver: no server available")

// FindBinary returns the first of names found on PATH or, failing that, in
// one of the directories matched by the glob patterns in extra (Debian keeps
// PostgreSQL's server binaries in /usr/lib/postgresql/*/bin).
func FindBinary(names []string, extra ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	for _, pattern := range extra {
		dirs, _ := filepath.Glob(pattern)
		for i := len(dirs) - 1; i >= 0; i-- { // newest version first
			for _, n := range names {
				p := filepath.Join(dirs[i], n)
				if _, err := exec.LookPath(p); err == nil {
					return p, nil
				}
			}
		}
	}
	return "", ErrNoServer
}

// fromEnvOrStart is Redis and Postgres: the value of envVar, with a stop that
// does nothing, when it is set; otherwise the address (per addr) of a private
// server from start, with its Stop. stop is never nil.
func fromEnvOrStart[S interface{ Stop() }](envVar string, start func() (S, error), addr func(S) string) (string, func(), error) {
	if v := os.Getenv(envVar); v != "" {
		return v, func() {}, nil
	}
	s, err := start()
	if err != nil {
		return "", func() {}, err
	}
	return addr(s), s.Stop, nil
}

// Addr formats a loopback address.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
