package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func TestRunCancelsOnLossAndReleases(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "run-loss")
		var fnErr error
		err := b.client.Run(t.Context(), k, p, func(ctx context.Context, h *runtime.Handle) error {
			b.faulty.SetMode(simtest.Down) // renewals fail from now on
			<-ctx.Done()
			if h.State() == leaseapi.StateActive {
				t.Error("fn's ctx canceled while the handle is Active")
			}
			fnErr = context.Cause(ctx)
			return nil
		})
		wantKind(t, "Run after a loss", err, leaseapi.ErrLost)
		if leaseapi.Kind(fnErr) != leaseapi.ErrLost {
			t.Fatalf("fn's ctx cause: got %v, want an ErrLost", fnErr)
		}
		b.faulty.SetMode(simtest.Pass)
		if b.client.Managed() != 0 || b.client.Held() != 0 {
			t.Fatalf("after Run: managed %d, held %d, want 0, 0", b.client.Managed(), b.client.Held())
		}
	})
}

func TestRunReleasesWhenFnReturns(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "run-ok")
		var token leaseapi.Token
		sentinel := errors.New("job failed")
		err := b.client.Run(t.Context(), k, p, func(ctx context.Context, h *runtime.Handle) error {
			token = h.Token()
			simtest.Advance(time.Minute) // managed renewal keeps it
			if h.State() != leaseapi.StateActive {
				t.Errorf("state during Run: %v", h.State())
			}
			return sentinel
		})
		if !errors.Is(err, sentinel) {
			t.Fatalf("Run: got %v, want fn's error", err)
		}
		// Released at once, not after the TTL.
		h := mustAcquire(t, b.client, k, p)
		if h.Token() != token+1 {
			t.Fatalf("token after Run: got %d, want %d", h.Token(), token+1)
		}
	})
}

func TestRunReleasesWhenFnPanics(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "run-panic")
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the panic to propagate", r)
				}
			}()
			_ = b.client.Run(t.Context(), k, p, func(context.Context, *runtime.Handle) error { panic("boom") })
		}()
		mustAcquire(t, b.client, k, p)
	})
}

func TestCloseReleasesEverything(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		var hs []*runtime.Handle
		var ms []*runtime.Managed
		for i := range 5 {
			h := mustAcquire(t, b.client, testKey(t, "close-"+string(rune('a'+i))), p)
			if i%2 == 0 {
				m, err := h.StartManaged(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, m)
			}
			hs = append(hs, h)
		}
		// A waiter is aborted by Close.
		waitErr := make(chan error, 1)
		go func() {
			_, err := b.client.Acquire(context.Background(), testKey(t, "close-a"), waitPolicy(t, time.Hour, 0))
			waitErr <- err
		}()
		simtest.Settle()
		if err := b.client.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wantKind(t, "waiting Acquire aborted by Close", <-waitErr, leaseapi.ErrInvalidState)
		for _, h := range hs {
			if h.State() != leaseapi.StateReleased {
				t.Fatalf("handle after Close: %v, want released", h.State())
			}
			select {
			case <-h.Done():
			default:
				t.Fatal("supervisor alive after Close")
			}
		}
		for _, m := range ms {
			if _, ok := <-m.Loss(); ok {
				t.Fatal("a released handle delivered a Loss on Close")
			}
		}
		for i := range 5 {
			if _, err := b.store.TryAcquire(t.Context(), testKey(t, "close-"+string(rune('a'+i))), "next", p.TTL()); err != nil {
				t.Fatalf("key %d not released by Close: %v", i, err)
			}
		}
		if err := b.client.Close(t.Context()); err != nil {
			t.Fatalf("second Close: got %v, want nil", err)
		}
		_, err := b.client.TryAcquire(t.Context(), testKey(t, "after"), p)
		wantKind(t, "TryAcquire after Close", err, leaseapi.ErrInvalidState)
	})
}

func TestCloseBoundedByCtxWhenBackendHangs(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := closeSetup(t, runtimeOpts()) // this test closes the client itself
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "close-hang"), p)
		m, err := h.StartManaged(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.faulty.SetMode(simtest.Blackhole)
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = b.client.Close(ctx)
		wantKind(t, "Close with a hanging backend", err, leaseapi.ErrTimeout)
		if !errors.Is(err, leaseapi.ErrAmbiguousOutcome) {
			t.Fatalf("Close with a hanging backend: got %v, want it to say the release was not confirmed (ErrAmbiguousOutcome)", err)
		}
		if took := time.Since(start); took != 500*time.Millisecond {
			t.Fatalf("Close took %v, want the ctx's 500ms", took)
		}
		if h.State() == leaseapi.StateActive {
			t.Fatal("handle Active after Close")
		}
		l, ok := <-m.Loss()
		if !ok || l.State != leaseapi.StateLost {
			t.Fatalf("Loss on an unreleased Close: got (%+v, %v), want Lost", l, ok)
		}
		<-h.Done()
	})
}

