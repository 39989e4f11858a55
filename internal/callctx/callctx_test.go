package callctx

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestDeadlineBound: a shared context ends no later than the call's own
// bound, and less than one slot (at most 1/64 of the bound) earlier; a
// NewCeil context no earlier, and less than one slot later.
func TestDeadlineBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func(context.Context) *Shared
		sign time.Duration // -1: may end early (NewShared), +1: late (NewCeil)
		side string
	}{
		{"shared", NewShared, -1, "early"},
		{"ceil", NewCeil, +1, "late"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ds := tc.new(context.Background())
				for _, d := range []time.Duration{Min, 100 * time.Millisecond, 2 * time.Second, 10 * time.Second, time.Minute} {
					for _, skew := range []time.Duration{0, 1, 999 * time.Microsecond, 3 * time.Millisecond, 17 * time.Millisecond} {
						time.Sleep(skew) // a send instant anywhere in a slot
						sentAt := time.Now()
						dl, ok := ds.Context(sentAt, d).Deadline()
						if !ok {
							t.Fatalf("d=%v: shared context has no deadline", d)
						}
						bound, q := sentAt.Add(d), slotOf(d)
						// off is how far the deadline is on the side the
						// slots may move it to: never negative, under q.
						off := tc.sign * dl.Sub(bound)
						if q > d/64 || off < 0 || off >= q {
							t.Fatalf("d=%v: deadline %v is %v from the bound %v, want within [0, %v) on the %s side", d, dl, dl.Sub(bound), bound, q, tc.side)
						}
					}
				}
			})
		})
	}
}

// TestSharedDeadlineShared: calls whose bounds end in one slot share one
// context, and asking for it allocates nothing.
func TestSharedDeadlineShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ds := NewShared(context.Background())
		d := 2 * time.Second
		// Start at a slot boundary so that the next steps stay in the slot.
		now := time.Now()
		q := slotOf(d)
		time.Sleep(q - time.Duration(now.Add(d).UnixNano()%int64(q)))
		first := ds.Context(time.Now(), d)
		time.Sleep(q / 2)
		if got := ds.Context(time.Now(), d); got != first {
			t.Fatal("two calls ending in one slot got different contexts")
		}
		if n := testing.AllocsPerRun(100, func() { ds.Context(time.Now(), d) }); n != 0 {
			t.Fatalf("allocations per call in a cached slot: got %v, want 0", n)
		}
		time.Sleep(q)
		if got := ds.Context(time.Now(), d); got == first {
			t.Fatal("a call ending in the next slot got the previous slot's context")
		}
	})
}

// TestSharedDeadlineEnds: a shared context ends with DeadlineExceeded at
// its deadline, and with Canceled at once when the parent ends.
func TestSharedDeadlineEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		life, cancel := context.WithCancel(context.Background())
		ds := NewShared(life)
		ctx := ds.Context(time.Now(), time.Second)
		dl, _ := ctx.Deadline()
		time.Sleep(time.Until(dl) - time.Nanosecond)
		if ctx.Err() != nil {
			t.Fatalf("before the deadline: got %v, want nil", ctx.Err())
		}
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Now().Before(dl) {
			t.Fatalf("at the deadline: got %v at %v, want DeadlineExceeded at %v", ctx.Err(), time.Now(), dl)
		}

		ctx = ds.Context(time.Now(), time.Second)
		cancel()
		select {
		case <-ctx.Done():
		default:
			t.Fatal("parent ended: the shared context is not done")
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("parent ended: got %v, want Canceled", ctx.Err())
		}
	})
}

// TestExact: an Exact context reports the call's exact deadline, carries
// the caller's values, is not done before that deadline, ends with
// DeadlineExceeded less than a slot after it, and at once when the parent
// ends; a context derived from it is a child of the shared one (it ends
// with it); it costs one allocation.
func TestExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		life, cancel := context.WithCancel(context.Background())
		ds := NewCeil(life)
		type key struct{}
		caller := context.WithValue(context.Background(), key{}, "v")
		d := 2 * time.Second
		time.Sleep(time.Millisecond / 3) // off any slot boundary
		sentAt := time.Now()
		ctx := ds.Exact(caller, sentAt, d)
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(sentAt.Add(d)) {
			t.Fatalf("deadline %v, %v; want exactly %v", dl, ok, sentAt.Add(d))
		}
		if ctx.Value(key{}) != "v" {
			t.Fatalf("the caller's value is lost: got %v", ctx.Value(key{}))
		}
		child, stop := context.WithTimeout(ctx, time.Hour)
		defer stop()
		time.Sleep(d)
		if ctx.Err() != nil || child.Err() != nil {
			t.Fatalf("at the exact deadline: got %v (child %v), want nil: never ended early", ctx.Err(), child.Err())
		}
		<-ctx.Done()
		<-child.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("after the deadline: got %v, want DeadlineExceeded", ctx.Err())
		}
		if late := time.Since(sentAt.Add(d)); late <= 0 || late >= slotOf(d) {
			t.Fatalf("ended %v after the exact deadline, want within one slot (%v)", late, slotOf(d))
		}

		ctx = ds.Exact(caller, time.Now(), d)
		cancel()
		select {
		case <-ctx.Done():
		default:
			t.Fatal("parent ended: the call's context is not done")
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("parent ended: got %v, want Canceled", ctx.Err())
		}

		ds = NewCeil(context.Background())
		sentAt = time.Now()
		ds.Exact(context.Background(), sentAt, d) // the slot's context
		if n := testing.AllocsPerRun(100, func() { ds.Exact(context.Background(), sentAt, d) }); n != 1 {
			t.Fatalf("allocations per call: got %v, want 1", n)
		}
	})
}
