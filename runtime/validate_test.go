package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// generousValidator is a backend whose Validate reports the grant with an
// expiry an hour later than the store holds: what a buggy or hostile
// backend, or one whose clock jumped, could return.
type generousValidator struct{ *memory.Store }

func (g generousValidator) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	got, err := g.Store.Validate(ctx, rec)
	got.ExpiresAt = got.ExpiresAt.Add(time.Hour)
	return got, err
}

// TestValidateNeverExtendsTheDeadline: the record Validate returns is the
// backend's, but the local deadline stays the one of the last grant or
// renewal, whatever that record says; the handle still expires on time.
func TestValidateNeverExtendsTheDeadline(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := runtime.NewClient(generousValidator{store}, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		h := mustAcquire(t, c, testKey(t, "validate-deadline"), p)
		deadline, rec := h.Deadline(), h.Snapshot()
		simtest.Advance(p.TTL() / 2)
		if err := h.Validate(t.Context()); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		if !h.Deadline().Equal(deadline) || h.Snapshot() != rec {
			t.Fatalf("after Validate: deadline %v record expiring %v, want the grant's %v and %v", h.Deadline(), h.Snapshot().ExpiresAt, deadline, rec.ExpiresAt)
		}
		wantState(t, "validated", h, leaseapi.StateActive)
		simtest.Advance(time.Until(deadline))
		wantState(t, "at the grant's deadline", h, leaseapi.StateExpired)
	})
}
