package safety_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"testing"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// Default seeds per scenario: about 2,000 in all.
const (
	seedsContention = 150
	seedsPaused     = 300
	seedsRenewLost  = 200
	seedsAcquire    = 300
	seedsRelease    = 300
	seedsPartition  = 300
	seedsDeferred   = 300
	seedsSkewIn     = 100
	seedsSkewOut    = 50
)

// TestSimContention is scenario 1: 8 clients contend for 3 keys without
// faults (only latency), half of the holders under managed renewal, the
// others renewing by hand now and then or never, so that holders do reach
// their deadlines while still acting. All checkers must stay clean and the
// run must be busy enough to prove something.
func TestSimContention(t *testing.T) {
	runSeeds(t, seedsContention, func(w *world) {
		keys := []leaseapi.Key{leaseapi.MustKey("sc1", "a"), leaseapi.MustKey("sc1", "b"), leaseapi.MustKey("sc1", "c")}
		contend(w, 8, keys, 40*time.Second, nil)
		var grants, writes int
		for _, e := range w.hist.Events() {
			switch e.Kind {
			case simtest.Granted:
				grants++
			case simtest.Wrote:
				writes++
			}
		}
		if grants < 12 || writes < 12 {
			w.problem("run too thin to prove anything: %d grants, %d writes", grants, writes)
		}
	})
}

// contend runs n clients for d over keys: acquire, act while Active, renew
// sometimes, release. fault, if set, is called before each step of a
// holder with its client (to inject faults).
func contend(w *world, n int, keys []leaseapi.Key, d time.Duration, fault func(c *simClient)) {
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	var wg sync.WaitGroup
	for i := range n {
		c := w.client(fmt.Sprintf("c%d", i))
		r := c.rand
		c.faulty.SetDelay(r.between(0, 30*time.Millisecond))
		wg.Go(func() {
			for ctx.Err() == nil {
				k := keys[r.intn(len(keys))]
				h, err := c.c.Acquire(ctx, k, w.policy)
				if err != nil {
					continue
				}
				w.granted(h)
				var m *runtime.Managed
				var loss <-chan runtime.Loss
				if r.intn(2) == 0 {
					if m, err = h.StartManaged(ctx); err != nil {
						w.release(h)
						continue
					}
					loss = m.Loss()
				}
				for step := r.intn(15); step > 0 && ctx.Err() == nil; step-- {
					if fault != nil {
						fault(c)
					}
					if m == nil && r.intn(6) == 0 {
						_ = h.Renew(ctx)
						w.checkDeadline(h)
					}
					if w.admit(h) {
						_ = w.write(h, c.name)
					}
					select {
					case <-loss:
						step = 0
					default:
						pause(ctx, r.between(100*time.Millisecond, 1200*time.Millisecond))
					}
				}
				c.faulty.SetMode(simtest.Pass)
				if m != nil {
					_ = m.Stop(context.Background())
				}
				w.release(h)
			}
		})
	}
	wg.Wait()
}

