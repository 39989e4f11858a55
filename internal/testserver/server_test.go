package testserver

import (
	"errors"
	"os"
	"strconv"
	"testing"
)

// startFor starts a private server with start for one test, which stops it
// at cleanup; it skips the test (naming name and envVar) when the machine
// has none, unless LEASE_REQUIRE_BACKENDS=1.
func startFor[S interface{ Stop() }](t *testing.T, name, envVar string, start func() (S, error)) S {
	t.Helper()
	s, err := start()
	if skip := SkipReason(name, envVar, err); skip != "" {
		t.Skip(skip)
	}
	t.Cleanup(s.Stop)
	return s
}

// pidOf returns the running server's pid.
func (s *server) pidOf(t *testing.T) int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		t.Fatal("server is down")
	}
	return s.p.pid()
}

// gone reports whether no process has pid (it was reaped, not left a zombie).
func gone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err != nil
}

// controlled is what the table tests need of RedisServer and PostgresServer.
type controlled interface {
	Stop()
	Restart() error
	Pause() error
	Dir() string
	pidOf(t *testing.T) int
}

// kinds are the servers this package starts, for table tests: each starts
// a private server with default options for one test (skipping when the
// machine has none, unless LEASE_REQUIRE_BACKENDS=1).
var kinds = []struct {
	name  string
	start func(t *testing.T) controlled
}{
	{"redis", func(t *testing.T) controlled { return newRedis(t, RedisOptions{}) }},
	{"postgres", func(t *testing.T) controlled { return newPostgres(t, PostgresOptions{}) }},
}

func TestFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name, env, value string
		get              func() (string, func(), error)
	}{
		{"redis", EnvValkeyAddr, "192.0.2.1:6379", Redis},
		{"postgres", EnvPostgresURL, "postgres://u@192.0.2.1:5432/db", Postgres},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			got, stop, err := tc.get()
			if err != nil || got != tc.value {
				t.Fatalf("%s() = %q, %v; want the environment's %q", tc.name, got, err, tc.value)
			}
			stop()
		})
	}
}

func TestStopReapsAndRemovesDir(t *testing.T) {
	t.Parallel()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			s := k.start(t)
			pid := s.pidOf(t)
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			s.Stop() // must also end a paused server
			if !gone(pid) {
				t.Errorf("process %d still exists after Stop", pid)
			}
			if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("dir after Stop: %v; want it removed", err)
			}
			if err := s.Restart(); err == nil {
				t.Error("Restart after Stop succeeded")
			}
			if err := s.Pause(); err == nil {
				t.Error("Pause after Stop succeeded")
			}
		})
	}
}
