package callctx

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestSharedDeadlineBound: a shared context ends no later than the call's
// own bound, and less than one slot (at most 1/64 of the bound) earlier.
func TestSharedDeadlineBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ds := NewShared(context.Background())
		for _, d := range []time.Duration{Min, 100 * time.Millisecond, 2 * time.Second, 10 * time.Second, time.Minute} {
			for _, skew := range []time.Duration{0, 1, 999 * time.Microsecond, 3 * time.Millisecond, 17 * time.Millisecond} {
				time.Sleep(skew) // a send instant anywhere in a slot
				sentAt := time.Now()
				dl, ok := ds.Context(sentAt, d).Deadline()
				if !ok {
					t.Fatalf("d=%v: shared context has no deadline", d)
				}
				if dl.After(sentAt.Add(d)) {
					t.Fatalf("d=%v: deadline %v after the bound %v", d, dl, sentAt.Add(d))
				}
				if q := slotOf(d); q > d/64 || !dl.After(sentAt.Add(d-q)) {
					t.Fatalf("d=%v: deadline %v more than a slot (%v) before the bound %v", d, dl, q, sentAt.Add(d))
				}
			}
		}
	})
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

// TestWithin: a call's context is the caller's own when it ends first,
// the shared one when the caller's never ends (wrapped, keeping its
// values, unless it is Background or TODO), and none otherwise; none of
// these allocates more than the wrapper.
func TestWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ds := NewShared(context.Background())
		d := 2 * time.Second
		type key struct{}
		sentAt := time.Now()
		shared := ds.Context(sentAt, d)

		for _, bg := range []context.Context{context.Background(), context.TODO()} {
			if got, ok := ds.Within(bg, sentAt, d); !ok || got != shared {
				t.Fatalf("%v: got %v, %v; want the shared context", bg, got, ok)
			}
		}

		early, cancel := context.WithTimeout(context.Background(), d/2)
		defer cancel()
		if got, ok := ds.Within(early, sentAt, d); !ok || got != early {
			t.Fatalf("caller's deadline first: got %v, %v; want the caller's context", got, ok)
		}
		exact, cancel := context.WithDeadline(context.Background(), sentAt.Add(d))
		defer cancel()
		if got, ok := ds.Within(exact, sentAt, d); !ok || got != exact {
			t.Fatalf("caller's deadline at the bound: got %v, %v; want the caller's context", got, ok)
		}
		late, cancel := context.WithTimeout(context.Background(), 2*d)
		defer cancel()
		if got, ok := ds.Within(late, sentAt, d); ok {
			t.Fatalf("caller's deadline later: got %v, want none", got)
		}
		cancelable, cancel := context.WithCancel(context.Background())
		defer cancel()
		if got, ok := ds.Within(cancelable, sentAt, d); ok {
			t.Fatalf("cancelable caller: got %v, want none", got)
		}

		valued := context.WithValue(context.Background(), key{}, "v")
		for _, caller := range []context.Context{valued, context.WithoutCancel(late)} {
			got, ok := ds.Within(caller, sentAt, d)
			if !ok || got.Done() != shared.Done() {
				t.Fatalf("caller that never ends: got %v, %v; want the shared context's end", got, ok)
			}
			if dl, _ := got.Deadline(); dl != func() time.Time { dl, _ := shared.Deadline(); return dl }() {
				t.Fatalf("caller that never ends: deadline %v, want the shared one", dl)
			}
			if caller == valued && got.Value(key{}) != "v" {
				t.Fatalf("the caller's value is lost: got %v", got.Value(key{}))
			}
		}
		if n := testing.AllocsPerRun(100, func() { ds.Within(context.Background(), sentAt, d) }); n != 0 {
			t.Fatalf("allocations for Background: got %v, want 0", n)
		}
		if n := testing.AllocsPerRun(100, func() { ds.Within(early, sentAt, d) }); n != 0 {
			t.Fatalf("allocations for a caller that ends first: got %v, want 0", n)
		}
		if n := testing.AllocsPerRun(100, func() { ds.Within(valued, sentAt, d) }); n != 1 {
			t.Fatalf("allocations for a caller with values: got %v, want 1", n)
		}

		// A context derived from the wrapper ends with the shared one (it
		// registers with it), and the wrapper ends with DeadlineExceeded.
		got, _ := ds.Within(valued, sentAt, d)
		child, cancelChild := context.WithCancel(got)
		defer cancelChild()
		<-child.Done()
		if !errors.Is(got.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Fatalf("at the deadline: got %v and %v, want DeadlineExceeded", got.Err(), child.Err())
		}
		if dl, _ := shared.Deadline(); time.Now().Before(dl) {
			t.Fatalf("ended at %v, before the deadline %v", time.Now(), dl)
		}
	})
}