// TestSimPausedHolder is scenario 2: a holder admitted to protected work
// stops acting (a GC pause, SIGSTOP) for longer than the TTL; a managed
// holder's backend calls are blocked meanwhile. Another client acquires
// and writes. On resume the handle reports Expired before anything else,
// the paused holder's write with its old token is rejected by the fenced
// resource, a managed holder gets exactly one Loss, and the new holder's
// token is higher.
func TestSimPausedHolder(t *testing.T) {
	runSeeds(t, seedsPaused, func(w *world) {
		k := leaseapi.MustKey("sc2", "k")
		a, b := w.client("a"), w.client("b")
		a.faulty.SetDelay(w.between(0, 50*time.Millisecond))
		managed := w.seed%2 == 0
		ha, err := a.c.TryAcquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("a: TryAcquire: %v", err)
		}
		w.granted(ha)
		var m *runtime.Managed
		if managed {
			if m, err = ha.StartManaged(context.Background()); err != nil {
				w.fatal("a: StartManaged: %v", err)
			}
		}
		// a works for a while (managed renewals keep it Active).
		simtest.Advance(w.between(0, 3*time.Second))
		if !w.admit(ha) {
			w.fatal("a: not Active before its pause (state %v)", ha.State())
		}
		if err := w.write(ha, "a-before"); err != nil {
			w.fatal("a: write before the pause: %v", err)
		}
		// The pause: a decided to write (it was admitted above), then froze.
		if managed {
			a.faulty.SetMode(simtest.Blackhole)
		}
		pausedAt := time.Now()
		pauseFor := w.between(3*w.policy.TTL()/2, 3*w.policy.TTL())
		var bDone sync.WaitGroup
		var hb *runtime.Handle
		bDone.Go(func() {
			h, err := b.c.Acquire(context.Background(), k, w.policy)
			if err != nil {
				w.problem("b: Acquire during a's pause: %v", err)
				return
			}
			w.granted(h)
			if w.admit(h) {
				if err := w.write(h, "b"); err != nil {
					w.problem("b: write: %v", err)
				}
			}
			hb = h
		})
		simtest.Advance(pauseFor)
		// Resume: the very first thing a looks at is its state.
		if st := ha.State(); st != leaseapi.StateExpired {
			w.problem("a after a %v pause: state %v, want expired", pauseFor, st)
		}
		bDone.Wait()
		if hb == nil {
			w.fatal("b never acquired during a %v pause", pauseFor)
		}
		// a goes on with the write it had decided before the pause.
		err = w.write(ha, "a-after")
		w.wantKind("a: stale write after the pause", err, leaseapi.ErrStaleOwner)
		if hb.Token() <= ha.Token() {
			w.problem("new holder's token %d not above the paused holder's %d", hb.Token(), ha.Token())
		}
		if v, tok, _ := w.resource(k).Value(); v != "b" || tok != hb.Token() {
			w.problem("resource after the stale write: (%q, %d), want (b, %d)", v, tok, hb.Token())
		}
		w.wantKind("a: Release after expiry", ha.Release(context.Background()), leaseapi.ErrLost)
		if managed {
			a.faulty.SetMode(simtest.Pass)
			bound, _ := w.ledger.TrustBound(ha.Owner(), ha.Token(), w.policy)
			wantOneLoss(w, m, leaseapi.StateExpired, bound)
		}
		w.note("paused %v at %v; tokens a=%d b=%d", pauseFor, pausedAt, ha.Token(), hb.Token())
		w.release(hb)
	})
}

// wantOneLoss checks that m's Loss channel yields exactly one Loss in
// state want, no later than by, and is then closed.
func wantOneLoss(w *world, m *runtime.Managed, want leaseapi.State, by time.Time) {
	select {
	case l, ok := <-m.Loss():
		if !ok {
			w.problem("Loss channel closed without a Loss")
			return
		}
		if l.State != want {
			w.problem("Loss state %v, want %v", l.State, want)
		}
		if l.At.After(by) {
			w.problem("Loss at %v, later than %v", l.At, by)
		}
	default:
		w.problem("no Loss delivered")
		return
	}
	simtest.Settle()
	select {
	case l, ok := <-m.Loss():
		if ok {
			w.problem("a second Loss: %+v", l)
		}
	default:
		w.problem("Loss channel not closed after its Loss")
	}
}

