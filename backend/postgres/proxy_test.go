package postgres_test

import (
	"net/url"
	"testing"
	"time"

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
