package runtime

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// meteredBackend times every call the client itself makes to its backend
// (acquisitions, and the release of a grant it will not use) into the
// client's metrics: where the work happens, exactly, whatever the
// observers drop. It is internal: the client discovers the backend's
// capabilities on the backend itself, never on this wrapper.
//
// The supervisors' calls are not routed through it but reported by the
// supervisor's OnCall hook (see Client.supervisorCall): any frame added
// beneath an in-process backend's call on the actor's stack pushes it past
// the minimum goroutine stack, and the copy that follows doubled the cost
// of a TryAcquire+Release pair on the memory backend.
type meteredBackend struct {
	b   leaseapi.Backend
	m   *clientMetrics
	clk clock.Clock
}

func (mb *meteredBackend) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	start := mb.clk.Now()
	rec, err := mb.b.TryAcquire(ctx, k, owner, ttl)
	mb.m.called(callAcquire, mb.clk.Since(start), err)
	return rec, err
}

func (mb *meteredBackend) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	start := mb.clk.Now()
	out, err := mb.b.Renew(ctx, rec, ttl)
	mb.m.called(callRenew, mb.clk.Since(start), err)
	return out, err
}

func (mb *meteredBackend) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	start := mb.clk.Now()
	cur, err := mb.b.Validate(ctx, rec)
	mb.m.called(callValidate, mb.clk.Since(start), err)
	return cur, err
}

func (mb *meteredBackend) Release(ctx context.Context, rec leaseapi.Record) error {
	start := mb.clk.Now()
	err := mb.b.Release(ctx, rec)
	mb.m.called(callRelease, mb.clk.Since(start), err)
	return err
}

// meteredInspector times the inspections that resolve lost acquisition
// replies.
type meteredInspector struct {
	in  leaseapi.Inspector
	m   *clientMetrics
	clk clock.Clock
}

func (mi *meteredInspector) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	start := mi.clk.Now()
	rec, held, err := mi.in.Inspect(ctx, k)
	mi.m.called(callInspect, mi.clk.Since(start), err)
	return rec, held, err
}