// TestSimRenewReplyLost is scenario 3 in simulation: a renewal applied by
// the backend whose reply is lost is ErrAmbiguousOutcome; the handle is
// Uncertain at once (no admission) and its deadline is not extended; only
// a confirming Validate (or a later Renew) makes it Active again. A renewal
// that never reached the backend (hang) behaves the same. C6: both kinds
// of ambiguity happened and a fresh acquire works at the end.
func TestSimRenewReplyLost(t *testing.T) {
	runSeeds(t, seedsRenewLost, func(w *world) {
		k := leaseapi.MustKey("sc3", "k")
		a := w.client("a")
		a.faulty.SetDelay(w.between(0, 50*time.Millisecond))
		h, err := a.c.TryAcquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("TryAcquire: %v", err)
		}
		w.granted(h)
		faults := []simtest.Fault{simtest.LoseReply, simtest.Hang}
		if w.seed%2 == 1 {
			faults[0], faults[1] = faults[1], faults[0]
		}
		for _, fault := range faults {
			simtest.Advance(w.between(100*time.Millisecond, 1500*time.Millisecond))
			before := h.Deadline()
			a.faulty.Inject(leaseapi.OperationRenew, fault)
			err := h.Renew(context.Background())
			w.wantKind(fmt.Sprintf("Renew with fault %d", fault), err, leaseapi.ErrAmbiguousOutcome)
			if st := h.State(); st != leaseapi.StateUncertain {
				w.problem("after an ambiguous renew: state %v, want uncertain", st)
			}
			if w.admit(h) {
				w.problem("admitted while uncertain")
			}
			if !h.Deadline().Equal(before) {
				w.problem("ambiguous renew moved the deadline by %v", h.Deadline().Sub(before))
			}
			simtest.Advance(w.between(0, 300*time.Millisecond))
			if st := h.State(); st != leaseapi.StateUncertain {
				w.problem("uncertain handle turned %v without a confirmation", st)
			}
			// The confirming read.
			if err := h.Validate(context.Background()); err != nil {
				w.problem("Validate after an ambiguous renew: %v", err)
			}
			if !h.Deadline().Equal(before) {
				w.problem("Validate moved the deadline by %v", h.Deadline().Sub(before))
			}
			if !w.admit(h) {
				w.problem("not Active after a confirming Validate (state %v)", h.State())
			}
			if err := h.Renew(context.Background()); err != nil {
				w.problem("Renew after recovery: %v", err)
			}
			w.checkDeadline(h)
			if w.admit(h) {
				_ = w.write(h, "a")
			}
		}
		pause(context.Background(), time.Millisecond)
		w.wantKind("Release", h.Release(context.Background()), nil)
		fresh := w.client("fresh")
		hf, err := fresh.c.TryAcquire(context.Background(), k, w.policy)
		if err == nil {
			w.granted(hf)
			if hf.Token() <= h.Token() {
				w.problem("fresh token %d not above %d", hf.Token(), h.Token())
			}
		}
		for _, v := range w.ledger.CheckFaultRun(err) {
			w.problem("C6: %v", v)
		}
	})
}

// TestSimAcquireReplyLost is scenario 4: the backend grants an acquisition
// whose reply is lost. The runtime resolves by owner id (Inspect): it
// adopts the grant, anchored at the original send, or, if it cannot read
// the key, returns ErrAmbiguousOutcome and the orphan grant expires at its
// TTL. No Active handle is ever returned blind, no handle outlives the
// orphan's backend expiry, and tokens gap but never regress. Variant 2
// resolves late (the lost reply and the resolving read both slow), so that
// anchoring the adoption at the read would stretch the trust window past
// the backend's expiry.
func TestSimAcquireReplyLost(t *testing.T) {
	runSeeds(t, seedsAcquire, func(w *world) {
		k := leaseapi.MustKey("sc4", "k")
		a, b := w.client("a"), w.client("b")
		a.faulty.SetDelay(w.between(0, 50*time.Millisecond))
		variant := w.seed % 3
		switch variant {
		case 0: // lost reply, resolved by a read at once
			a.faulty.Inject(leaseapi.OperationAcquire, simtest.LoseReply)
		case 1: // lost reply, the resolving read fails too
			a.faulty.Inject(leaseapi.OperationAcquire, simtest.LoseReply)
			a.faulty.Inject(leaseapi.OperationInspect, simtest.FailBeforeSend)
		case 2: // applied at once, reply lost after ~the timeout; slow read
			a.deferred.DelayReply(leaseapi.OperationAcquire, time.Hour)
			a.deferred.DelayReply(leaseapi.OperationInspect, w.between(300*time.Millisecond, 440*time.Millisecond))
		}
		sentAt := time.Now()
		ha, err := a.c.TryAcquire(context.Background(), k, w.policy)
		var orphan leaseapi.Token
		for _, o := range w.ledger.Ops() {
			if o.Client == "a" && o.Op == leaseapi.OperationAcquire && o.Committed() {
				orphan = o.Record.Token
				if !o.Ambiguous() {
					w.problem("the faulted acquisition was not ambiguous to the caller: %q", o.Seen)
				}
			}
		}
		if orphan == 0 {
			w.fatal("the faulted acquisition did not commit")
		}
		switch variant {
		case 0, 2:
			if err != nil {
				w.fatal("resolvable lost acquisition: %v", err)
			}
			if ha.Token() != orphan {
				w.problem("adopted token %d, committed %d", ha.Token(), orphan)
			}
			w.granted(ha)
		case 1:
			w.wantKind("unresolvable lost acquisition", err, leaseapi.ErrAmbiguousOutcome)
			if ha != nil {
				w.problem("a handle returned blind")
			}
		}
		// b waits for the key while a (if it holds a handle) acts on it
		// for as long as its handle says Active, without renewing.
		var hb *runtime.Handle
		var bAt time.Time
		var bDone sync.WaitGroup
		bDone.Go(func() {
			h, err := b.c.Acquire(context.Background(), k, w.policy)
			if err != nil {
				w.problem("b: Acquire: %v", err)
				return
			}
			bAt = time.Now()
			w.granted(h)
			if w.admit(h) {
				_ = w.write(h, "b")
			}
			hb = h
		})
		if ha != nil {
			waitFor(2*w.policy.TTL(), 20*time.Millisecond, func() bool {
				if w.admit(ha) {
					_ = w.write(ha, "a")
					return false
				}
				return true
			})
		}
		bDone.Wait()
		if hb == nil {
			w.fatal("b never acquired")
		}
		if hb.Token() <= orphan {
			w.problem("token regressed or repeated: b got %d after the orphan's %d", hb.Token(), orphan)
		}
		if bAt.Before(sentAt.Add(w.policy.TTL())) {
			w.problem("b acquired %v after a's send, before the orphan's TTL", bAt.Sub(sentAt))
		}
		w.note("variant %d: orphan token %d, b token %d at +%v", variant, orphan, hb.Token(), bAt.Sub(sentAt))
		w.release(hb)
	})
}

