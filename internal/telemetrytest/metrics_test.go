package telemetrytest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// tally counts what the test saw each public operation return.
type tally struct {
	mu sync.Mutex
	n  map[string]map[leaseapi.Outcome]uint64
}

func (t *tally) add(op string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]map[leaseapi.Outcome]uint64{}
	}
	if t.n[op] == nil {
		t.n[op] = map[leaseapi.Outcome]uint64{}
	}
	t.n[op][leaseapi.OutcomeOf(err)]++
}

func (t *tally) total(op string) uint64 {
	var n uint64
	for _, c := range t.n[op] {
		n += c
	}
	return n
}

// TestMetricsExactOnRealBackends: 64 goroutines acquire, contend, renew,
// validate and release on a real server; every counter of the client
// equals, per outcome, what the operations returned (whatever the servers'
// timing made of them), and the gauges return to zero.
func TestMetricsExactOnRealBackends(t *testing.T) {
	backendtest.ForEachReal(t, "metrics", func(t *testing.T, newBackend backendtest.NewBackend) {
		const goroutines, rounds = 64, 4
		c, err := runtime.NewClient(newBackend(t), runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := backendtest.Policy(t, leaseapi.PolicyOptions{TTL: 30 * time.Second, SafetyMargin: 2 * time.Second, OperationTimeout: 10 * time.Second})
		ctx := context.Background()
		var seen tally
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				k := leaseapi.MustKey("metrics", fmt.Sprint("g", g))
				for range rounds {
					h, err := c.TryAcquire(ctx, k, p)
					seen.add("acquire", err)
					if err != nil {
						continue
					}
					_, err = c.TryAcquire(ctx, k, p)
					seen.add("acquire", err)
					seen.add("renew", h.Renew(ctx))
					seen.add("validate", h.Validate(ctx))
					seen.add("release", h.Release(ctx))
					if h.State() != leaseapi.StateReleased {
						seen.add("release", h.Release(ctx)) // an ambiguous release: again
					}
					<-h.Done()
				}
			})
		}
		wg.Wait()

		m := c.Metrics()
		check := func(what string, got, want uint64) {
			t.Helper()
			if got != want {
				t.Errorf("%s: got %d, want %d", what, got, want)
			}
		}
		var acquisitions uint64
		for _, h := range m.Acquisitions {
			acquisitions += h.Count()
			check("acquisitions "+h.Outcome.String(), h.Count(), seen.n["acquire"][h.Outcome])
		}
		check("acquisitions", acquisitions, seen.total("acquire"))
		var acquireCalls uint64
		for _, h := range m.BackendCalls {
			if h.Operation == leaseapi.OperationAcquire {
				acquireCalls += h.Count()
			}
		}
		check("backend acquire calls (one per attempt)", acquireCalls, seen.total("acquire"))
		for o, n := range seen.n["renew"] {
			check("renewals "+o.String(), m.Renewal(o), n)
			check("backend renew calls "+o.String(), m.BackendCall(leaseapi.OperationRenew, o).Count(), n)
		}
		for o, n := range seen.n["validate"] {
			check("backend validate calls "+o.String(), m.BackendCall(leaseapi.OperationValidate, o).Count(), n)
		}
		for o, n := range seen.n["release"] {
			check("releases "+o.String(), m.Release(o), n)
		}
		ok := leaseapi.OutcomeOf(nil)
		check("acquisitions that could contend", seen.n["acquire"][leaseapi.OutcomeOf(leaseapi.ErrContended)], seen.n["acquire"][ok])
		check("released", m.StateChange(leaseapi.StateActive, leaseapi.StateReleased)+m.StateChange(leaseapi.StateUncertain, leaseapi.StateReleased), seen.n["release"][ok])
		if m.Held != 0 || m.Waiting != 0 || m.Managed != 0 {
			t.Errorf("gauges after: got held %d, waiting %d, managed %d, want 0", m.Held, m.Waiting, m.Managed)
		}
		t.Logf("%d operations: %v", seen.total("acquire")+seen.total("renew")+seen.total("validate")+seen.total("release"), seen.n)
	})
}
