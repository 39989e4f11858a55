package supervisor_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// startGranted acquires the key ("sup", name) for owner-1 on b and starts
// the lease's actor with cfg and p, anchored at the instant the
// acquisition was sent, as the runtime does.
func startGranted(t *testing.T, b leaseapi.Backend, cfg *supervisor.Config, p leaseapi.Policy, name string) *supervisor.Supervisor {
	t.Helper()
	sent := time.Now()
	g, err := b.TryAcquire(t.Context(), leaseapi.MustKey("sup", name), "owner-1", p.TTL())
	if err != nil {
		t.Fatal(err)
	}
	return supervisor.Start(cfg, p, supervisor.Grant{Record: g, SentAt: sent, RecvAt: time.Now()})
}
