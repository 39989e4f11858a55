package valkey_test

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"

	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

// valkeyAddr is the server most tests share: LEASE_TEST_VALKEY_ADDR or a
// private throwaway server for this test binary. valkeySkip is non-empty
// when there is none (with LEASE_REQUIRE_BACKENDS=1 the binary fails
// instead).
var valkeyAddr, valkeySkip string

// TestMain starts the shared server, checks that no goroutine outlives the
// tests, then stops the server.
func TestMain(m *testing.M) {
	addr, stop, err := testserver.Redis()
	valkeyAddr = addr
	valkeySkip = testserver.SkipReason("valkey", testserver.EnvValkeyAddr, err)
	opts := append(slices.Clone(testenv.IgnoredLeaks),
		// valkey-go's cluster client closes the connections a topology
		// refresh replaced 5s later, from a goroutine that outlives
		// Client.Close by up to those 5s (cluster.go, _refresh).
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		testserver.StopAtExit(stop))
	goleak.VerifyTestMain(m, opts...)
}

// serverAddr returns the shared server's address or skips t.
func serverAddr(t testing.TB) string {
	t.Helper()
	if valkeySkip != "" {
		t.Skip(valkeySkip)
	}
	return valkeyAddr
}

// privateServer starts a server only this test uses (for restarts, pauses
// and kills), whatever LEASE_TEST_VALKEY_ADDR says; it is stopped when t
// ends.
func privateServer(t testing.TB, o testserver.RedisOptions) *testserver.RedisServer {
	t.Helper()
	s, err := testserver.StartRedis(o)
	if err != nil {
		if reason := testserver.SkipReason("valkey", testserver.EnvValkeyAddr, err); reason != "" {
			t.Skip(reason)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// newClient returns a valkey-go client closed when t ends.
func newClient(t testing.TB, addrs ...string) vk.Client {
	t.Helper()
	return newClientOpt(t, vk.ClientOption{InitAddress: addrs})
}

// newClientOpt is newClient with options (client-side caching is always
// off: the Store does not use it).
func newClientOpt(t testing.TB, o vk.ClientOption) vk.Client {
	t.Helper()
	o.DisableCache = true
	c, err := vk.NewClient(o)
	if err != nil {
		t.Fatalf("valkey-go client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// uniquePrefix isolates one test's keys on a shared server.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "leasetest-" + hex.EncodeToString(b[:])
}

// newStore returns a Store with a fresh prefix (unless o has one), closed
// when t ends.
func newStore(t testing.TB, c vk.Client, o valkey.Options) *valkey.Store {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = uniquePrefix()
	}
	s, err := valkey.New(c, o)
	if err != nil {
		t.Fatalf("valkey.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