// TestSimReleaseReplyLost is scenario 5: a release is applied but its
// reply is lost (the handle stays Uncertain), another client acquires, and
// the first retries: its Release through the handle (after the TTL: ErrLost
// without I/O; before: ErrStaleOwner), a raw Release of the old record on
// the backend, or a Renew, can never remove, extend or take over the new
// holder's lease.
func TestSimReleaseReplyLost(t *testing.T) {
	runSeeds(t, seedsRelease, func(w *world) {
		k := leaseapi.MustKey("sc5", "k")
		a, b := w.client("a"), w.client("b")
		a.faulty.SetDelay(w.between(0, 50*time.Millisecond))
		ha, err := a.c.TryAcquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("a: TryAcquire: %v", err)
		}
		w.granted(ha)
		simtest.Advance(w.between(0, 2*time.Second))
		if w.admit(ha) {
			_ = w.write(ha, "a")
		}
		old := ha.Snapshot()
		a.faulty.Inject(leaseapi.OperationRelease, simtest.LoseReply)
		w.wantKind("a: Release with its reply lost", ha.Release(context.Background()), leaseapi.ErrAmbiguousOutcome)
		if st := ha.State(); st != leaseapi.StateUncertain {
			w.problem("a after an ambiguous release: state %v, want uncertain", st)
		}
		variant := w.seed % 3
		if variant == 0 {
			simtest.Advance(w.policy.TTL() + w.between(0, time.Second))
			if st := ha.State(); st != leaseapi.StateExpired {
				w.problem("a after the TTL: state %v, want expired", st)
			}
		}
		hb, err := b.c.TryAcquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("b: TryAcquire after a's release committed: %v", err)
		}
		w.granted(hb)
		if w.admit(hb) {
			_ = w.write(hb, "b")
		}
		if hb.Token() <= ha.Token() {
			w.problem("b's token %d not above a's %d", hb.Token(), ha.Token())
		}
		switch variant {
		case 0: // after the TTL: the handle refuses without I/O, the raw retry is stale
			calls := a.faulty.Calls(leaseapi.OperationRelease)
			w.wantKind("a: Release retry on an expired handle", ha.Release(context.Background()), leaseapi.ErrLost)
			if n := a.faulty.Calls(leaseapi.OperationRelease); n != calls {
				w.problem("Release on an expired handle reached the backend")
			}
			w.wantKind("a: raw Release retry of the old record", a.backend.Release(context.Background(), old), leaseapi.ErrStaleOwner)
		case 1: // before a's deadline: the retried Release is refused
			w.wantKind("a: Release retry", ha.Release(context.Background()), leaseapi.ErrStaleOwner)
		case 2: // before a's deadline: a Renew instead
			w.wantKind("a: Renew after its release committed", ha.Renew(context.Background()), leaseapi.ErrStaleOwner)
		}
		if w.admit(ha) {
			w.problem("a Active again after its retry")
		}
		if st := ha.State(); variant > 0 && st != leaseapi.StateLost {
			w.problem("a after a refused retry: state %v, want lost", st)
		}
		// The new holder is untouched.
		if err := hb.Validate(context.Background()); err != nil {
			w.problem("b after a's retry: Validate %v", err)
		}
		rec, held, err := w.store.Inspect(context.Background(), k)
		if err != nil || !held || rec.Owner != hb.Owner() || rec.Token != hb.Token() {
			w.problem("backend after a's retry: held %v by %q token %d (%v), want b's token %d", held, rec.Owner, rec.Token, err, hb.Token())
		}
		if !rec.ExpiresAt.Equal(hb.Snapshot().ExpiresAt) {
			w.problem("b's grant was extended by a's retry")
		}
		if w.admit(hb) {
			if err := w.write(hb, "b2"); err != nil {
				w.problem("b: write after a's retry: %v", err)
			}
		}
		w.release(hb)
	})
}

