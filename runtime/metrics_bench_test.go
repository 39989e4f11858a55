package runtime_test

import (
	"testing"

	"github.com/leasekit/lease/runtime"
)

// BenchmarkPairMetricsOn and BenchmarkPairMetricsOff measure what the
// exact metrics cost: one TryAcquire + Release pair through the public API
// on the memory backend, with and without them (benchPair). Compare the
// two with benchstat (the budget: on within 3% of off).
func BenchmarkPairMetricsOn(b *testing.B)  { benchPair(b, runtime.ClientOptions{}) }
func BenchmarkPairMetricsOff(b *testing.B) { benchPair(b, runtime.ClientOptions{NoMetrics: true}) }
