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

// loggingWrapper is the wrapper of the finding: an application's logging
// wrapper that forwards the four Backend methods and Inspect, and knows
// nothing of capabilities.
type loggingWrapper struct{ b leaseapi.Backend }

func (w loggingWrapper) TryAcquire(ctx context.Context, k leaseapi.Key, o string, ttl time.Duration) (leaseapi.Record, error) {
	return w.b.TryAcquire(ctx, k, o, ttl)
}
func (w loggingWrapper) Renew(ctx context.Context, r leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	return w.b.Renew(ctx, r, ttl)
}
func (w loggingWrapper) Validate(ctx context.Context, r leaseapi.Record) (leaseapi.Record, error) {
	return w.b.Validate(ctx, r)
}
func (w loggingWrapper) Release(ctx context.Context, r leaseapi.Record) error {
	return w.b.Release(ctx, r)
}
func (w loggingWrapper) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	return w.b.(leaseapi.Inspector).Inspect(ctx, k)
}

// TestWrapperThatHidesAdoptionGetsNone is the regression test of the
// finding: a Valkey-with-WaitReplicas-like store (no Adopt) behind a
// logging wrapper that forwards Inspect but not the claims. The runtime
// used to adopt the read-back grant (fail-open); now the lost reply is
// ErrAmbiguousOutcome, nothing is held, and the grant expires at its TTL.
// The same wrapper around a store that does claim Adopt gets no adoption
// either: a hidden answer is the safe answer.
func TestWrapperThatHidesAdoptionGetsNone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func(*simtest.Faulty) leaseapi.Backend
	}{
		{"store that forbids adoption", func(f *simtest.Faulty) leaseapi.Backend { return noAdopt{f} }},
		{"store that allows adoption", func(f *simtest.Faulty) leaseapi.Backend { return f }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				store, _ := memory.New(memory.Options{})
				f := simtest.NewFaulty(store)
				w := loggingWrapper{tc.inner(f)}
				if got := leaseapi.CapabilitiesOf(w); got != (leaseapi.Capabilities{}) {
					t.Fatalf("capabilities of a wrapper that claims nothing: got %+v, want none", got)
				}
				c, err := runtime.NewClient(w, runtime.ClientOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				p := basicPolicy(t)
				k := testKey(t, "hidden-adopt")
				f.Inject(leaseapi.OperationAcquire, simtest.LoseReply)
				_, err = c.TryAcquire(t.Context(), k, p)
				wantKind(t, "lost reply behind a wrapper that hides the adoption answer", err, leaseapi.ErrAmbiguousOutcome)
				if c.Held() != 0 {
					t.Fatal("the orphan grant was adopted through a wrapper that hid the answer")
				}
				if f.Calls(leaseapi.OperationInspect) != 0 {
					t.Fatal("the runtime inspected a backend that claims neither Inspect nor Adopt")
				}
				if _, held, _ := store.Inspect(t.Context(), k); !held {
					t.Fatal("the lost acquisition should have committed (the test is vacuous)")
				}
				_, err = c.TryAcquire(t.Context(), k, p)
				wantKind(t, "TryAcquire while the orphan lives", err, leaseapi.ErrContended)
				simtest.Advance(p.TTL()) // the orphan expires at its TTL
				mustAcquire(t, c, k, p)
			})
		})
	}
}

// TestObservedBackendClaimsExactlyItsInner: ObservedBackend used to claim
// Inspect, WatchRelease and RenewBatch whatever it wrapped; it now claims
// exactly what the wrapped backend claims, no more.
func TestObservedBackendClaimsExactlyItsInner(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	for _, tc := range []struct {
		name  string
		inner leaseapi.Backend
	}{
		{"memory store", store},
		{"four-method wrapper", loggingWrapper{store}},
		{"fault wrapper (may block)", simtest.NewFaulty(store)},
		{"store that forbids adoption", noAdopt{simtest.NewFaulty(store)}},
	} {
		ob, err := runtime.NewObservedBackend(tc.inner, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, want := leaseapi.CapabilitiesOf(ob), leaseapi.CapabilitiesOf(tc.inner)
		if got != want {
			t.Fatalf("%s: ObservedBackend claims %+v, want exactly the inner backend's %+v", tc.name, got, want)
		}
		// And the chain is as safe as the inner backend: observing twice
		// changes nothing either.
		ob2, _ := runtime.NewObservedBackend(ob, nil)
		if got := leaseapi.CapabilitiesOf(ob2); got != want {
			t.Fatalf("%s, observed twice: claims %+v, want %+v", tc.name, got, want)
		}
	}
	want := leaseapi.Capabilities{Inspect: true, Adopt: true, WatchRelease: true, RenewBatch: true, NeverBlocks: true}
	if got := leaseapi.CapabilitiesOf(store); got != want {
		t.Fatalf("memory store claims %+v, want %+v", got, want)
	}
}

// TestUnclaimedNeverBlocksKeepsTimeouts: a four-method wrapper around the
// memory store (which claims NeverBlocks) may block, so every call through
// it is bounded by OperationTimeout: a hung acquisition ends after exactly
// OperationTimeout with ErrAmbiguousOutcome instead of hanging forever.
func TestUnclaimedNeverBlocksKeepsTimeouts(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		f := simtest.NewFaulty(store)
		c, err := runtime.NewClient(loggingWrapper{f}, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		f.Inject(leaseapi.OperationAcquire, simtest.Hang)
		start := time.Now()
		_, err = c.TryAcquire(context.Background(), testKey(t, "hang"), p)
		wantKind(t, "hung acquisition behind a wrapper", err, leaseapi.ErrAmbiguousOutcome)
		if took := time.Since(start); took != p.OperationTimeout() {
			t.Fatalf("hung acquisition took %v, want exactly OperationTimeout %v", took, p.OperationTimeout())
		}
	})
}

// unclaimedBatcher has a RenewBatch method but claims nothing.
type unclaimedBatcher struct{ *batchingBackend }

func (unclaimedBatcher) Capabilities() leaseapi.Capabilities { return leaseapi.Capabilities{} }

// TestUnclaimedBatchingIsNotUsed: a RenewBatch method is no claim; managed
// renewals of a backend that does not claim RenewBatch are single Renews.
func TestUnclaimedBatchingIsNotUsed(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		bb := &batchingBackend{s: store}
		c, err := runtime.NewClient(unclaimedBatcher{bb}, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		h := mustAcquire(t, c, testKey(t, "unclaimed-batch"), p)
		if _, err := h.StartManaged(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			simtest.Advance(p.RenewEvery())
		}
		wantState(t, "managed lease", h, leaseapi.StateActive)
		bb.mu.Lock()
		defer bb.mu.Unlock()
		if len(bb.batches) != 0 || bb.singles < 5 {
			t.Fatalf("got %d batches and %d single renewals, want 0 batches and >= 5 singles", len(bb.batches), bb.singles)
		}
	})
}