// TestSimPartition is scenario 6: a managed holder is cut off (blackhole)
// for 3×TTL after a renewal whose reply was lost. It turns Uncertain, then
// Expired no later than its last confirmed send + TTL - margin, with
// exactly one Loss; after the heal another client acquires with a higher
// token (C6's fresh acquire).
func TestSimPartition(t *testing.T) {
	runSeeds(t, seedsPartition, func(w *world) {
		k := leaseapi.MustKey("sc6", "k")
		a, b := w.client("a"), w.client("b")
		a.faulty.SetDelay(w.between(0, 100*time.Millisecond))
		h, err := a.c.TryAcquire(context.Background(), k, w.policy)
		if err != nil {
			w.fatal("TryAcquire: %v", err)
		}
		w.granted(h)
		m, err := h.StartManaged(context.Background())
		if err != nil {
			w.fatal("StartManaged: %v", err)
		}
		// A renewal that commits but whose reply is lost: Uncertain until
		// the next managed renewal confirms.
		simtest.Advance(w.between(0, time.Second))
		a.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply)
		sawUncertain := waitFor(2*time.Second, 10*time.Millisecond, func() bool {
			w.admit(h)
			return h.State() == leaseapi.StateUncertain
		})
		if !sawUncertain {
			w.problem("a lost renewal reply never made the handle uncertain")
		}
		if !waitFor(2*time.Second, 10*time.Millisecond, func() bool { return w.admit(h) }) {
			w.fatal("managed renewal did not recover after a lost reply (state %v)", h.State())
		}
		simtest.Advance(w.between(0, 2*time.Second))
		w.checkDeadline(h)
		// The partition.
		a.faulty.SetMode(simtest.Blackhole)
		start := time.Now()
		var bound time.Time
		seen := []leaseapi.State{}
		var expiredAt time.Time
		for time.Since(start) < 3*w.policy.TTL() {
			st := h.State()
			bound, _ = w.ledger.TrustBound(h.Owner(), h.Token(), w.policy)
			if len(seen) == 0 || seen[len(seen)-1] != st {
				seen = append(seen, st)
			}
			now := time.Now()
			if st == leaseapi.StateExpired && expiredAt.IsZero() {
				expiredAt = now
			}
			if !now.Before(bound) && st != leaseapi.StateExpired {
				w.problem("state %v at %v past the bound (last confirmed send + TTL - margin)", st, now.Sub(bound))
			}
			if w.admit(h) {
				_ = w.write(h, "a")
			}
			simtest.Advance(10 * time.Millisecond)
		}
		if fmt.Sprint(seen) != fmt.Sprint([]leaseapi.State{leaseapi.StateActive, leaseapi.StateUncertain, leaseapi.StateExpired}) &&
			fmt.Sprint(seen) != fmt.Sprint([]leaseapi.State{leaseapi.StateUncertain, leaseapi.StateExpired}) {
			w.problem("states during the partition: %v, want active, uncertain, expired", seen)
		}
		if h.Deadline().After(bound) {
			w.problem("deadline %v past the bound", h.Deadline().Sub(bound))
		}
		// Heal.
		a.faulty.SetMode(simtest.Pass)
		wantOneLoss(w, m, leaseapi.StateExpired, bound)
		hb, err := b.c.TryAcquire(context.Background(), k, w.policy)
		if err == nil {
			w.granted(hb)
			if hb.Token() <= h.Token() {
				w.problem("token after the heal %d not above %d", hb.Token(), h.Token())
			}
			if w.admit(hb) {
				_ = w.write(hb, "b")
			}
			w.release(hb)
		}
		for _, v := range w.ledger.CheckFaultRun(err) {
			w.problem("C6: %v", v)
		}
		w.note("partition at %v, expired at %v, bound %v", start, expiredAt, bound)
	})
}

