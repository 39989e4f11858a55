package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func waitPolicy(t *testing.T, wait time.Duration, attempts uint32) leaseapi.Policy {
	return policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: time.Second, Wait: wait, MaxAttempts: attempts})
}

func TestAcquireWakesOnRelease(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		k := testKey(t, "handoff")
		holder := mustAcquire(t, b.client, k, basicPolicy(t))
		got := make(chan *runtime.Handle, 1)
		go func() {
			h, err := b.client.Acquire(context.Background(), k, waitPolicy(t, time.Minute, 0))
			if err != nil {
				t.Errorf("Acquire: %v", err)
			}
			got <- h
		}()
		simtest.Advance(500 * time.Millisecond) // the waiter is between attempts
		released := time.Now()
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		h := <-got
		if waited := time.Since(released); waited != 0 {
			t.Fatalf("handoff took %v of simulated time, want 0 (woken by the release)", waited)
		}
		if h.Token() <= holder.Token() {
			t.Fatalf("token: got %d, want > %d", h.Token(), holder.Token())
		}
	})
}

func TestAcquireRetriesUntilExpiry(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		k := testKey(t, "expiry-wait")
		p := basicPolicy(t)
		// The holder lives in another client that vanishes without release.
		if _, err := b.store.TryAcquire(t.Context(), k, "crashed-holder", p.TTL()); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		h, err := b.client.Acquire(t.Context(), k, waitPolicy(t, time.Minute, 0))
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < p.TTL() || waited > p.TTL()+time.Second {
			t.Fatalf("acquired after %v, want within one retry of the TTL %v", waited, p.TTL())
		}
		wantState(t, "acquired", h, leaseapi.StateActive)
	})
}

func TestAcquireBounds(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		k := testKey(t, "bounds")
		mustAcquire(t, b.client, k, basicPolicy(t))
		start := time.Now()
		_, err := b.client.Acquire(t.Context(), k, waitPolicy(t, 5*time.Second, 0))
		wantKind(t, "Acquire past Wait", err, leaseapi.ErrTimeout)
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("Acquire waited %v, want exactly Wait (5s)", waited)
		}
		if !strings.Contains(err.Error(), "held by another owner") {
			t.Fatalf("ErrTimeout %q does not say the key was held", err)
		}
		calls := b.faulty.Calls(leaseapi.OperationAcquire)
		_, err = b.client.Acquire(t.Context(), k, waitPolicy(t, time.Hour, 3))
		wantKind(t, "Acquire past MaxAttempts", err, leaseapi.ErrContended)
		if got := b.faulty.Calls(leaseapi.OperationAcquire) - calls; got != 3 {
			t.Fatalf("attempts: got %d, want 3", got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		_, err = b.client.Acquire(ctx, k, waitPolicy(t, time.Hour, 0))
		wantKind(t, "Acquire past ctx deadline", err, leaseapi.ErrTimeout)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire past ctx deadline: %v does not match context.DeadlineExceeded", err)
		}
		ctx, cancel = context.WithCancel(t.Context())
		cancel()
		_, err = b.client.Acquire(ctx, k, waitPolicy(t, time.Hour, 0))
		wantKind(t, "Acquire with canceled ctx", err, leaseapi.ErrCanceled)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%v does not match context.Canceled", err)
		}
		b.faulty.SetMode(simtest.Down)
		_, err = b.client.Acquire(t.Context(), testKey(t, "down"), waitPolicy(t, 3*time.Second, 0))
		wantKind(t, "Acquire against a down backend", err, leaseapi.ErrTimeout)
		if !strings.Contains(err.Error(), "backend unavailable") {
			t.Fatalf("ErrTimeout %q does not say the backend was unavailable", err)
		}
		b.faulty.SetMode(simtest.Pass)
	})
}

