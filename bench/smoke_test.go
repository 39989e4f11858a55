package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// tinySizes keep the smoke test to a few seconds per backend. A slice
// must see at least one operation of every layer: on a loaded machine (the
// three backends' runs share the binary, and the binary shares the cores)
// a slice can pass without one, and the workload then runs again with its
// slices doubled, up to smokeAttempts times (see TestSmoke).
var tinySizes = sizes{
	seqPairs: 5, conc: 4, parSlice: 100 * time.Millisecond,
	leases: 50, window: 200 * time.Millisecond,
	contenders: 3, hold: time.Millisecond, handSlice: 250 * time.Millisecond,
	poll: time.Millisecond, yieldCap: 50 * time.Millisecond, jitter: 2 * time.Millisecond,
	ttl: 10 * time.Second, renewTTL: 30 * time.Second, warmup: 2,
	oneRenewal: true,
}

// smokeAttempts is how often TestSmoke runs a workload whose slices saw no
// operation of some layer, doubling the slices each time (250ms to 2s for
// handoff).
const smokeAttempts = 4

// longer is sz with its measured slices doubled.
func (sz sizes) longer() sizes {
	sz.parSlice *= 2
	sz.window *= 2
	sz.handSlice *= 2
	return sz
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
// OperationTimeout on a loaded machine) are logged. A run in which a
// layer did nothing at all, without failing, is a slice too short for
// this machine's load, not a result: it is repeated with longer slices,
// and a layer that stays at zero fails.
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
				layers := kc.layers
				switch w.name {
				case "renew":
					layers = append(layers[:len(layers):len(layers)], "managed")
				case "handoff":
					layers = append(layers[:len(layers):len(layers)], "acquire")
				}
				sz := tinySizes
				var problems []string
				for attempt := 1; ; attempt++ {
					r := &recorder{t: t}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					err := w.run(ctx, r, k, sz, 1)
					cancel()
					if err != nil {
						t.Fatalf("%s: %v", w.name, err)
					}
					var idle bool
					problems, idle = smokeProblems(r.m, w.name, layers, kc.ratios)
					if !idle || attempt == smokeAttempts {
						break
					}
					t.Logf("%s, attempt %d: a layer did no operation in its slice (%s); again with slices twice as long", w.name, attempt, strings.Join(problems, "; "))
					sz = sz.longer()
				}
				for _, p := range problems {
					t.Error(p)
				}
			}
		})
	}
}

// smokeProblems checks one smoke run's metrics: every layer reports a
// positive rate, every ratio is there. idle says whether some layer
// reported a rate of zero (its ratios are then zero or left out), which a
// longer slice may cure; a layer that reports no rate at all is a broken
// workload.
func smokeProblems(m map[string]float64, workload string, layers, ratios []string) (problems []string, idle bool) {
	allFound := true
	for _, l := range layers {
		found := false
		for unit, v := range m {
			if strings.HasPrefix(unit, l+"-") && strings.HasSuffix(unit, "/s") {
				found = true
				if v <= 0 {
					problems = append(problems, fmt.Sprintf("%s: %s = %v, want > 0", workload, unit, v))
					idle = true
				}
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("%s: no rate reported for %s (got %v)", workload, l, m))
			allFound = false
		}
	}
	for _, q := range ratios {
		if m[q] <= 0 {
			problems = append(problems, fmt.Sprintf("%s: ratio %s = %v, want > 0", workload, q, m[q]))
		}
	}
	return problems, idle && allFound
}