// TestSimDeferredExecution is scenario 7: the backend executes a mutation
// after the caller's timeout (simtest.Deferred). Each seed runs three
// cases on three keys: a late Renew, a late Release (executed after
// another client took the key over) and a late TryAcquire (executed after
// the holder released, granting an orphan nobody holds). Every caller got
// ErrAmbiguousOutcome, and no late execution produces an overlapping
// admission, removes or extends another holder's lease, or hands out a
// handle: the checkers stay clean. C6: some ambiguous mutations committed,
// some did not, and a fresh acquire succeeds at the end.
func TestSimDeferredExecution(t *testing.T) {
	runSeeds(t, seedsDeferred, func(w *world) {
		a, b, c := w.client("a"), w.client("b"), w.client("c")
		opTimeout := w.policy.OperationTimeout()
		ctx := context.Background()

		// A late Renew: the holder stays Uncertain (or, after a confirming
		// Validate, Active until its old deadline); the late extension only
		// delays the next holder.
		k1 := leaseapi.MustKey("sc7", "renew")
		h, err := a.c.TryAcquire(ctx, k1, w.policy)
		if err != nil {
			w.fatal("a: TryAcquire: %v", err)
		}
		w.granted(h)
		simtest.Advance(w.between(0, time.Second))
		a.deferred.DeferApply(leaseapi.OperationRenew, opTimeout+w.between(0, 3*time.Second))
		before := h.Deadline()
		w.wantKind("a: deferred Renew", h.Renew(ctx), leaseapi.ErrAmbiguousOutcome)
		if h.State() != leaseapi.StateUncertain && h.State() != leaseapi.StateExpired {
			w.problem("a after a deferred renew: %v", h.State())
		}
		if !h.Deadline().Equal(before) {
			w.problem("deferred renew moved the deadline")
		}
		if w.intn(2) == 0 {
			_ = h.Validate(ctx)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			hb, err := b.c.Acquire(ctx, k1, w.policy)
			if err != nil {
				w.problem("b: Acquire after a's deferred renew: %v", err)
				return
			}
			w.granted(hb)
			if w.admit(hb) {
				_ = w.write(hb, "b")
			}
			w.release(hb)
		})
		waitFor(3*w.policy.TTL(), 20*time.Millisecond, func() bool {
			if w.admit(h) {
				_ = w.write(h, "a")
			}
			return h.State().Terminal()
		})
		wg.Wait()

		// A late Release, executed after b took the key over.
		k2 := leaseapi.MustKey("sc7", "release")
		h, err = a.c.TryAcquire(ctx, k2, w.policy)
		if err != nil {
			w.fatal("a: TryAcquire k2: %v", err)
		}
		w.granted(h)
		a.deferred.DeferApply(leaseapi.OperationRelease, w.policy.TTL()+w.between(time.Second, 3*time.Second))
		w.wantKind("a: deferred Release", h.Release(ctx), leaseapi.ErrAmbiguousOutcome)
		if w.admit(h) {
			w.problem("a Active after an ambiguous release")
		}
		hb, err := b.c.Acquire(ctx, k2, w.policy)
		if err != nil {
			w.fatal("b: Acquire k2: %v", err)
		}
		w.granted(hb)
		if err := a.deferred.Drain(ctx); err != nil {
			w.fatal("drain: %v", err)
		}
		if err := hb.Validate(ctx); err != nil {
			w.problem("b after a's late release: %v", err)
		}
		if w.admit(hb) {
			_ = w.write(hb, "b")
		}
		w.release(hb)

		// A late TryAcquire: b's call times out while a holds the key; a
		// releases; the late execution grants an orphan to b's old owner
		// id. Nobody gets a handle for it; c acquires after it expires.
		k3 := leaseapi.MustKey("sc7", "acquire")
		h, err = a.c.TryAcquire(ctx, k3, w.policy)
		if err != nil {
			w.fatal("a: TryAcquire k3: %v", err)
		}
		w.granted(h)
		late := opTimeout + w.between(100*time.Millisecond, 2*time.Second)
		b.deferred.DeferApply(leaseapi.OperationAcquire, late)
		sent := time.Now()
		hb, err = b.c.TryAcquire(ctx, k3, w.policy)
		if err == nil {
			w.problem("b: deferred TryAcquire returned a handle (token %d)", hb.Token())
		}
		if w.admit(h) {
			_ = w.write(h, "a")
		}
		w.release(h)
		if err := b.deferred.Drain(ctx); err != nil {
			w.fatal("drain: %v", err)
		}
		var orphan simtest.LedgerOp
		for _, o := range w.ledger.Ops() {
			if o.Client == "b" && o.Op == leaseapi.OperationAcquire && o.Key == k3.String() {
				orphan = o
			}
		}
		if !orphan.Ambiguous() || !orphan.Committed() {
			w.problem("late TryAcquire: seen %q, committed %v; want an ambiguous call that committed", orphan.Seen, orphan.Committed())
		}
		hc, err := c.c.Acquire(ctx, k3, w.policy)
		if err != nil {
			w.fatal("c: Acquire k3: %v", err)
		}
		w.granted(hc)
		if hc.Token() <= orphan.Record.Token {
			w.problem("c's token %d not above the orphan's %d", hc.Token(), orphan.Record.Token)
		}
		if time.Now().Before(orphan.AppliedAt.Add(w.policy.TTL())) {
			w.problem("c acquired %v after the orphan grant, before its TTL", time.Since(orphan.AppliedAt))
		}
		if w.admit(hc) {
			_ = w.write(hc, "c")
		}
		w.release(hc)
		for _, l := range append(a.deferred.Late(), b.deferred.Late()...) {
			if l.AppliedAt.Sub(l.SentAt) < opTimeout {
				w.problem("a deferred %v ran before the caller's timeout", l.Op)
			}
			w.note("late %v: sent %v, applied %v later: %v", l.Op, l.SentAt, l.AppliedAt.Sub(l.SentAt), leaseapi.Kind(l.Err))
		}
		w.note("late acquire sent at %v", sent)

		fresh, err := c.c.TryAcquire(ctx, k3, w.policy)
		if err == nil {
			w.granted(fresh)
			_ = fresh.Release(ctx)
		}
		for _, v := range w.ledger.CheckFaultRun(err) {
			w.problem("C6: %v", v)
		}
	})
}

