package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// tinySizes keep the smoke test to a few seconds per backend. The
// durations leave room for a loaded machine: a slice must see at least one
// operation of every layer.
var tinySizes = sizes{
	seqPairs: 5, conc: 4, parSlice: 100 * time.Millisecond,
	leases: 50, window: 200 * time.Millisecond,
	contenders: 3, hold: time.Millisecond, handSlice: 250 * time.Millisecond,
	poll: time.Millisecond, yieldCap: 50 * time.Millisecond, jitter: 2 * time.Millisecond,
	ttl: 10 * time.Second, renewTTL: 30 * time.Second, warmup: 2,
	oneRenewal: true,
}

// recorder is the bench a smoke run reports to.
type recorder struct {
	t  *testing.T
	mu sync.Mutex
	m  map[string]float64
}

func (r *recorder) ReportMetric(n float64, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]float64{}
	}
	r.m[unit] = n
}

func (r *recorder) ResetTimer() {}

func (r *recorder) Logf(format string, args ...any) { r.t.Logf(format, args...) }

// TestSmoke runs every workload of every backend for one round at a tiny
// size, so that the benchmarks keep working as the library changes: each
// layer must report a positive rate and each ratio must be there. It
// measures nothing. As in the benchmarks, a layer fails when most of its
// operations fail; a few failures (a call that ran out of its 1s
// OperationTimeout on a loaded machine) are logged.
func TestSmoke(t *testing.T) {
	kits := []struct {
		name   string
		kit    func(t *testing.T) kit
		layers []string
		ratios []string
	}{
		{"memory", func(*testing.T) kit { return memoryKit() }, []string{"store", "api"}, []string{"api/store"}},
		{"valkey", func(t *testing.T) kit { return valkeyKit(needValkey(t)) }, []string{"floor", "store", "api"}, []string{"api/floor", "store/floor", "api/store"}},
		{"postgres", func(t *testing.T) kit { return postgresKit(needPostgres(t)) }, []string{"floor", "store", "api"}, []string{"api/floor", "store/floor", "api/store"}},
	}
	for _, kc := range kits {
		t.Run(kc.name, func(t *testing.T) {
			t.Parallel()
			k := kc.kit(t)
			for _, w := range workloads {
				r := &recorder{t: t}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := w.run(ctx, r, k, tinySizes, 1)
				cancel()
				if err != nil {
					t.Fatalf("%s: %v", w.name, err)
				}
				layers := kc.layers
				switch w.name {
				case "renew":
					layers = append(layers[:len(layers):len(layers)], "managed")
				case "handoff":
					layers = append(layers[:len(layers):len(layers)], "acquire")
				}
				for _, l := range layers {
					found := false
					for unit, v := range r.m {
						if strings.HasPrefix(unit, l+"-") && strings.HasSuffix(unit, "/s") {
							found = true
							if v <= 0 {
								t.Errorf("%s: %s = %v, want > 0", w.name, unit, v)
							}
						}
					}
					if !found {
						t.Errorf("%s: no rate reported for %s (got %v)", w.name, l, r.m)
					}
				}
				for _, q := range kc.ratios {
					if r.m[q] <= 0 {
						t.Errorf("%s: ratio %s = %v, want > 0", w.name, q, r.m[q])
					}
				}
			}
		})
	}
}
