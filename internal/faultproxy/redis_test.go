package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/testserver"
)

// TestCutAgainstRedis checks the model CutAfterRequest exists for on a real
// server: the client's INCR commits, the client sees a reset instead of the
// reply, and a later reader sees the increment.
func TestCutAgainstRedis(t *testing.T) {
	t.Parallel()
	srv, p, c, r := redisViaProxy(t)

	done := p.CutAfterRequest()
	write(t, c, "INCR token\r\n")
	waitChan(t, done, "the cut")
	_, err := r.ReadString('\n')
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("reply after the cut: %v; want a reset", err)
	}

	if got, err := srv.Do("GET", "token"); err != nil || got != "42" {
		t.Fatalf("GET token = %q, %v; want 42: the request must have committed", got, err)
	}

	// Blackhole: a request times out and never reaches the server.
	p.Blackhole()
	c2 := dial(t, p.Addr())
	write(t, c2, "INCR token\r\n")
	waitFor(t, p, "the discard", func(s Stats) bool { return s.Dropped >= int64(len("INCR token\r\n")) })
	p.Pass()
	if got, err := srv.Do("GET", "token"); err != nil || got != "42" {
		t.Fatalf("GET token = %q, %v; want 42: a blackholed request must not reach the server", got, err)
	}
	// The connection itself survives the blackhole.
	r2 := bufio.NewReader(c2)
	write(t, c2, "PING\r\n")
	if err := c2.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	if line, err := r2.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+PONG") {
		t.Fatalf("PING after healing = %q, %v", line, err)
	}
}

// redisViaProxy starts a private Redis server (or skips, see
// testserver.SkipReason), a proxy in front of it and a raw client
// connection through the proxy, on which it has set "token" to 41.
func redisViaProxy(t *testing.T) (*testserver.RedisServer, *Proxy, net.Conn, *bufio.Reader) {
	t.Helper()
	srv, err := testserver.StartRedis(testserver.RedisOptions{})
	if skip := testserver.SkipReason("redis", testserver.EnvValkeyAddr, err); skip != "" {
		t.Skip(skip)
	}
	t.Cleanup(srv.Stop)
	p := newProxy(t, srv.Addr())
	c := dial(t, p.Addr())
	r := bufio.NewReader(c)
	write(t, c, "SET token 41\r\n")
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("SET reply %q, %v", line, err)
	}
	return srv, p, c, r
}
