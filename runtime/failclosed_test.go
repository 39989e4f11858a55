package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// doneContexts are the two ways a caller's ctx can already be over.
func doneContexts(t *testing.T) map[string]struct {
	ctx  context.Context
	kind error
} {
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	past, cancelPast := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	t.Cleanup(cancelPast)
	return map[string]struct {
		ctx  context.Context
		kind error
	}{"canceled": {canceled, leaseapi.ErrCanceled}, "past deadline": {past, leaseapi.ErrTimeout}}
}

// TestDoneContextNeverActs is the finding of issue 15: Renew, Release and
// StartManaged with a ctx that is already done returned ErrCanceled yet
// acted in about half of 400 tries each. Now none of 400 tries reaches the
// backend or starts renewal, and each reports the ctx's error.
func TestDoneContextNeverActs(t *testing.T) {
	const tries = 400
	for name, dc := range doneContexts(t) {
		t.Run(name, func(t *testing.T) {
			b := setup(t, runtimeOpts())
			p := basicPolicy(t)
			h := mustAcquire(t, b.client, testKey(t, "done-ctx"), p)
			for range tries {
				wantKind(t, "Renew", h.Renew(dc.ctx), dc.kind)
				wantKind(t, "Release", h.Release(dc.ctx), dc.kind)
				m, err := h.StartManaged(dc.ctx)
				wantKind(t, "StartManaged", err, dc.kind)
				if m != nil {
					t.Fatal("StartManaged with a done ctx returned a Managed")
				}
			}
			if n := b.faulty.Calls(leaseapi.OperationRenew) + b.faulty.Calls(leaseapi.OperationRelease); n != 0 {
				t.Fatalf("backend calls made for requests with a done ctx: got %d, want 0", n)
			}
			if got := b.client.Managed(); got != 0 {
				t.Fatalf("managed handles after StartManaged with a done ctx: got %d, want 0", got)
			}
			wantState(t, "after 3×400 requests with a done ctx", h, leaseapi.StateActive)
			// The handle still works with a live ctx.
			if _, err := h.StartManaged(t.Context()); err != nil {
				t.Fatalf("StartManaged with a live ctx: %v", err)
			}
			if err := h.Release(t.Context()); err != nil {
				t.Fatalf("Release with a live ctx: %v", err)
			}
		})
	}
}

// TestCanceledWhileQueuedIsWithdrawn: a request queued behind a slow call
// whose ctx ends is withdrawn: the supervisor never acts on it.
func TestCanceledWhileQueuedIsWithdrawn(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "withdrawn"), p)
		b.faulty.SetDelay(time.Second) // the validate below occupies the actor for 1s
		go func() { _ = h.Validate(context.Background()) }()
		simtest.Settle()
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- h.Release(ctx) }()
		simtest.Settle() // the release is queued
		cancel()
		wantKind(t, "Release withdrawn while queued", <-errc, leaseapi.ErrCanceled)
		simtest.Advance(2 * time.Second) // the validate completes; the actor goes on
		b.faulty.SetDelay(0)
		if n := b.faulty.Calls(leaseapi.OperationRelease); n != 0 {
			t.Fatalf("release calls: got %d, want 0 (the release was withdrawn)", n)
		}
		wantState(t, "after the withdrawn release", h, leaseapi.StateActive)
	})
}

