package runtime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// bundle is what most tests need: a memory store, a fault wrapper around
// it and a client on the fault wrapper. Build it inside simtest.Simulate.
type bundle struct {
	store  *memory.Store
	faulty *simtest.Faulty
	client *runtime.Client
	// closeFailed: the test closed the client itself and checked that its
	// releases failed, so the Close at cleanup reports them again.
	closeFailed bool
}

func setup(t *testing.T, o runtime.ClientOptions) *bundle {
	t.Helper()
	b := closeSetup(t, o)
	t.Cleanup(func() {
		if err := b.client.Close(context.Background()); err != nil && !b.closeFailed {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func policy(t *testing.T, o leaseapi.PolicyOptions) leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(o)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// basicPolicy: TTL 10s, margin 1s, renew every 3s, retry 1s, op timeout 2s.
func basicPolicy(t *testing.T) leaseapi.Policy {
	return policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, RenewEvery: 3 * time.Second, Retry: time.Second, OperationTimeout: 2 * time.Second})
}

func testKey(t *testing.T, name string) leaseapi.Key {
	t.Helper()
	return leaseapi.MustKey("test", name)
}

func wantKind(t *testing.T, what string, err, want error) {
	t.Helper()
	if got := leaseapi.Kind(err); got != want || !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error matching exactly %v", what, err, want)
	}
}

func wantState(t *testing.T, what string, h *runtime.Handle, want leaseapi.State) {
	t.Helper()
	if got := h.State(); got != want {
		t.Fatalf("%s: state got %v, want %v", what, got, want)
	}
}

func mustAcquire(t *testing.T, c *runtime.Client, k leaseapi.Key, p leaseapi.Policy) *runtime.Handle {
	t.Helper()
	h, err := c.TryAcquire(t.Context(), k, p)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return h
}

func simtestStore(t *testing.T) (*memory.Store, error) {
	t.Helper()
	return memory.New(memory.Options{})
}

func containsFold(s, sub string) bool {
	return sub != "" && strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