func TestAcquireAmbiguousResolvedByInspect(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		k := testKey(t, "resolve")
		p := basicPolicy(t)
		b.faulty.Inject(leaseapi.OperationAcquire, simtest.LoseReply)
		sent := time.Now()
		h, err := b.client.TryAcquire(t.Context(), k, p)
		if err != nil {
			t.Fatalf("TryAcquire with a lost reply and a readable backend: got %v, want the grant adopted", err)
		}
		if want := sent.Add(p.TTL() - p.SafetyMargin()); !h.Deadline().Equal(want) {
			t.Fatalf("adopted deadline: got %v, want %v (original send)", h.Deadline(), want)
		}
		// Not resolvable: the reply is lost and the read fails too.
		k2 := testKey(t, "resolve-2")
		b.faulty.Inject(leaseapi.OperationAcquire, simtest.LoseReply)
		b.faulty.Inject(leaseapi.OperationInspect, simtest.FailBeforeSend)
		_, err = b.client.TryAcquire(t.Context(), k2, p)
		wantKind(t, "unresolvable lost acquire reply", err, leaseapi.ErrAmbiguousOutcome)
		// The orphan grant is never handed out, and expires at its TTL.
		_, err = b.client.TryAcquire(t.Context(), k2, p)
		wantKind(t, "TryAcquire while the orphan lives", err, leaseapi.ErrContended)
		simtest.Advance(p.TTL())
		h2 := mustAcquire(t, b.client, k2, p)
		if h2.Token() != 2 {
			t.Fatalf("token after the orphan: got %d, want 2 (tokens gap, never regress)", h2.Token())
		}
	})
}

func TestBadInput(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		k := testKey(t, "bad")
		var nilCtx context.Context
		for _, tc := range []struct {
			name string
			err  error
		}{
			{"zero key", func() error { _, err := b.client.TryAcquire(t.Context(), leaseapi.Key{}, p); return err }()},
			{"zero policy", func() error { _, err := b.client.TryAcquire(t.Context(), k, leaseapi.Policy{}); return err }()},
			{"nil ctx", func() error { _, err := b.client.Acquire(nilCtx, k, p); return err }()},
			{"nil fn", b.client.Run(t.Context(), k, p, nil)},
			{"nil close ctx", b.client.Close(nilCtx)},
			{"nil backend", func() error { _, err := runtime.NewClient(nil, runtime.ClientOptions{}); return err }()},
			{"MaxManaged too large", func() error {
				_, err := runtime.NewClient(b.store, runtime.ClientOptions{MaxManaged: runtime.MaxClientManaged + 1})
				return err
			}()},
			{"too many observers", func() error {
				obs := make([]leaseapi.Observer, leaseapi.MaxObservers+1)
				for i := range obs {
					obs[i] = leaseapi.ObserverFunc(func(leaseapi.Event) {})
				}
				_, err := runtime.NewObservedBackend(b.store, nil, obs...)
				return err
			}()},
		} {
			wantKind(t, tc.name, tc.err, leaseapi.ErrInvalidState)
		}
		h := mustAcquire(t, b.client, k, p)
		wantKind(t, "Renew nil ctx", h.Renew(nilCtx), leaseapi.ErrInvalidState)
		_, err := h.StartManaged(nilCtx)
		wantKind(t, "StartManaged nil ctx", err, leaseapi.ErrInvalidState)
	})
}

func TestPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    leaseapi.PolicyOptions
	}{
		{"zero ttl", leaseapi.PolicyOptions{}},
		{"negative ttl", leaseapi.PolicyOptions{TTL: -time.Second}},
		{"ttl over max", leaseapi.PolicyOptions{TTL: leaseapi.MaxTTL + 1}},
		{"negative margin", leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: -1}},
		{"margin >= ttl", leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: time.Second}},
		{"negative renew", leaseapi.PolicyOptions{TTL: time.Second, RenewEvery: -1}},
		{"renew >= ttl-margin", leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: 100 * time.Millisecond, RenewEvery: 900 * time.Millisecond}},
		{"negative retry", leaseapi.PolicyOptions{TTL: time.Second, Retry: -1}},
		{"negative jitter", leaseapi.PolicyOptions{TTL: time.Second, Jitter: -1}},
		{"negative wait", leaseapi.PolicyOptions{TTL: time.Second, Wait: -1}},
		{"wait over max", leaseapi.PolicyOptions{TTL: time.Second, Wait: leaseapi.MaxWait + 1, Retry: time.Second}},
		{"wait without retry", leaseapi.PolicyOptions{TTL: time.Second, Wait: time.Second}},
		{"attempts over max", leaseapi.PolicyOptions{TTL: time.Second, MaxAttempts: leaseapi.MaxAttempts + 1}},
		{"negative op timeout", leaseapi.PolicyOptions{TTL: time.Second, OperationTimeout: -1}},
		{"op timeout over max", leaseapi.PolicyOptions{TTL: time.Hour, OperationTimeout: leaseapi.MaxOperationTimeout + 1}},
		{"op timeout >= ttl-margin", leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: 100 * time.Millisecond, OperationTimeout: 900 * time.Millisecond}},
		{"unknown failure behavior", leaseapi.PolicyOptions{TTL: time.Second, FailureBehavior: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := leaseapi.NewPolicy(tc.o)
			wantKind(t, "NewPolicy", err, leaseapi.ErrInvalidState)
		})
	}
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if p.SafetyMargin() != 3*time.Second || p.RenewEvery() != 9*time.Second || p.OperationTimeout() != 10*time.Second || p.MaxAttempts() != leaseapi.MaxAttempts {
		t.Fatalf("defaults: got margin %v renew %v op %v attempts %d", p.SafetyMargin(), p.RenewEvery(), p.OperationTimeout(), p.MaxAttempts())
	}
}

