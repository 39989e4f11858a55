package queue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/queue"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func newStore(t *testing.T) *memory.Store {
	t.Helper()
	s, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

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
	f := simtest.NewFaulty(store)
	c, err := runtime.NewClient(f, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.SetMode(simtest.Pass)
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, f
}

func policy(t *testing.T, o leaseapi.PolicyOptions) leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(o)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// itemPolicy: TTL 10s, margin 2s, renew every 3s, retry 1s.
func itemPolicy(t *testing.T) leaseapi.Policy {
	return policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, RenewEvery: 3 * time.Second, Retry: time.Second, OperationTimeout: time.Second})
}

func wantKind(t *testing.T, what string, err, want error) {
	t.Helper()
	if got := leaseapi.Kind(err); got != want || !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error matching exactly %v", what, err, want)
	}
}

// events collects a worker's events.
type events struct {
	mu   sync.Mutex
	list []queue.Event
}

func (e *events) add(ev queue.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) count(o queue.Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.list {
		if ev.Outcome == o {
			n++
		}
	}
	return n
}

func (e *events) all() []queue.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]queue.Event(nil), e.list...)
}

func startWorker(t *testing.T, w *queue.Worker) {
	t.Helper()
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// pause waits d on the (simulated) clock or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
