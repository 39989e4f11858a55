package postgres_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/internal/faultproxy"
)

// newProxy starts a fault proxy in front of the server of dbURL and returns
// it with the URL rewritten to go through it. It is closed when t ends
// (after the pools registered later, which close first).
func newProxy(t testing.TB, dbURL string) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	if u.Host == "" {
		t.Skip("fault tests need a TCP host in LEASE_TEST_POSTGRES_URL")
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return p, u.String()
}

// waitCut waits until an armed cut has fired: the server has replied to the
// cut request (so it committed or never will) and the client was reset.
func waitCut(t testing.TB, cut <-chan struct{}) {
	t.Helper()
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut did not fire within 10s")
	}
}

// partitionConnect gives the pool's connection attempts a connect timeout
// of one second while partitioned is set (pgx has none by default), so
// that attempts started during a blackhole end instead of holding pool
// slots until TCP gives up. Attempts before the partition have none: on a
// loaded machine a connection through the proxy can take longer than a
// second to set up (a Migrate of the test's setup failed so, "timed out"
// after 1.01s), and setup is not what these tests bound.
func partitionConnect(partitioned *atomic.Bool) func(*pgxpool.Config) {
	return func(c *pgxpool.Config) {
		c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			if partitioned.Load() {
				cc.ConnectTimeout = time.Second
			}
			return nil
		}
	}
}