// TestTwoClientsOneBackend: clients share nothing but the backend.
func TestTwoClientsOneBackend(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		var clients []*runtime.Client
		for range 2 {
			c, err := runtime.NewClient(store, runtime.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
		}
		k := testKey(t, "shared")
		p := basicPolicy(t)
		h := mustAcquire(t, clients[0], k, p)
		_, err := clients[1].TryAcquire(t.Context(), k, p)
		wantKind(t, "other client", err, leaseapi.ErrContended)
		// Closing the first client releases its lease at once.
		if err := clients[0].Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		wantState(t, "handle of a closed client", h, leaseapi.StateReleased)
		h2 := mustAcquire(t, clients[1], k, p)
		if h2.Token() <= h.Token() {
			t.Fatal("token did not increase")
		}
		if err := clients[1].Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// stallingBackend models a backend whose first stalls acquisitions never
// get their request out (a connection that does not come up): each waits
// for its ctx and fails with the context's error, having sent nothing.
// It hides the memory store's NonBlocking, so the client bounds its calls.
type stallingBackend struct {
	leaseapi.Backend
	stalls atomic.Int32
}

func (b *stallingBackend) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	if b.stalls.Add(-1) >= 0 {
		<-ctx.Done()
		return leaseapi.Record{}, leaseapi.ContextError("try acquire", ctx.Err())
	}
	return b.Backend.TryAcquire(ctx, k, owner, ttl)
}

// TestAcquireRetriesOperationTimeout: an attempt cut short by the policy's
// OperationTimeout before anything was sent is "backend unavailable", not
// the caller's timeout: TryAcquire says so, and a waiting Acquire tries
// again within its Wait instead of giving up early.
func TestAcquireRetriesOperationTimeout(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b := &stallingBackend{Backend: store}
		c, err := runtime.NewClient(b, runtimeOpts())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		k := testKey(t, "op-timeout")
		opTimeout := 2 * time.Second
		p := policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: time.Second, Wait: time.Minute, OperationTimeout: opTimeout})

		b.stalls.Store(1)
		_, err = c.TryAcquire(t.Context(), k, p)
		wantKind(t, "TryAcquire cut by the operation timeout", err, leaseapi.ErrBackendUnavailable)
		if errors.Is(err, leaseapi.ErrTimeout) {
			t.Fatalf("TryAcquire: %v also matches ErrTimeout; the caller's ctx did not end", err)
		}

		b.stalls.Store(3)
		start := time.Now()
		h, err := c.Acquire(t.Context(), k, p)
		if err != nil {
			t.Fatalf("Acquire with a minute of Wait after three stalled attempts: %v", err)
		}
		// Three stalls of opTimeout each and three pauses of Retry (plus
		// jitter, none by default) before the fourth attempt succeeds.
		if waited, want := time.Since(start), 3*opTimeout+3*p.Retry(); waited != want {
			t.Fatalf("acquired after %v, want %v", waited, want)
		}
		wantState(t, "acquired", h, leaseapi.StateActive)
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}

		// The caller's own deadline still ends an attempt as ErrTimeout.
		b.stalls.Store(1)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = c.Acquire(ctx, k, p)
		wantKind(t, "Acquire past the caller's deadline", err, leaseapi.ErrTimeout)
	})
}
