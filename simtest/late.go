package simtest

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// LateRig makes a backend execute a mutation after its caller's deadline,
// for the suite's check of the not-after rule of [leaseapi.Backend]: a
// TryAcquire, Renew or RenewBatch that the backend executes later than the
// ctx deadline its caller sent it with changes nothing. The rig holds the
// request back inside the backend (a row lock, a paused server, a clock
// that does not return) after the backend received it, lets the deadline
// pass, then lets it run.
//
// A rig is used for one held-back call. Every function must fail t (not
// return) when it cannot do its part; they may block, bounded.
type LateRig struct {
	// Backend is the backend the held-back call goes to. It shares its
	// state with Direct.
	Backend leaseapi.Backend
	// Direct sets the keys up and reads them back (it must implement
	// leaseapi.Inspector); nil means Backend.
	Direct leaseapi.Backend
	// Hold starts holding back, inside the backend, the next mutation of
	// key k sent to Backend (k exists: the suite acquired it first). It
	// returns once the hold is in force.
	Hold func(t *testing.T, k leaseapi.Key)
	// WaitHeld returns once the call's request has reached the backend and
	// is held back. It must fail t at once if errc (the call's result)
	// receives first: the call was not held back.
	WaitHeld func(t *testing.T, errc <-chan error)
	// Cut cuts the caller off without the backend noticing (the backend
	// keeps the held-back request and gets no cancel), so that the call
	// returns while its request waits; the call must then fail with
	// leaseapi.ErrAmbiguousOutcome. Nil for an in-process backend: the
	// call then waits for the hold to end.
	Cut func(t *testing.T)
	// WaitPast returns once the backend's own clock is past the held-back
	// request's not-after bound. The call's ctx has deadline (local
	// clock), budget after the call was made.
	WaitPast func(t *testing.T, deadline time.Time, budget time.Duration)
	// Release ends the hold and returns once the held-back request has
	// been executed by the backend.
	Release func(t *testing.T)
}

// lateBudget is the ctx timeout of the held-back calls.
const lateBudget = 200 * time.Millisecond

// lateCall is one mutation the not-after rule covers. keys[0] is the key
// held back.
type lateCall struct {
	name  string
	keys  int
	setup func(t *testing.T, b leaseapi.Backend, keys []leaseapi.Key) []leaseapi.Record
	call  func(ctx context.Context, b leaseapi.Backend, keys []leaseapi.Key, recs []leaseapi.Record) error
}

var lateCalls = []lateCall{
	{"TryAcquire", 1,
		func(t *testing.T, b leaseapi.Backend, keys []leaseapi.Key) []leaseapi.Record {
			rec := acquire(t, b, keys[0], ownerA, time.Minute)
			if err := b.Release(t.Context(), rec); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return nil
		},
		func(ctx context.Context, b leaseapi.Backend, keys []leaseapi.Key, _ []leaseapi.Record) error {
			_, err := b.TryAcquire(ctx, keys[0], ownerB, time.Hour)
			return err
		}},
	{"Renew", 1,
		func(t *testing.T, b leaseapi.Backend, keys []leaseapi.Key) []leaseapi.Record {
			return []leaseapi.Record{acquire(t, b, keys[0], ownerA, time.Minute)}
		},
		func(ctx context.Context, b leaseapi.Backend, _ []leaseapi.Key, recs []leaseapi.Record) error {
			_, err := b.Renew(ctx, recs[0], time.Hour)
			return err
		}},
	{"RenewBatch", 2, // the second key is not held back: it must not be renewed either
		func(t *testing.T, b leaseapi.Backend, keys []leaseapi.Key) []leaseapi.Record {
			return []leaseapi.Record{acquire(t, b, keys[0], ownerA, time.Minute), acquire(t, b, keys[1], ownerA, time.Minute)}
		},
		func(ctx context.Context, b leaseapi.Backend, _ []leaseapi.Key, recs []leaseapi.Record) error {
			br, ok := b.(leaseapi.BatchRenewer)
			if !ok {
				return errNoBatch
			}
			res := br.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: recs[0], TTL: time.Hour}, {Record: recs[1], TTL: time.Hour}})
			if len(res) != 2 {
				return fmt.Errorf("RenewBatch: %d results, want 2", len(res))
			}
			if leaseapi.Kind(res[0].Err) != leaseapi.Kind(res[1].Err) {
				return fmt.Errorf("RenewBatch: elements ended differently: %v, %v", res[0].Err, res[1].Err)
			}
			return res[0].Err
		}},
}