// TestSimClockSkew is scenario 10: the backend's clock runs with an offset
// and a rate different from the clients'. Within the model (rate at most
// TTL/(TTL-margin), any offset) contention with holders acting until their
// last Active instant shows no overlap. Far outside it (a backend clock 30%
// or more fast) the history checker does find overlaps: the test documents
// the assumption and proves the checker can fail.
func TestSimClockSkew(t *testing.T) {
	ttl, margin := basePolicy().TTL, basePolicy().SafetyMargin
	limit := float64(ttl) / float64(ttl-margin) // 1.111 for 4s/400ms
	t.Run("InModel", func(t *testing.T) {
		runSeeds(t, seedsSkewIn, func(w *world) {
			rate := 0.5 + w.float()*(limit-0.5-0.01)
			offset := w.between(-time.Hour, time.Hour)
			w.setStore(memory.Options{Clock: simtest.NewSkewedClock(nil, offset, rate)})
			w.note("backend clock rate %.4f offset %v", rate, offset)
			skewRun(w)
		})
	})
	t.Run("OutOfModel", func(t *testing.T) {
		runSeeds(t, seedsSkewOut, func(w *world) {
			rate := 1.3 + w.float()*0.7
			w.setStore(memory.Options{Clock: simtest.NewSkewedClock(nil, w.between(-time.Hour, time.Hour), rate)})
			w.note("backend clock rate %.4f (outside the model)", rate)
			w.expectViolations = true
			skewRun(w)
		})
	})
}

