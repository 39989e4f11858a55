package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// BenchmarkPairMetricsOn and BenchmarkPairMetricsOff measure what the
// exact metrics cost: one TryAcquire + Release pair through the public API
// on the memory backend, with and without them. Compare the two with
// benchstat (the budget: on within 3% of off).
func BenchmarkPairMetricsOn(b *testing.B)  { benchPair(b, runtime.ClientOptions{}) }
func BenchmarkPairMetricsOff(b *testing.B) { benchPair(b, runtime.ClientOptions{NoMetrics: true}) }

func benchPair(b *testing.B, o runtime.ClientOptions) {
	store, _ := memory.New(memory.Options{})
	c, _ := runtime.NewClient(store, o)
	defer c.Close(context.Background())
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute})
	k := leaseapi.MustKey("bench", "metrics")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h, err := c.TryAcquire(ctx, k, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
