package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/queue"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func newSource(t *testing.T, visibility time.Duration) *queue.MemorySource {
	t.Helper()
	s, err := queue.NewMemorySource(queue.MemoryOptions{Visibility: visibility})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newClient(t *testing.T, store *memory.Store) (*runtime.Client, *simtest.Faulty) {
	t.Helper()
	return backendtest.FaultyClient(t, store, runtime.ClientOptions{})
}

// itemPolicy: TTL 10s, margin 2s, renew every 3s, retry 1s.
func itemPolicy(t *testing.T) leaseapi.Policy {
	return backendtest.Policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, RenewEvery: 3 * time.Second, Retry: time.Second, OperationTimeout: time.Second})
}

// events collects a worker's events.
type events struct{ backendtest.Log[queue.Event] }

func (e *events) add(ev queue.Event) { e.Add(ev) }

func (e *events) count(o queue.Outcome) int {
	return e.Count(func(ev queue.Event) bool { return ev.Outcome == o })
}

func (e *events) all() []queue.Event { return e.All() }

// pause waits d on the (simulated) clock or until ctx ends, then returns
// nil or ctx's cause (a handler's loss, not just context.Canceled).
func pause(ctx context.Context, d time.Duration) error {
	if backendtest.Pause(ctx, d) != nil {
		return context.Cause(ctx)
	}
	return nil
}
