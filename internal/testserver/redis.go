package testserver

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvValkeyAddr names the environment variable that points the tests at an
// existing Valkey or Redis server ("host:port") instead of a private one.
const EnvValkeyAddr = "LEASE_TEST_VALKEY_ADDR"

// redisStartTimeout bounds the wait for a Redis server to answer PING.
const redisStartTimeout = 10 * time.Second

// Redis returns the address of a Valkey or Redis server for tests: the value
// of LEASE_TEST_VALKEY_ADDR when set (stop does nothing; the tests share that
// server, so they must use their own keys), otherwise a private, throwaway
// server (no persistence) started with StartRedis. stop shuts the private
// server down and removes its directory; it is never nil, is idempotent and
// may be called when err is non-nil. err wraps ErrNoServer when neither the
// environment nor PATH offers a server.
func Redis() (addr string, stop func(), err error) {
	return fromEnvOrStart(EnvValkeyAddr, func() (*RedisServer, error) { return StartRedis(RedisOptions{}) }, (*RedisServer).Addr)
}

// RedisOptions configures a server started by StartRedis. The zero value is
// a throwaway master: no RDB snapshots, no append-only file.
type RedisOptions struct {
	// AppendOnly turns the append-only file on, so that Restart (and Kill
	// followed by Restart) keeps the data written before.
	AppendOnly bool
	// AppendFsync is "always", "everysec" or "no"; "" keeps the server's
	// default (everysec). It matters only with AppendOnly: after Kill, the
	// writes since the last fsync are lost.
	AppendFsync string
	// ReplicaOf is "host:port" of a master to replicate; "" starts a master.
	ReplicaOf string
	// Args are extra command-line arguments, e.g. {"--maxmemory", "64mb"};
	// they come last, so they override the settings above.
	Args []string
}

// RedisServer is a private Valkey or Redis server: a child process of the
// test binary on a loopback port, with its own temporary directory. Its
// control methods are safe for concurrent use and serialised: Stop waits for
// a Restart in progress.
//
// Lifecycle: StartRedis returns a running server. Kill and Pause leave it
// down or frozen until Restart or Resume; Stop ends it for good and removes
// its directory. The process never outlives the test binary (see Stop).
type RedisServer struct {
	*server // valkey-server or redis-server; AOF, RDB and the log in its dir
}

// StartRedis starts a private server, preferring valkey-server to
// redis-server on PATH, and waits (up to 10s) until it answers PING. It
// returns an error wrapping ErrNoServer when there is no binary, and an error
// carrying the end of the server's log when it does not come up.
func StartRedis(opts RedisOptions) (*RedisServer, error) {
	return startRedis(opts, nil)
}

