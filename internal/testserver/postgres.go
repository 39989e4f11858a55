package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPostgresURL names the environment variable that points the tests at an
// existing PostgreSQL database (a postgres:// URL) instead of a private one.
const EnvPostgresURL = "LEASE_TEST_POSTGRES_URL"

// pgBinDirs is where Debian and Ubuntu keep PostgreSQL's server binaries.
const pgBinDirs = "/usr/lib/postgresql/*/bin"

// initdbTimeout bounds initdb (1–3 s on a quiet machine).
const initdbTimeout = 2 * time.Minute

// Postgres returns the URL of a PostgreSQL database for tests: the value of
// LEASE_TEST_POSTGRES_URL when set (stop does nothing; the tests share that
// database, so they must use their own schemas or tables), otherwise the
// database "test" of a private, throwaway cluster started with
// StartPostgres: postgres://postgres@127.0.0.1:PORT/test?sslmode=disable.
// stop shuts the private server down and removes its directory; it is never
// nil, is idempotent and may be called when err is non-nil. err wraps
// ErrNoServer when neither the environment nor the machine offers a server.
func Postgres() (url string, stop func(), err error) {
	return fromEnvOrStart(EnvPostgresURL, func() (*PostgresServer, error) { return StartPostgres(PostgresOptions{}) }, (*PostgresServer).URL)
}

// PostgresOptions configures a server started by StartPostgres. The zero
// value is a fast throwaway server: fsync off (committed data survives Kill,
// which kills processes, not the machine), default synchronous_commit.
type PostgresOptions struct {
	// Fsync turns fsync on. Off by default: only an OS crash loses data then.
	Fsync bool
	// SynchronousCommit sets synchronous_commit ("on", "off", "local",
	// "remote_write", "remote_apply"); "" keeps the default (on).
	SynchronousCommit string
	// Settings are extra server settings, each "name=value", passed as -c.
	// They come last, so they override the settings above.
	Settings []string
}

// PostgresServer is a private PostgreSQL cluster: a postmaster that is a
// child process of the test binary, listening on a loopback port and on a
// unix socket in its own temporary directory, with trust authentication for
// the user "postgres" and a database "test". When the test binary runs as
// root the server runs as the OS user "postgres" (initdb refuses root). Its
// control methods are safe for concurrent use and serialised.
//
// Lifecycle: StartPostgres returns a running server. Kill and Pause leave it
// down or frozen until Restart or Resume; Stop ends it for good and removes
// its directory. The process never outlives the test binary.
type PostgresServer struct {
	*server // the postmaster; its dir owns data/ (the cluster), the socket and server.log
}

// StartPostgres creates a cluster with initdb in a new temporary directory,
// starts postgres on a free loopback port, waits until it accepts
// connections (bounded) and creates the database "test". It looks for
// initdb and postgres on PATH, then in /usr/lib/postgresql/*/bin (newest
// first); it returns an error wrapping ErrNoServer when they are missing,
// and an error carrying the end of the server's log when it does not come up.
func StartPostgres(opts PostgresOptions) (*PostgresServer, error) {
	for _, kv := range opts.Settings {
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return nil, fmt.Errorf("testserver: postgres setting %q is not name=value", kv)
		}
	}
	initdb, err := FindBinary([]string{"initdb"}, pgBinDirs)
	if err != nil {
		return nil, fmt.Errorf("testserver: no initdb on PATH or in %s: %w", pgBinDirs, err)
	}
	// Take postgres from initdb's directory so the versions match.
	bin := filepath.Join(filepath.Dir(evalSymlinks(initdb)), "postgres")
	if _, err := exec.LookPath(bin); err != nil {
		if bin, err = FindBinary([]string{"postgres"}, pgBinDirs); err != nil {
			return nil, fmt.Errorf("testserver: no postgres next to initdb, on PATH or in %s: %w", pgBinDirs, err)
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(tempParent(cred), "lease-postgres-")
	if err != nil {
		return nil, fmt.Errorf("testserver: postgres dir: %w", err)
	}
	s, err := startPostgres(opts, initdb, bin, dir, cred)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func startPostgres(opts PostgresOptions, initdb, bin, dir string, cred *syscall.Credential) (*PostgresServer, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("testserver: chown postgres dir: %w", err)
		}
	}
	env := pgEnv()
	data := filepath.Join(dir, "data")
	if err := runInitdb(initdb, dir, data, cred, env); err != nil {
		return nil, err
	}
	settings := []string{
		"listen_addresses=127.0.0.1",
		"unix_socket_directories=" + dir,
		"fsync=" + onOff(opts.Fsync),
	}
	if opts.SynchronousCommit != "" {
		settings = append(settings, "synchronous_commit="+opts.SynchronousCommit)
	}
	settings = append(settings, opts.Settings...)

	srv, err := startOnFreePort(func(port int, _ func() (int, error)) (*server, error) {
		args := []string{"-D", data, "-p", strconv.Itoa(port)}
		for _, kv := range settings {
			args = append(args, "-c", kv)
		}
		return &server{
			name: "postgres", bin: bin, dir: dir, port: port, args: args, cred: cred, env: env,
			ready:        func(int) error { return pgPing(port, dir) },
			readyTimeout: startTimeout,
			readyWhat:    "accept connections",
			stopSig:      syscall.SIGQUIT, // immediate shutdown, as pg_ctl stop -m immediate
			restartSig:   syscall.SIGINT,  // fast shutdown
		}, nil
	})
	if err != nil {
		return nil, err
	}
	s := &PostgresServer{srv}
	if err := s.createDatabase(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// serverCredential returns the OS user to run initdb and postgres as: nil
// (ourselves) unless we are root, then "postgres".
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testserver: running as root and initdb refuses root, but there is no postgres user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testserver: postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("testserver: postgres gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tempParent returns where to create the server's directory: the default
// temporary directory, unless the server runs as another user who could not
// reach it (a TMPDIR under /root): then /tmp.
func tempParent(cred *syscall.Credential) string {
	if cred == nil {
		return ""
	}
	for d := os.TempDir(); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

// pgEnv is our environment without the PG* variables (PGDATA, PGPORT...)
// that would redirect initdb or postgres, in the C locale.
func pgEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// runInitdb creates the cluster in data, bounded by initdbTimeout.
func runInitdb(initdb, dir, data string, cred *syscall.Credential, env []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), initdbTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, initdb,
		"-D", data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testserver: initdb: %w: %s", err, tail(out))
	}
	return nil
}

// pgPing connects to the database "postgres" of the server on port and
// checks that it runs on dir's data directory: the port was free a moment
// ago, but another test binary may have taken it since, and its server must
// not pass for ours.
func pgPing(port int, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL(Addr(port), "postgres"))
	if err != nil {
		return fmt.Errorf("testserver: connect: %w", err)
	}
	defer conn.Close(context.Background())
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&got); err != nil {
		return fmt.Errorf("testserver: read data_directory: %w", err)
	}
	if want := filepath.Join(dir, "data"); got != want && got != evalSymlinks(want) {
		return fmt.Errorf("testserver: the server on port %d runs on %s, not %s", port, got, want)
	}
	return nil
}

