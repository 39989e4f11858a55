package safety_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

const seedsCrash = 200

// crashable is a memory backend that can crash and come back having lost
// its latest acquisitions, as a server whose persistence lags does: Crash
// replaces the store by a new one in which key k has only its first kept
// tokens (replayed as acquired and released), and no live grant.
type crashable struct {
	mu sync.Mutex
	s  *memory.Store
}

func (c *crashable) store() *memory.Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// Crash loses everything after token kept of k.
func (c *crashable) Crash(k leaseapi.Key, kept leaseapi.Token) error {
	s, err := memory.New(memory.Options{})
	if err != nil {
		return err
	}
	for i := range kept {
		rec, err := s.TryAcquire(context.Background(), k, fmt.Sprint("replayed-", i), time.Second)
		if err != nil {
			return err
		}
		if err := s.Release(context.Background(), rec); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
	return nil
}

func (c *crashable) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	return c.store().TryAcquire(ctx, k, owner, ttl)
}

func (c *crashable) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	return c.store().Renew(ctx, rec, ttl)
}

func (c *crashable) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	return c.store().Validate(ctx, rec)
}

func (c *crashable) Release(ctx context.Context, rec leaseapi.Record) error {
	return c.store().Release(ctx, rec)
}

func (c *crashable) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	return c.store().Inspect(ctx, k)
}

// TestSimCrashLosesWrites is scenario 8 in simulation: after ten grants of
// a key, the backend crashes and comes back having lost the latest of them
// (the token counter goes back), possibly while x still holds the key.
// This breaks the backend's contract, so the history shows token
// regressions and, while x still holds, overlapping holders: those rules
// are expected to fire. What must still hold: a fresh client's grant with
// a regressed token is refused by the fenced resource (which never accepts
// a lower token); a managed holder's next renewal proves its loss (Lost,
// never extended); x, which saw the higher token, refuses any regressed
// grant with ErrFencingRegression and never reports it Active.
func TestSimCrashLosesWrites(t *testing.T) {
	runSeeds(t, seedsCrash, func(w *world) {
		w.allowed = map[string]bool{"grant-order": true, "overlap": true}
		cb := &crashable{}
		s, err := memory.New(memory.Options{})
		if err != nil {
			w.fatal("memory.New: %v", err)
		}
		cb.s = s
		w.server = w.ledger.Server(cb)
		k := leaseapi.MustKey("sc8", "k")
		x, y := w.client("x"), w.client("y")
		const grants = 10
		var hx *runtime.Handle
		for i := range grants {
			h, err := x.c.TryAcquire(context.Background(), k, w.policy)
			if err != nil {
				w.fatal("x: TryAcquire %d: %v", i, err)
			}
			w.granted(h)
			if w.admit(h) {
				if err := w.write(h, "x"); err != nil {
					w.fatal("x: write: %v", err)
				}
			}
			if i < grants-1 {
				w.release(h)
			}
			hx = h
		}
		holding := w.seed%3 != 0 // else x released its last grant too
		managed := w.seed%3 == 2
		var m *runtime.Managed
		switch {
		case !holding:
			w.release(hx)
		case managed:
			if m, err = hx.StartManaged(context.Background()); err != nil {
				w.fatal("x: StartManaged: %v", err)
			}
		}
		simtest.Advance(w.between(0, time.Second))
		kept := leaseapi.Token(w.intn(grants))
		if err := cb.Crash(k, kept); err != nil {
			w.fatal("crash: %v", err)
		}
		w.note("crash kept %d of %d tokens; x holding %v managed %v", kept, grants, holding, managed)

		// y: a new process, no memory of tokens.
		hy, err := y.c.TryAcquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("y: TryAcquire after the crash: %v", err)
		}
		w.granted(hy)
		if hy.Token() != kept+1 {
			w.problem("y's token %d, want %d (the regressed counter + 1)", hy.Token(), kept+1)
		}
		if w.admit(hy) {
			w.wantKind("y: write with a regressed token", w.write(hy, "y"), leaseapi.ErrStaleOwner)
		}
		if _, tok, _ := w.resource(k).Value(); tok != grants {
			w.problem("resource high-water mark %d, want %d", tok, grants)
		}
		if managed {
			// The next renewal finds y's grant (or none): proof of loss.
			waitFor(2*w.policy.RenewEvery(), 10*time.Millisecond, func() bool { return hx.State() == leaseapi.StateLost })
			if st := hx.State(); st != leaseapi.StateLost {
				w.problem("x's managed handle after the crash: %v, want lost", st)
			}
			wantOneLoss(w, m, leaseapi.StateLost, time.Now())
		}
		w.release(hy)
		// x comes back for the key: every grant it could get now has a
		// token at or below the one it held.
		for range grants - int(kept) - 1 {
			h, err := x.c.TryAcquire(context.Background(), k, w.policy)
			if err == nil {
				w.problem("x got a regressed token %d (it held %d)", h.Token(), hx.Token())
				w.release(h)
				continue
			}
			if kind := leaseapi.Kind(err); kind != leaseapi.ErrFencingRegression && kind != leaseapi.ErrContended {
				w.problem("x: TryAcquire of a regressed token: %v, want ErrFencingRegression", err)
			}
			simtest.Advance(w.policy.TTL()) // a refused grant may be left to expire
		}
		// Past the old high-water mark, x is served again.
		h, err := x.c.Acquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("x: Acquire past the old tokens: %v", err)
		}
		w.granted(h)
		if h.Token() <= hx.Token() {
			w.problem("x's new token %d not above %d", h.Token(), hx.Token())
		}
		if w.admit(h) {
			if err := w.write(h, "x-again"); err != nil {
				w.problem("x: write with token %d: %v", h.Token(), err)
			}
		}
		w.release(h)
	})
}