// startRedis is StartRedis with portArgs, when non-nil, adding arguments that
// depend on the server's port (or need more free ports, like a cluster bus).
func startRedis(opts RedisOptions, portArgs func(port int, reserve func() (int, error)) ([]string, error)) (*RedisServer, error) {
	switch opts.AppendFsync {
	case "", "always", "everysec", "no":
	default:
		return nil, fmt.Errorf("testserver: AppendFsync %q is not always, everysec or no", opts.AppendFsync)
	}
	var replicaOf []string
	if opts.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(opts.ReplicaOf)
		if err != nil {
			return nil, fmt.Errorf("testserver: ReplicaOf: %w", err)
		}
		replicaOf = []string{"--replicaof", host, port}
	}
	bin, err := FindBinary([]string{"valkey-server", "redis-server"})
	if err != nil {
		return nil, fmt.Errorf("testserver: no valkey-server or redis-server on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "lease-redis-")
	if err != nil {
		return nil, fmt.Errorf("testserver: redis dir: %w", err)
	}
	s, err := startOnFreePort(func(port int, reserve func() (int, error)) (*server, error) {
		args := []string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", yesNo(opts.AppendOnly),
			"--dir", dir,
			"--daemonize", "no",
			"--logfile", "",
		}
		if opts.AppendFsync != "" {
			args = append(args, "--appendfsync", opts.AppendFsync)
		}
		args = append(args, replicaOf...)
		if portArgs != nil {
			more, err := portArgs(port, reserve)
			if err != nil {
				return nil, err
			}
			args = append(args, more...)
		}
		args = append(args, opts.Args...)
		return &server{
			name: "redis", bin: bin, dir: dir, port: port, args: args,
			ready:        func(pid int) error { return redisIsOurs(Addr(port), pid) },
			readyTimeout: redisStartTimeout,
			readyWhat:    "come up",
			stopSig:      syscall.SIGTERM, // also flushes the append-only file
			restartSig:   syscall.SIGTERM,
		}, nil
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &RedisServer{s}, nil
}

// isOurs checks that the server on s's port answers PING and is process pid.
func (s *RedisServer) isOurs(pid int) error { return redisIsOurs(s.Addr(), pid) }

// redisIsOurs checks that the server at addr answers PING and is process
// pid: the port was free a moment ago, but another test binary may have
// taken it since, and its server must not pass for ours.
func redisIsOurs(addr string, pid int) error {
	if reply, err := redisDo(addr, time.Second, "PING"); err != nil || reply != "PONG" {
		return fmt.Errorf("testserver: PING = %q, %w", reply, err)
	}
	info, err := redisDo(addr, time.Second, "INFO", "server")
	if err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid)
	for line := range strings.Lines(info) {
		if strings.TrimSpace(line) == want {
			return nil
		}
	}
	return fmt.Errorf("testserver: the server on %s is not process %d", addr, pid)
}

// Addr returns the server's "127.0.0.1:port"; it stays the same across
// Restart.
func (s *RedisServer) Addr() string { return Addr(s.port) }

// Dir returns the server's working directory (AOF, RDB, server.log).
func (s *RedisServer) Dir() string { return s.dir }

// AppendOnlyDir returns the directory of the server's append-only file
// (the manifest and its base and incremental files), which exists only
// with RedisOptions.AppendOnly. Tests read it as the server's own record
// of every write it applied (internal/serveraudit); pass
// "--auto-aof-rewrite-percentage", "0" in RedisOptions.Args so that no
// rewrite folds that history into a snapshot.
func (s *RedisServer) AppendOnlyDir() string { return filepath.Join(s.dir, "appendonlydir") }

// Do sends one command on a fresh connection (bounded by 5s) and returns a
// simple, bulk or integer reply as text; an error reply is an error. It is a
// convenience for configuring the server from a test (CONFIG SET, DEBUG
// SLEEP...), not a client: array replies are not supported.
func (s *RedisServer) Do(args ...string) (string, error) {
	return redisDo(s.Addr(), 5*time.Second, args...)
}

// Stop shuts the server down for good and removes its directory: SIGTERM
// (which also ends a Pause), SIGKILL to its process group if it has not
// exited within 10s, then the process is reaped. Idempotent; safe after Kill.
// A test binary that dies without calling Stop takes the server with it
// (parent-death signal), but leaves the directory behind.
func (s *RedisServer) Stop() { s.shutdown() }

// Kill crashes the server: SIGKILL to it and its children, then reaps it. The
// directory is kept, so Restart recovers what the append-only file holds
// (with AppendFsync "always", every acknowledged write; with "everysec", all
// but up to the last second). Idempotent; a no-op after Stop.
func (s *RedisServer) Kill() { s.crash() }

// Restart shuts a running server down cleanly (SIGTERM, which flushes the
// append-only file) or takes a killed one as it is, then starts it again on
// the same port with the same directory and arguments, and waits until it
// answers PING. It returns an error after Stop or when the server does not
// come back.
func (s *RedisServer) Restart() error { return s.restart() }

// Pause freezes the server and any child it forked (SIGSTOP): connections stay
// open, the port accepts (the kernel completes handshakes) but nothing is
// answered, as with a stalled machine. It returns an error when the server
// is down.
func (s *RedisServer) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT). Resuming a server that is not
// paused does nothing; it returns an error when the server is down.
func (s *RedisServer) Resume() error { return s.signal(syscall.SIGCONT) }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
