package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// restartable models a backend that restarts and loses acknowledged grants:
// after lose() every call goes to a fresh store whose tokens start again.
type restartable struct {
	cur atomic.Pointer[memory.Store]
}

func (r *restartable) lose() {
	s, _ := memory.New(memory.Options{})
	r.cur.Store(s)
}
func (r *restartable) TryAcquire(ctx context.Context, k leaseapi.Key, o string, ttl time.Duration) (leaseapi.Record, error) {
	return r.cur.Load().TryAcquire(ctx, k, o, ttl)
}
func (r *restartable) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	return r.cur.Load().Renew(ctx, rec, ttl)
}
func (r *restartable) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	return r.cur.Load().Validate(ctx, rec)
}
func (r *restartable) Release(ctx context.Context, rec leaseapi.Record) error {
	return r.cur.Load().Release(ctx, rec)
}

func TestFencingRegressionDetected(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := &restartable{}
		b.lose()
		c, err := runtime.NewClient(b, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		k := testKey(t, "regress")
		for range 3 {
			h := mustAcquire(t, c, k, p)
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			<-h.Done()
		}
		b.lose() // the backend forgets tokens 1..3
		for i := range 3 {
			_, err := c.TryAcquire(t.Context(), k, p)
			wantKind(t, "acquire with a regressed token", err, leaseapi.ErrFencingRegression)
			if i == 0 && c.Held() != 0 {
				t.Fatal("a regressed grant is held")
			}
		}
		h := mustAcquire(t, c, k, p) // token 4 on the new store: above the watermark
		if h.Token() != 4 {
			t.Fatalf("token: got %d, want 4", h.Token())
		}
	})
}

func TestSkewedBackendClockFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		offset    time.Duration
		rate      float64
		wantState leaseapi.State
	}{
		{"offset only", time.Hour, 1, leaseapi.StateActive},
		{"drift inside the margin", 0, 1.05, leaseapi.StateActive},
		{"backend runs 50% fast", 0, 1.5, leaseapi.StateUncertain},
		{"backend runs 50% slow", 0, 0.5, leaseapi.StateUncertain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				store, _ := memory.New(memory.Options{Clock: simtest.NewSkewedClock(nil, tc.offset, tc.rate)})
				c, err := runtime.NewClient(store, runtime.ClientOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				p := basicPolicy(t) // TTL 10s, margin 1s: 10% drift allowed
				h := mustAcquire(t, c, testKey(t, "skew"), p)
				simtest.Advance(3 * time.Second)
				err = h.Renew(t.Context())
				wantState(t, "after a renewal", h, tc.wantState)
				if tc.wantState == leaseapi.StateUncertain {
					wantKind(t, "skewed renewal", err, leaseapi.ErrAmbiguousOutcome)
				} else if err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// noAdopt is a memory store that, like Valkey with WaitReplicas, says a
// grant read back after a lost reply is no proof of a durable grant.
type noAdopt struct{ *simtest.Faulty }

func (n noAdopt) Capabilities() leaseapi.Capabilities {
	c := n.Faulty.Capabilities()
	c.Adopt = false
	return c
}

func TestNoAdoptionWhenBackendForbidsIt(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		f := simtest.NewFaulty(store)
		ob, _ := runtime.NewObservedBackend(noAdopt{f}, nil) // found through wrappers too
		c, err := runtime.NewClient(ob, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		k := testKey(t, "no-adopt")
		f.Inject(leaseapi.OperationAcquire, simtest.LoseReply)
		_, err = c.TryAcquire(t.Context(), k, p)
		wantKind(t, "lost reply on a backend that forbids adoption", err, leaseapi.ErrAmbiguousOutcome)
		if c.Held() != 0 {
			t.Fatal("the orphan grant was adopted")
		}
		if _, held, _ := store.Inspect(t.Context(), k); !held {
			t.Fatal("the lost acquisition should have committed (the test is vacuous)")
		}
		simtest.Advance(p.TTL()) // the orphan expires
		mustAcquire(t, c, k, p)
	})
}

// brokenTimes returns records that expire before they were acquired.
type brokenTimes struct{ *memory.Store }

func (b brokenTimes) TryAcquire(ctx context.Context, k leaseapi.Key, o string, ttl time.Duration) (leaseapi.Record, error) {
	rec, err := b.Store.TryAcquire(ctx, k, o, ttl)
	rec.AcquiredAt, rec.ExpiresAt = time.UnixMicro(1e16), time.UnixMicro(0)
	return rec, err
}

func TestBrokenRecordNeverActive(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		c, _ := runtime.NewClient(brokenTimes{store}, runtime.ClientOptions{})
		defer c.Close(context.Background())
		_, err := c.TryAcquire(t.Context(), testKey(t, "broken"), basicPolicy(t))
		wantKind(t, "a grant that expires before it starts", err, leaseapi.ErrBackendUnavailable)
		if c.Held() != 0 {
			t.Fatal("a broken grant is held")
		}
	})
}
