package testserver

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"
)

// newRedis starts a private server for one test, skipping when the
// machine has none (unless LEASE_REQUIRE_BACKENDS=1).
func newRedis(t *testing.T, opts RedisOptions) *RedisServer {
	t.Helper()
	return startFor(t, "redis", EnvValkeyAddr, func() (*RedisServer, error) { return StartRedis(opts) })
}

func TestRedisPrivate(t *testing.T) {
	t.Parallel()
	if os.Getenv(EnvValkeyAddr) != "" {
		t.Skip(EnvValkeyAddr + " is set: Redis returns it")
	}
	addr, stop, err := Redis()
	if skip := SkipReason("redis", EnvValkeyAddr, err); skip != "" {
		t.Skip(skip)
	}
	defer stop()
	if got, err := redisDo(addr, 5*time.Second, "SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET = %q, %v; want OK", got, err)
	}
	if got, err := redisDo(addr, 5*time.Second, "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
	info, err := redisDo(addr, 5*time.Second, "INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("no process_id in INFO server: %q", info)
	}
	stop()
	stop() // idempotent
	// The port is free now, and another test binary's server may take it:
	// what must not answer there is this server.
	if err := redisIsOurs(addr, pid); err == nil {
		t.Fatal("the server still answers after stop")
	}
}

func TestRedisKillRestartKeepsAppendOnlyData(t *testing.T) {
	t.Parallel()
	s := newRedis(t, RedisOptions{AppendOnly: true, AppendFsync: "always"})
	if _, err := s.Do("SET", "token", "41"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("INCR", "token"); err != nil || got != "42" {
		t.Fatalf("INCR = %q, %v; want 42", got, err)
	}
	pid := s.pidOf(t)
	s.Kill()
	s.Kill() // idempotent
	if !gone(pid) {
		t.Errorf("process %d still exists after Kill", pid)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	if err := s.Pause(); err == nil {
		t.Error("Pause of a killed server succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "token"); err != nil || got != "42" {
		t.Fatalf("GET after Kill+Restart = %q, %v; want 42", got, err)
	}
	// A clean restart of a running server keeps it too.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "token"); err != nil || got != "42" {
		t.Fatalf("GET after Restart = %q, %v; want 42", got, err)
	}
}

func TestRedisIdentityCheck(t *testing.T) {
	t.Parallel()
	s := newRedis(t, RedisOptions{})
	if err := s.isOurs(s.pidOf(t)); err != nil {
		t.Errorf("isOurs(own pid): %v", err)
	}
	if err := s.isOurs(1); err == nil {
		t.Error("isOurs(1) accepted another process's server")
	}
}

func TestRedisWithoutPersistenceForgetsOnRestart(t *testing.T) {
	t.Parallel()
	s := newRedis(t, RedisOptions{})
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); !errors.Is(err, errRedisNil) {
		t.Fatalf("GET after Restart = %q, %v; want nil reply", got, err)
	}
}

func TestRedisPauseResume(t *testing.T) {
	t.Parallel()
	s := newRedis(t, RedisOptions{})
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	_, err := redisDo(s.Addr(), 300*time.Millisecond, "PING")
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("PING to a paused server: %v; want a timeout", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Resume = %q, %v; want PONG", got, err)
	}
	if err := s.Resume(); err != nil { // resuming a running server is harmless
		t.Fatal(err)
	}
}

func TestRedisReplica(t *testing.T) {
	t.Parallel()
	master := newRedis(t, RedisOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	replica := newRedis(t, RedisOptions{ReplicaOf: master.Addr()})
	// SET and WAIT on one connection: WAIT returns once the replica has
	// acknowledged that connection's writes (or after its 10s timeout), so
	// the test waits on the replication event itself, not on a poll.
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{master.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Dedicated(func(d vk.DedicatedClient) error {
		r := d.DoMulti(t.Context(), d.B().Set().Key("k").Value("v").Build(), d.B().Wait().Numreplicas(1).Timeout(10000).Build())
		if err := r[0].Error(); err != nil {
			return err
		}
		n, err := r[1].AsInt64()
		if err == nil && n < 1 {
			t.Errorf("WAIT 1: %d replicas acknowledged within 10s", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := replica.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("replica GET after WAIT = %q, %v; want v", got, err)
	}
	if _, err := replica.Do("SET", "k", "w"); err == nil {
		t.Error("SET on a replica succeeded")
	}
}

func TestStartRedisRejectsBadOptions(t *testing.T) {
	if _, err := StartRedis(RedisOptions{AppendFsync: "sometimes"}); err == nil {
		t.Error("AppendFsync sometimes accepted")
	}
	if _, err := StartRedis(RedisOptions{ReplicaOf: "nohostport"}); err == nil {
		t.Error("ReplicaOf without a port accepted")
	}
}
