package testserver

import (
	"context"
	"errors"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// newPostgres starts a private server for one test, skipping when the
// machine has none (unless LEASE_REQUIRE_BACKENDS=1).
func newPostgres(t *testing.T, opts PostgresOptions) *PostgresServer {
	t.Helper()
	return startFor(t, "postgres", EnvPostgresURL, func() (*PostgresServer, error) { return StartPostgres(opts) })
}

// connect opens a connection bounded by timeout; the test closes it.
func connect(t *testing.T, url string, timeout time.Duration) (*pgx.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, nil
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// processUID returns the real uid of process pid, from /proc.
func processUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatal("no Uid line in /proc/pid/status")
	return ""
}

func TestPostgresPrivate(t *testing.T) {
	t.Parallel()
	if os.Getenv(EnvPostgresURL) != "" {
		t.Skip(EnvPostgresURL + " is set: Postgres returns it")
	}
	url, stop, err := Postgres()
	if skip := SkipReason("postgres", EnvPostgresURL, err); skip != "" {
		t.Skip(skip)
	}
	defer stop()
	if !strings.HasPrefix(url, "postgres://postgres@127.0.0.1:") || !strings.HasSuffix(url, "/test?sslmode=disable") {
		t.Errorf("URL = %q", url)
	}
	conn, err := connect(t, url, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn, "SELECT current_user || '/' || current_database()"); got != "postgres/test" {
		t.Errorf("user/database = %q; want postgres/test", got)
	}
	dataDir := queryString(t, conn, "SHOW data_directory")
	conn.Close(context.Background())
	stop()
	stop() // idempotent
	// The port is free now, and another test binary's server may take it:
	// what must not answer there is this server.
	if conn, err := connect(t, url, time.Second); err == nil {
		got := queryString(t, conn, "SHOW data_directory")
		conn.Close(context.Background())
		if got == dataDir {
			t.Fatal("the server still answers after stop")
		}
	}
}

func TestPostgresRunsAsPostgresUserWhenRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("not root: the server runs as the current user")
	}
	s := newPostgres(t, PostgresOptions{})
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if got := processUID(t, s.pidOf(t)); got != u.Uid {
		t.Errorf("postmaster uid = %s; want postgres's %s", got, u.Uid)
	}
}

func TestPostgresKillRestartKeepsCommittedData(t *testing.T) {
	t.Parallel()
	s := newPostgres(t, PostgresOptions{Fsync: true, SynchronousCommit: "on", Settings: []string{"max_connections=20"}})
	conn, err := connect(t, s.URL(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn, "SHOW max_connections"); got != "20" {
		t.Errorf("max_connections = %s; want 20 from Settings", got)
	}
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CREATE TABLE fence (token bigint); INSERT INTO fence VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	pid := s.pidOf(t)
	s.Kill()
	s.Kill() // idempotent
	if !gone(pid) {
		t.Errorf("postmaster %d still exists after Kill", pid)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("query on a killed server succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	conn2, err := connect(t, s.URL(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn2, "SELECT token::text FROM fence"); got != "42" {
		t.Errorf("token after Kill+Restart = %s; want 42", got)
	}
	conn2.Close(ctx)
	if err := s.Restart(); err != nil { // clean restart of a running server
		t.Fatal(err)
	}
	conn3, err := connect(t, s.URL(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn3, "SELECT token::text FROM fence"); got != "42" {
		t.Errorf("token after Restart = %s; want 42", got)
	}
}

func TestPostgresPauseResume(t *testing.T) {
	t.Parallel()
	s := newPostgres(t, PostgresOptions{})
	conn, err := connect(t, s.URL(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = conn.Exec(ctx, "SELECT 1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("query on a paused server: %v; want a deadline error", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	conn2, err := connect(t, s.URL(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn2, "SELECT 'up'"); got != "up" {
		t.Errorf("after Resume got %q", got)
	}
}

func TestPostgresAddrAndURLVia(t *testing.T) {
	s := &PostgresServer{&server{port: 5433}}
	if got, want := s.Addr(), "127.0.0.1:5433"; got != want {
		t.Errorf("Addr = %q; want %q", got, want)
	}
	if got, want := s.URLVia("127.0.0.1:9"), "postgres://postgres@127.0.0.1:9/test?sslmode=disable"; got != want {
		t.Errorf("URLVia = %q; want %q", got, want)
	}
	if got, want := s.URL(), "postgres://postgres@127.0.0.1:5433/test?sslmode=disable"; got != want {
		t.Errorf("URL = %q; want %q", got, want)
	}
}

func TestStartPostgresRejectsBadSettings(t *testing.T) {
	if _, err := StartPostgres(PostgresOptions{Settings: []string{"fsync"}}); err == nil {
		t.Error("setting without = accepted")
	}
}