// createDatabase creates the database "test".
func (s *PostgresServer) createDatabase() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return fmt.Errorf("testserver: connect to create database: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE test"); err != nil {
		return fmt.Errorf("testserver: create database test: %w", err)
	}
	return nil
}

func (s *PostgresServer) url(db string) string { return pgURL(Addr(s.port), db) }

func pgURL(addr, db string) string {
	return "postgres://postgres@" + addr + "/" + db + "?sslmode=disable"
}

// URL returns postgres://postgres@127.0.0.1:PORT/test?sslmode=disable; it
// stays the same across Restart.
func (s *PostgresServer) URL() string { return s.url("test") }

// Addr returns the server's "127.0.0.1:port", e.g. the target of a fault
// proxy; it stays the same across Restart.
func (s *PostgresServer) Addr() string { return Addr(s.port) }

// URLVia returns the URL of the database "test" reached through addr
// ("host:port", e.g. a fault proxy in front of this server) instead of the
// server's own address.
func (s *PostgresServer) URLVia(addr string) string { return pgURL(addr, "test") }

// Dir returns the server's directory: data/ (the cluster), the unix socket
// and server.log.
func (s *PostgresServer) Dir() string { return s.dir }

// Stop shuts the server down for good and removes its directory: an
// immediate shutdown (SIGQUIT, as pg_ctl stop -m immediate; it also ends a
// Pause), SIGKILL to the postmaster and its backends if it has not exited
// within 10s, then the postmaster is reaped. Idempotent; safe after Kill. A
// test binary that dies without calling Stop takes the postmaster with it
// (parent-death signal; its backends follow), but leaves the directory.
func (s *PostgresServer) Stop() { s.shutdown() }

// Kill crashes the server: SIGKILL to the postmaster and every backend, then
// the postmaster is reaped and Kill waits until the backends are gone too.
// The data directory is
// kept: Restart runs crash recovery, and every committed transaction is
// back (unless SynchronousCommit is "off": then the last few may be lost).
// Idempotent; a no-op after Stop.
func (s *PostgresServer) Kill() { s.crash() }

// Restart shuts a running server down cleanly (fast shutdown: SIGINT) or
// takes a killed one as it is, then starts it again on the same port with
// the same data directory and waits until it accepts connections. It
// returns an error after Stop or when the server does not come back.
func (s *PostgresServer) Restart() error { return s.restart() }

// Pause freezes the postmaster and every backend (SIGSTOP): open connections stay open and new ones complete the TCP
// handshake, but nothing is answered, as with a stalled machine. It returns
// an error when the server is down.
func (s *PostgresServer) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT). Resuming a server that is not
// paused does nothing; it returns an error when the server is down.
func (s *PostgresServer) Resume() error { return s.signal(syscall.SIGCONT) }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// evalSymlinks resolves /usr/local/bin/initdb to /usr/lib/postgresql/15/bin
// so that postgres is taken from the same installation.
func evalSymlinks(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}

// tail returns the end of a command's output, for error messages.
func tail(b []byte) string {
	const max = 2048
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}