var errNoBatch = fmt.Errorf("no batch renewer")

// CheckLateExecution runs only the suite's not-after check against h (see
// [LateRig]); [Conformance] runs it too, as LateExecutionIsNoop, when
// h.Late is set. It is for backends whose rig needs a server of its own
// (one that holds back every client's requests, say), set up apart from
// the rest of the suite.
func CheckLateExecution(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Late == nil {
		t.Fatal("simtest: CheckLateExecution needs Harness.New and Harness.Late")
	}
	run := func(t *testing.T) { testLateExecution(t, h, h.New(t)) }
	if h.Simulated {
		synctest.Test(t, run)
		return
	}
	run(t)
}

// testLateExecution: for each mutation the rule covers, a call held back
// inside the backend until after its ctx deadline changes nothing (the
// keys read back exactly as before), and its caller gets an error (never
// success, contention or a stale owner). The control, the same call
// without a ctx deadline, does apply when the hold ends: the rig really
// forces a late execution.
func testLateExecution(t *testing.T, h Harness, b leaseapi.Backend) {
	if h.Late == nil {
		t.Skip("the harness has no LateRig")
	}
	// No t.Run: a simulated harness runs this inside a synctest bubble.
	for _, lc := range lateCalls {
		for _, bounded := range []bool{false, true} {
			name := lc.name + "/control"
			if bounded {
				name = lc.name + "/bounded"
			}
			func() {
				rig := h.Late(t, b)
				if _, ok := rig.Backend.(leaseapi.BatchRenewer); !ok && lc.name == "RenewBatch" {
					return // the capability is optional
				}
				direct := rig.Direct
				if direct == nil {
					direct = rig.Backend
				}
				keys := make([]leaseapi.Key, lc.keys)
				for i := range keys {
					keys[i] = key(t, fmt.Sprintf("late/%s/%d", name, i))
				}
				recs := lc.setup(t, direct, keys)
				before := lateState(t, direct, keys)

				rig.Hold(t, keys[0])
				ctx, cancel := context.WithCancel(t.Context())
				if bounded {
					ctx, cancel = context.WithTimeout(t.Context(), lateBudget)
				}
				defer cancel()
				errc := make(chan error, 1)
				go func() { errc <- lc.call(ctx, rig.Backend, keys, recs) }()
				rig.WaitHeld(t, errc)
				var err error
				if rig.Cut != nil {
					rig.Cut(t)
					err = <-errc
					wantKind(t, lc.name+" cut off while held back", err, leaseapi.ErrAmbiguousOutcome)
				}
				if dl, ok := ctx.Deadline(); ok {
					rig.WaitPast(t, dl, lateBudget)
				}
				rig.Release(t)
				if rig.Cut == nil {
					err = <-errc
					switch {
					case !bounded && err != nil:
						t.Fatalf("control: %s held back without a deadline: %v, want nil", lc.name, err)
					case bounded && err == nil:
						t.Fatalf("%s executed after its deadline: got nil, want an error", lc.name)
					case bounded:
						switch leaseapi.Kind(err) {
						case leaseapi.ErrTimeout, leaseapi.ErrCanceled, leaseapi.ErrBackendUnavailable, leaseapi.ErrAmbiguousOutcome:
						default:
							t.Fatalf("%s executed after its deadline: got %v, want a timeout, unavailable or ambiguous", lc.name, err)
						}
					}
				}
				after := lateState(t, direct, keys)
				switch {
				case bounded && after != before:
					t.Fatalf("%s executed after its deadline changed the backend:\nbefore %s\nafter  %s", lc.name, before, after)
				case !bounded && after == before:
					t.Fatalf("control: %s held back without a deadline did not apply (%s): the rig does not force a late execution", lc.name, after)
				}
			}()
		}
	}
}

// lateState is what the backend holds for keys, as Inspect reads it.
func lateState(t *testing.T, b leaseapi.Backend, keys []leaseapi.Key) string {
	t.Helper()
	in, ok := b.(leaseapi.Inspector)
	if !ok {
		t.Fatal("simtest: the LateRig's Direct backend must implement leaseapi.Inspector")
	}
	var s string
	for _, k := range keys {
		rec, held, err := in.Inspect(t.Context(), k)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		s += fmt.Sprintf("{%s token %d held %v owner %q %s..%s} ", k, rec.Token, held, rec.Owner,
			rec.AcquiredAt.UTC().Format(time.RFC3339Nano), rec.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	return s
}