// TestUnblocking is the unblocking table: every blocking method returns on
// ctx cancel while the actor is busy, on Close, and after the actor exit,
// with the right sentinel.
func TestUnblocking(t *testing.T) {
	methods := []struct {
		name string
		call func(ctx context.Context, h *runtime.Handle) error
	}{
		{"Renew", func(ctx context.Context, h *runtime.Handle) error { return h.Renew(ctx) }},
		{"Validate", func(ctx context.Context, h *runtime.Handle) error { return h.Validate(ctx) }},
		{"Release", func(ctx context.Context, h *runtime.Handle) error { return h.Release(ctx) }},
		{"StartManaged", func(ctx context.Context, h *runtime.Handle) error { _, err := h.StartManaged(ctx); return err }},
	}
	for _, m := range methods {
		t.Run(m.name+"/ctx canceled while the actor is busy", func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := setup(t, runtimeOpts())
				p := basicPolicy(t)
				h := mustAcquire(t, b.client, testKey(t, "unblock"), p)
				b.faulty.SetMode(simtest.Blackhole)
				go func() { _ = h.Validate(context.Background()) }() // occupies the actor
				simtest.Settle()
				ctx, cancel := context.WithCancel(t.Context())
				errc := make(chan error, 1)
				go func() { errc <- m.call(ctx, h) }()
				simtest.Settle()
				cancel()
				err := <-errc
				wantKind(t, m.name, err, leaseapi.ErrCanceled)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("%v does not match context.Canceled", err)
				}
				b.faulty.SetMode(simtest.Pass)
			})
		})
		t.Run(m.name+"/client closed while the actor is busy", func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := closeSetup(t, runtimeOpts()) // closed below, its release hangs
				p := basicPolicy(t)
				h := mustAcquire(t, b.client, testKey(t, "unblock"), p)
				b.faulty.SetMode(simtest.Blackhole)
				go func() { _ = h.Validate(context.Background()) }()
				simtest.Settle()
				errc := make(chan error, 1)
				go func() { errc <- m.call(context.Background(), h) }()
				simtest.Settle()
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				_ = b.client.Close(ctx)
				err := <-errc
				if err == nil && m.name != "Release" {
					t.Fatalf("%s after Close: got nil, want an error", m.name)
				}
				if err != nil && leaseapi.Kind(err) != leaseapi.ErrLost && leaseapi.Kind(err) != leaseapi.ErrInvalidState {
					t.Fatalf("%s after Close: got %v, want ErrLost or ErrInvalidState", m.name, err)
				}
			})
		})
		t.Run(m.name+"/after the actor exited", func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := setup(t, runtimeOpts())
				p := basicPolicy(t)
				h := mustAcquire(t, b.client, testKey(t, "unblock"), p)
				simtest.Advance(p.TTL())
				<-h.Done()
				wantKind(t, m.name, m.call(t.Context(), h), leaseapi.ErrLost)
			})
		})
	}
}

func TestEventsAndErrorsAreRedacted(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		const secretName, secretNS = "payroll-secret-key", "tenant-secret"
		store, _ := simtestStore(t)
		// Events arrive on the observer's own goroutine: Settle after each
		// call lets that delivery finish, so none is dropped as busy.
		var events []leaseapi.Event // appended by one delivery at a time
		ob, err := runtime.NewObservedBackend(store, nil, leaseapi.ObserverFunc(func(e leaseapi.Event) { events = append(events, e) }))
		if err != nil {
			t.Fatal(err)
		}
		c, err := runtime.NewClient(ob, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		k := leaseapi.MustKey(secretNS, secretName)
		h := mustAcquire(t, c, k, p)
		simtest.Settle()
		_, err = c.TryAcquire(t.Context(), k, p)
		simtest.Settle()
		errs := []error{err}
		errs = append(errs, h.Release(t.Context()))
		simtest.Settle()
		errs = append(errs, h.Renew(t.Context()))
		simtest.Settle()
		for _, err := range errs {
			if err == nil {
				continue
			}
			for _, s := range []string{secretName, secretNS, h.Owner()} {
				if containsFold(err.Error(), s) {
					t.Fatalf("error %q reveals %q", err, s)
				}
			}
		}
		if len(events) < 3 {
			t.Fatalf("events: got %d, want >= 3", len(events))
		}
		for _, e := range events {
			s := e.String() + e.KeyHash
			for _, secret := range []string{secretName, secretNS, h.Owner()} {
				if containsFold(s, secret) {
					t.Fatalf("event %q reveals %q", s, secret)
				}
			}
			if e.KeyHash == "" || e.KeyHash != events[0].KeyHash {
				t.Fatalf("KeyHash: got %q, want a stable non-empty hash", e.KeyHash)
			}
		}
		if events[0].Operation != leaseapi.OperationAcquire || events[0].Outcome != leaseapi.OutcomeSuccess || events[1].Outcome != leaseapi.OutcomeContended {
			t.Fatalf("events: got %v, %v", events[0], events[1])
		}
	})
}

func TestSlowObserverDropsInsteadOfBlocking(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := simtestStore(t)
		block := make(chan struct{})
		entered := make(chan struct{}, 1)
		obs := leaseapi.ObserverFunc(func(leaseapi.Event) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-block
		})
		ob, err := runtime.NewObservedBackend(store, nil, obs)
		if err != nil {
			t.Fatal(err)
		}
		k := testKey(t, "slow-observer")
		go func() { _, _ = ob.TryAcquire(context.Background(), k, "owner-1", time.Second) }()
		<-entered
		// The observer is busy: further calls complete and count as dropped.
		for range 3 {
			_, _ = ob.TryAcquire(t.Context(), k, "owner-2", time.Second)
		}
		if got := ob.(*runtime.ObservedBackend).Dropped(); got[0] != 3 {
			t.Fatalf("dropped: got %d, want 3", got[0])
		}
		close(block)
	})
}
