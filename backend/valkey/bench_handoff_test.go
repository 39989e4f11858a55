package valkey_test

import (
	"context"
	"testing"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/leaseapi"
)

// BenchmarkHandoffDistribution is the handoff workload of ../../bench on
// 8 contenders, each with a valkey-go client and Store of its own, with
// the distribution of the hand-off latency (storetest.HandoffDistribution)
// and the scripts the server ran per acquisition (FCALL and EVALSHA calls,
// INFO commandstats: attempts, releases).
func BenchmarkHandoffDistribution(b *testing.B) {
	addr := serverAddr(b)
	prefix := uniquePrefix()
	direct := newClient(b, addr)
	stores := make([]leaseapi.Backend, 8)
	for i := range stores {
		stores[i] = newStore(b, newClient(b, addr), valkey.Options{Prefix: prefix})
	}
	scripts := func() int64 {
		info, err := direct.Do(context.Background(), direct.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		return int64(commandStat(info, "fcall", "calls") + commandStat(info, "evalsha", "calls") + commandStat(info, "eval", "calls"))
	}
	storetest.HandoffDistribution(b, stores, scripts, "scripts/acq")
}