// TestCancelRacingARequestActsOnlyIfItSaysSo races each request against
// its ctx's cancellation: whenever the caller is told ErrCanceled, nothing
// was done; whenever something was done, the caller is told its outcome.
func TestCancelRacingARequestActsOnlyIfItSaysSo(t *testing.T) {
	const tries = 400
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.NewFaulty(store)
	c, err := runtime.NewClient(f, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p := basicPolicy(t)
	race := func(call func(ctx context.Context) error) error {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(cancel)
		err := call(ctx)
		wg.Wait()
		return err
	}
	acted := map[string]int{}
	for i := range tries {
		h := mustAcquire(t, c, testKey(t, "race"), p)

		before := f.Calls(leaseapi.OperationRenew)
		err := race(h.Renew)
		did := f.Calls(leaseapi.OperationRenew) > before
		if checkRace(t, "Renew", err, did) {
			acted["Renew"]++
		}

		err = race(func(ctx context.Context) error { _, err := h.StartManaged(ctx); return err })
		did = h.Status().Managed
		if checkRace(t, "StartManaged", err, did) {
			acted["StartManaged"]++
		}

		before = f.Calls(leaseapi.OperationRelease)
		err = race(h.Release)
		did = f.Calls(leaseapi.OperationRelease) > before
		if checkRace(t, "Release", err, did) {
			acted["Release"]++
		}
		if !did { // give the key back for the next try
			if err := h.Release(t.Context()); err != nil {
				t.Fatalf("try %d: Release: %v", i, err)
			}
		}
		<-h.Done()
	}
	if got := c.Managed(); got != 0 {
		t.Fatalf("managed handles left: got %d, want 0", got)
	}
	t.Logf("of %d tries each, acted on: %v", tries, acted)
}

// checkRace checks one raced request: done must equal "not canceled".
func checkRace(t *testing.T, what string, err error, done bool) bool {
	t.Helper()
	canceled := errors.Is(err, leaseapi.ErrCanceled)
	switch {
	case canceled && done:
		t.Fatalf("%s: reported %v, but it was done", what, err)
	case !canceled && err != nil:
		t.Fatalf("%s: got %v, want nil or ErrCanceled", what, err)
	case !canceled && !done:
		t.Fatalf("%s: reported success, but it was not done", what)
	}
	return done
}

// closeSetup is setup without the Close at cleanup: these tests close the
// client themselves and look at Close's error.
func closeSetup(t *testing.T, o runtime.ClientOptions) *bundle {
	t.Helper()
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.NewFaulty(store)
	c, err := runtime.NewClient(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{store: store, faulty: f, client: c}
}

// TestCloseReportsUnconfirmedReleases: Close returns an error matching the
// class of every release on close that failed (ErrBackendUnavailable: it
// was not applied) or could not be confirmed (ErrAmbiguousOutcome), and
// nil only when every release was confirmed. A second Close reports the
// same shutdown.
func TestCloseReportsUnconfirmedReleases(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []simtest.Fault
		want   []error
	}{
		{"all confirmed", nil, nil},
		{"definite failure", []simtest.Fault{simtest.FailBeforeSend}, []error{leaseapi.ErrBackendUnavailable}},
		{"ambiguous", []simtest.Fault{simtest.LoseReply}, []error{leaseapi.ErrAmbiguousOutcome}},
		{"both", []simtest.Fault{simtest.FailBeforeSend, simtest.LoseReply}, []error{leaseapi.ErrBackendUnavailable, leaseapi.ErrAmbiguousOutcome}},
		{"stale: nothing of ours is held", []simtest.Fault{simtest.Stale}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := closeSetup(t, runtimeOpts())
				p := basicPolicy(t)
				var hs []*runtime.Handle
				for _, name := range []string{"a", "b", "c"} {
					hs = append(hs, mustAcquire(t, b.client, testKey(t, "close-"+name), p))
				}
				if _, err := hs[0].StartManaged(t.Context()); err != nil {
					t.Fatal(err)
				}
				b.faulty.Inject(leaseapi.OperationRelease, tc.faults...)
				err := b.client.Close(t.Context())
				if tc.want == nil && err != nil {
					t.Fatalf("Close: got %v, want nil", err)
				}
				for _, w := range tc.want {
					if !errors.Is(err, w) {
						t.Fatalf("Close: got %v, want an error matching %v", err, w)
					}
				}
				for _, other := range []error{leaseapi.ErrLost, leaseapi.ErrTimeout, leaseapi.ErrCanceled, leaseapi.ErrStaleOwner} {
					if errors.Is(err, other) {
						t.Fatalf("Close: got %v, which also matches %v", err, other)
					}
				}
				if err != nil {
					// One error per class, each matching exactly one sentinel.
					parts := err.(interface{ Unwrap() []error }).Unwrap()
					if len(parts) != len(tc.want) {
						t.Fatalf("Close: got %d joined errors (%v), want one per class: %d", len(parts), err, len(tc.want))
					}
					for _, part := range parts {
						n := 0
						for _, s := range []error{leaseapi.ErrContended, leaseapi.ErrTimeout, leaseapi.ErrCanceled, leaseapi.ErrLost,
							leaseapi.ErrStaleOwner, leaseapi.ErrBackendUnavailable, leaseapi.ErrInvalidState,
							leaseapi.ErrAmbiguousOutcome, leaseapi.ErrCapacity, leaseapi.ErrFencingRegression} {
							if errors.Is(part, s) {
								n++
							}
						}
						if n != 1 {
							t.Fatalf("Close: part %v matches %d sentinels, want 1", part, n)
						}
					}
				}
				if again := b.client.Close(t.Context()); (again == nil) != (err == nil) {
					t.Fatalf("second Close: got %v, want the first's %v", again, err)
				}
				released := 0
				for _, h := range hs {
					<-h.Done()
					switch h.State() {
					case leaseapi.StateReleased:
						released++
					case leaseapi.StateLost:
					default:
						t.Fatalf("handle after Close: %v, want released or lost", h.State())
					}
				}
				if want := len(hs) - len(tc.faults); released != want {
					t.Fatalf("released by Close: got %d, want %d", released, want)
				}
			})
		})
	}
}