// TestSimClockSkewDetected is scenario 10's detector: a managed holder on
// a backend whose clock runs 30% to 100% fast. Its first renewal's backend
// timestamp advances more than the local send/receive bracket allows, so
// the handle turns Uncertain (ErrAmbiguousOutcome) without extending its
// deadline, before the backend's expiry of the first grant; holders that
// wait for the key then find no overlap although the clocks are outside
// the model. (The first TTL relies on the margin alone: a holder that
// never renews is TestSimClockSkew/OutOfModel.)
func TestSimClockSkewDetected(t *testing.T) {
	runSeeds(t, seedsSkewOut, func(w *world) {
		rate := 1.3 + w.float()*0.7
		w.setStore(memory.Options{Clock: simtest.NewSkewedClock(nil, w.between(-time.Hour, time.Hour), rate)})
		w.note("backend clock rate %.4f (outside the model)", rate)
		k := leaseapi.MustKey("sc10", "detect")
		h := w.holdManaged("a", k)
		wg := w.contend(k, []string{"b", "c"}, 0)
		var flagged bool
		waitFor(3*w.policy.TTL(), 10*time.Millisecond, func() bool {
			if w.admit(h) {
				_ = w.write(h, "a")
			}
			if s := h.Status(); s.State == leaseapi.StateUncertain && leaseapi.Kind(s.Err) == leaseapi.ErrAmbiguousOutcome {
				flagged = true
			}
			return h.State().Terminal()
		})
		wg.Wait()
		if !flagged {
			w.problem("the skewed renewal never made the handle uncertain")
		}
	})
}

// skewRun: a holder that never renews acts until its last Active instant
// while two others wait for the key with short retries; then a short
// contention run.
func skewRun(w *world) {
	k := leaseapi.MustKey("sc10", "k")
	a := w.client("a")
	h, err := a.c.TryAcquire(context.Background(), k, w.policy)
	if err != nil {
		w.fatal("TryAcquire: %v", err)
	}
	w.granted(h)
	var wg sync.WaitGroup
	for _, name := range []string{"b", "c"} {
		c := w.client(name)
		wg.Go(func() {
			hb, err := c.c.Acquire(context.Background(), k, w.policy)
			if err != nil {
				return
			}
			w.granted(hb)
			for w.admit(hb) {
				_ = w.write(hb, c.name)
				pause(context.Background(), 20*time.Millisecond)
			}
			w.release(hb)
		})
	}
	waitFor(2*w.policy.TTL(), 10*time.Millisecond, func() bool {
		if w.admit(h) {
			_ = w.write(h, "a")
			return false
		}
		return true
	})
	wg.Wait()
	contend(w, 3, []leaseapi.Key{leaseapi.MustKey("sc10", "x"), leaseapi.MustKey("sc10", "y")}, 20*time.Second, nil)
}

// jumpClock is a backend clock that follows the simulated clock until
// Jump moves it by d at once (an NTP step, a VM restored from a snapshot).
type jumpClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *jumpClock) Jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// TestSimClockJump is scenario 10's clock jump: the backend's clock steps
// while a managed holder acts and two others wait. A step backwards (any
// size) only makes grants last longer on the backend: no overlap. A step
// forwards by more than the margin is outside the model: the backend
// expires the holder's grant early, another client takes the key, and the
// holder, which has no backend reading until its next renewal, is still
// Active: the checker must find the overlap (it documents the assumption).
// The holder learns at that next renewal (Lost).
func TestSimClockJump(t *testing.T) {
	run := func(w *world, jump, at time.Duration) *runtime.Handle {
		clk := &jumpClock{}
		w.setStore(memory.Options{Clock: clk})
		w.note("backend clock jumps %v at +%v", jump, at)
		k := leaseapi.MustKey("sc10", "jump")
		h := w.holdManaged("a", k)
		wg := w.contend(k, []string{"b", "c"}, 2*w.policy.TTL())
		start := time.Now()
		jumped := false
		waitFor(4*w.policy.TTL(), 10*time.Millisecond, func() bool {
			if !jumped && time.Since(start) >= at {
				clk.Jump(jump)
				jumped = true
			}
			if w.admit(h) {
				_ = w.write(h, "a")
			}
			return h.State().Terminal()
		})
		wg.Wait()
		return h
	}
	t.Run("Backward", func(t *testing.T) {
		runSeeds(t, seedsSkewOut, func(w *world) {
			run(w, -w.between(time.Second, time.Hour), w.between(100*time.Millisecond, 3*time.Second))
		})
	})
	t.Run("Forward", func(t *testing.T) {
		runSeeds(t, seedsSkewOut, func(w *world) {
			w.expectViolations = true
			ttl := w.policy.TTL()
			h := run(w, w.between(ttl, 2*ttl), w.between(50*time.Millisecond, 500*time.Millisecond))
			if st := h.State(); st != leaseapi.StateLost {
				w.problem("the holder after its first renewal past the jump: %v, want lost", st)
			}
		})
	})
}
