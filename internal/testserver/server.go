package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// server is what RedisServer and PostgresServer share: one private server
// process on a fixed loopback port with its own temporary directory, and the
// control methods over it (start and wait until ready, stop for good, kill,
// restart, pause and resume). The exported types embed it and add what is
// particular to their server: how to tell that it is ready, which signals
// shut it down, their addresses.
//
// Its control methods are safe for concurrent use and serialised by mu: a
// shutdown waits for a restart in progress. It starts no goroutine.
type server struct {
	name string // "redis" or "postgres", for error messages
	bin  string // the server executable
	dir  string // working directory, removed by shutdown
	port int    // fixed for the server's life, so restart keeps the address
	// ports holds the reservations of port (and of any other port the
	// server uses) from start until shutdown releases them.
	ports []*reservedPort
	args  []string // command line, fixed at start

	cred *syscall.Credential // the OS user the server runs as; nil: ours
	env  []string            // the server's environment; nil: ours

	// ready reports nil once the server on port answers and is process pid
	// (the port is reserved, but a program that does not reserve ports may
	// have taken it, and its server must not pass for ours).
	ready        func(pid int) error
	readyTimeout time.Duration // bounds the wait for ready
	readyWhat    string        // what ready waits for, for error messages: "come up"

	stopSig    syscall.Signal // asks the server to exit for good (shutdown)
	restartSig syscall.Signal // asks the server to exit cleanly before a restart

	mu      sync.Mutex // guards p and stopped, and serialises the control methods
	p       *proc      // the running process; nil while down (after crash)
	stopped bool       // shutdown was called: the directory is gone
}

// startOnFreePort builds a server on a reserved loopback port (see
// reservePort) and starts it. build may reserve more ports with reserve (a
// cluster bus); every port reserved for the server stays reserved until its
// shutdown, restarts included. A start can still fail on a port taken by a
// program that does not reserve ports, so it tries up to three ports; a
// build error also counts as a failed try. It returns the last error when
// every try failed.
func startOnFreePort(build func(port int, reserve func() (int, error)) (*server, error)) (*server, error) {
	var lastErr error
	for range 3 {
		var held []*reservedPort
		reserve := func() (int, error) {
			r, err := reservePort()
			if err != nil {
				return 0, err
			}
			held = append(held, r)
			return r.port, nil
		}
		port, err := reserve()
		if err != nil {
			lastErr = err
			continue
		}
		s, err := build(port, reserve)
		if err == nil {
			s.ports = held
			if err = s.start(); err == nil {
				return s, nil
			}
		}
		lastErr = err
		for _, r := range held {
			r.release()
		}
	}
	return nil, lastErr
}

// start launches the process, with its output in server.log in its
// directory, and polls ready until it reports nil, the process exits, or
// readyTimeout passes. On failure the process is reaped and s.p stays nil.
// The caller holds s.mu (or owns s).
func (s *server) start() error {
	p, err := startProc(s.bin, s.args, s.dir, filepath.Join(s.dir, "server.log"), s.cred, s.env)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(s.readyTimeout)
	for {
		if p.exited() {
			return p.exitError(filepath.Base(s.bin))
		}
		err := s.ready(p.pid())
		if err == nil {
			s.p = p
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("testserver: %s did not %s within %v (last: %v): %s",
				filepath.Base(s.bin), s.readyWhat, s.readyTimeout, err, p.logTail())
		}
		time.Sleep(pollEvery)
	}
}

// shutdown ends the server for good and removes its directory: stopSig,
// SIGKILL to its process group and descendants if it has not exited within
// stopTimeout, then the process is reaped. Idempotent; safe after crash.
func (s *server) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.p != nil {
		s.p.stop(s.stopSig)
		s.p = nil
	}
	for _, r := range s.ports {
		r.release()
	}
	_ = os.RemoveAll(s.dir)
}

// crash kills the server with its descendants and reaps it, keeping its
// directory. Idempotent; a no-op after shutdown.
func (s *server) crash() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		s.p.kill()
		s.p = nil
	}
}

// restart stops a running server with restartSig (or takes a crashed one as
// it is) and starts it again with the same port, directory and arguments.
// It returns an error after shutdown or when the server does not come back.
func (s *server) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("testserver: restart of a stopped %s server", s.name)
	}
	if s.p != nil {
		s.p.stop(s.restartSig)
		s.p = nil
	}
	return s.start()
}

// signal pauses (SIGSTOP) or resumes (SIGCONT) the server and its
// descendants. It returns an error when the server is down.
func (s *server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return fmt.Errorf("testserver: %s server is down, cannot send %v", s.name, sig)
	}
	if sig == syscall.SIGSTOP {
		return s.p.pause()
	}
	return s.p.resume()
}