// TestRunReportsTheRelease: Run returns the release's error when fn
// succeeded and the release failed or was ambiguous, and both errors when
// both failed.
func TestRunReportsTheRelease(t *testing.T) {
	fnErr := errors.New("job failed")
	for _, tc := range []struct {
		name  string
		fault simtest.Fault
		fn    error
		want  []error
	}{
		{"fn ok, release unavailable", simtest.FailBeforeSend, nil, []error{leaseapi.ErrBackendUnavailable}},
		{"fn ok, release ambiguous", simtest.LoseReply, nil, []error{leaseapi.ErrAmbiguousOutcome}},
		{"fn failed, release ambiguous", simtest.LoseReply, fnErr, []error{fnErr, leaseapi.ErrAmbiguousOutcome}},
		{"fn failed, release ok", 0, fnErr, []error{fnErr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := setup(t, runtimeOpts())
				p := basicPolicy(t)
				err := b.client.Run(t.Context(), testKey(t, "run-release"), p, func(ctx context.Context, h *runtime.Handle) error {
					if tc.fault != 0 {
						b.faulty.Inject(leaseapi.OperationRelease, tc.fault)
					}
					return tc.fn
				})
				for _, w := range tc.want {
					if !errors.Is(err, w) {
						t.Fatalf("Run: got %v, want an error matching %v", err, w)
					}
				}
				if tc.fault == 0 && errors.Is(err, leaseapi.ErrAmbiguousOutcome) {
					t.Fatalf("Run: got %v, want only fn's error", err)
				}
			})
		})
	}
}

// TestRunWhereFnReleases is the finding of issue 15: fn that releases the
// lease itself and returns nil made Run return ErrLost in 670 of 2,000
// runs. A successful release by fn is not a loss: Run returns nil always.
func TestRunWhereFnReleases(t *testing.T) {
	const runs = 2000
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := runtime.NewClient(store, runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p := basicPolicy(t)
	for i := range runs {
		err := c.Run(t.Context(), testKey(t, "fn-releases"), p, func(ctx context.Context, h *runtime.Handle) error {
			return h.Release(ctx)
		})
		if err != nil {
			t.Fatalf("run %d: got %v, want nil", i, err)
		}
	}
}

// TestMaxHeld: held handles are bounded: one more acquisition fails fast
// with ErrCapacity without calling the backend, and a slot comes back
// when a lease ends.
func TestMaxHeld(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		const max = 10
		b := setup(t, runtime.ClientOptions{MaxHeld: max, MaxWaiters: 1, MaxManaged: 1})
		p := basicPolicy(t)
		var hs []*runtime.Handle
		for i := range 1000 {
			h, err := b.client.TryAcquire(t.Context(), testKey(t, fmt.Sprint("held-", i)), p)
			if i < max {
				if err != nil {
					t.Fatalf("acquisition %d: %v", i, err)
				}
				hs = append(hs, h)
				continue
			}
			wantKind(t, "acquisition past MaxHeld", err, leaseapi.ErrCapacity)
		}
		if got := b.faulty.Calls(leaseapi.OperationAcquire); got != max {
			t.Fatalf("backend acquisitions: got %d, want %d (the refused ones make no call)", got, max)
		}
		if got := b.client.Held(); got != max {
			t.Fatalf("Held: got %d, want %d", got, max)
		}
		if err := hs[0].Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-hs[0].Done()
		if _, err := b.client.TryAcquire(t.Context(), testKey(t, "held-again"), p); err != nil {
			t.Fatalf("acquisition after a release freed a slot: %v", err)
		}
		simtest.Advance(p.TTL()) // unmanaged handles end at their deadline...
		for _, h := range hs {
			<-h.Done()
		}
		if got := b.client.Held(); got != 0 {
			t.Fatalf("Held after every deadline: got %d, want 0", got)
		}
		if _, err := b.client.TryAcquire(t.Context(), testKey(t, "held-after"), p); err != nil {
			t.Fatalf("acquisition after the deadlines freed the slots: %v", err)
		}
	})
}

// TestMaxHeldBounds: MaxHeld is validated like the other bounds.
func TestMaxHeldBounds(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	for _, n := range []uint32{runtime.MaxClientHeld + 1, ^uint32(0)} {
		if _, err := runtime.NewClient(store, runtime.ClientOptions{MaxHeld: n}); leaseapi.Kind(err) != leaseapi.ErrInvalidState {
			t.Fatalf("MaxHeld %d: got %v, want ErrInvalidState", n, err)
		}
	}
}
