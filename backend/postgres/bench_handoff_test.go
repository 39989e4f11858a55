package postgres_test

import (
	"context"
	"testing"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/leaseapi"
)

// BenchmarkHandoffDistribution is the handoff workload of ../../bench on
// 8 contenders, each with a pool and Store of its own, with the
// distribution of the hand-off latency (storetest.HandoffDistribution)
// and the server's transactions per acquisition (attempts, marks,
// releases: pg_stat_database).
func BenchmarkHandoffDistribution(b *testing.B) {
	url := dbURL(b)
	direct := newPool(b, url)
	_, opts := newStore(b, url, direct)
	stores := make([]leaseapi.Backend, 8)
	for i := range stores {
		s, err := postgres.New(newPool(b, url), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	xacts := func() int64 {
		var n int64
		if err := direct.QueryRow(context.Background(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	storetest.HandoffDistribution(b, stores, xacts, "xacts/acq")
}
