package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/queue"
	"github.com/leasekit/lease/simtest"
)

// TestZeroValues: a Worker or MemorySource not built by its constructor
// (the zero value, a nil pointer) answers ErrInvalidState and never panics.
func TestZeroValues(t *testing.T) {
	ctx := context.Background()
	for name, w := range map[string]*queue.Worker{"zero": {}, "nil": nil} {
		backendtest.WantKind(t, name+" Worker Start", w.Start(ctx), leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" Worker Stop", w.Stop(ctx), leaseapi.ErrInvalidState)
	}
	for name, s := range map[string]*queue.MemorySource{"zero": {}, "nil": nil} {
		backendtest.WantKind(t, name+" MemorySource Put", s.Put("a", nil), leaseapi.ErrInvalidState)
		_, err := s.Receive(ctx)
		backendtest.WantKind(t, name+" MemorySource Receive", err, leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" MemorySource Ack", s.Ack(ctx, queue.Item{ID: "a"}), leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" MemorySource Nack", s.Nack(ctx, queue.Item{ID: "a"}), leaseapi.ErrInvalidState)
		if s.Len() != 0 || s.Acked() != 0 || s.Deliveries("a") != 0 {
			t.Errorf("%s MemorySource counts %d %d %d, want 0", name, s.Len(), s.Acked(), s.Deliveries("a"))
		}
	}
}

// emptySource answers every Receive at once with no item and no error
// (the finding: 18 M calls/s, and Stop timed out).
type emptySource struct{ calls atomic.Int64 }

func (s *emptySource) Receive(context.Context) (queue.Item, error) {
	s.calls.Add(1)
	return queue.Item{}, nil
}
func (s *emptySource) Ack(context.Context, queue.Item) error  { return nil }
func (s *emptySource) Nack(context.Context, queue.Item) error { return nil }

// TestEmptyItemsBackOff: a source that delivers (Item{}, nil) at once is
// paced at one call per Backoff (raised to MinBackoff, here from a 1 ns
// Backoff), each reported as Failed, and Stop returns at once.
func TestEmptyItemsBackOff(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := &emptySource{}
		ev := &events{}
		var handled atomic.Int32
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), OnEvent: ev.add, Backoff: time.Nanosecond,
			Handler: func(context.Context, queue.Item, leaseapi.Token) error { handled.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Advance(time.Second)
		calls := src.calls.Load()
		if want := int64(time.Second/queue.MinBackoff) + 1; calls > want || calls < want-1 {
			t.Fatalf("%d Receive calls in 1s, want about %d (one per MinBackoff)", calls, want)
		}
		if handled.Load() != 0 {
			t.Fatalf("handler called %d times for empty items", handled.Load())
		}
		evs := ev.all()
		if len(evs) == 0 {
			t.Fatal("no event for an empty item")
		}
		backendtest.WantKind(t, "empty item", evs[0].Err, leaseapi.ErrInvalidState)
		began := time.Now()
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took != 0 {
			t.Fatalf("Stop took %v, want at once", took)
		}
	})
}

// badIDSource redelivers one item whose ID cannot name a lease, at once.
type badIDSource struct{ emptySource }

func (s *badIDSource) Receive(context.Context) (queue.Item, error) {
	s.calls.Add(1)
	return queue.Item{ID: "a//b"}, nil
}

// TestUnusableItemsBackOff: a source that redelivers an item with an
// unusable ID at once is paced the same way.
func TestUnusableItemsBackOff(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := &badIDSource{}
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), Backoff: 100 * time.Millisecond, Handler: okHandler})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, w)
		simtest.Advance(time.Second)
		if calls := src.calls.Load(); calls > 11 {
			t.Fatalf("%d Receive calls in 1s with a 100ms backoff", calls)
		}
	})
}

// stopSource delivers an item to a Receive whose ctx is already done
// (a source that ignores ctx): the worker gives it back, not processes it.
type stopSource struct {
	emptySource
	nacked atomic.Int32
}

func (s *stopSource) Receive(ctx context.Context) (queue.Item, error) {
	<-ctx.Done()
	return queue.Item{ID: "late"}, nil
}
func (s *stopSource) Nack(context.Context, queue.Item) error { s.nacked.Add(1); return nil }

func TestDeliveryAfterStopIsGivenBack(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := &stopSource{}
		var handled atomic.Int32
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t),
			Handler: func(context.Context, queue.Item, leaseapi.Token) error { handled.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Advance(time.Second)
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if handled.Load() != 0 || src.nacked.Load() != 1 {
			t.Fatalf("handled %d, nacked %d; want 0 and 1", handled.Load(), src.nacked.Load())
		}
	})
}

// TestOnEventPanicIsRecovered: a panicking OnEvent does not crash the
// process; the panic is reported once more as a Failed event and the
// worker goes on acking.
func TestOnEventPanicIsRecovered(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, time.Hour)
		ev := &events{}
		var n atomic.Int32
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), Handler: okHandler,
			OnEvent: func(e queue.Event) {
				ev.add(e)
				if n.Add(1) == 1 {
					panic("observer broke")
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		_ = src.Put("a", nil)
		_ = src.Put("b", nil)
		backendtest.Start(t, w)
		simtest.Advance(time.Second)
		evs := ev.all()
		if len(evs) != 3 || evs[0].Outcome != queue.Acked || evs[1].Outcome != queue.Failed || evs[2].Outcome != queue.Acked {
			t.Fatalf("events %+v, want acked, failed (the panic), acked", evs)
		}
		var pe *queue.PanicError
		if !errors.As(evs[1].Err, &pe) || pe.Callback != "OnEvent" || pe.Value != "observer broke" {
			t.Fatalf("panic report %v", evs[1].Err)
		}
		backendtest.WantKind(t, "OnEvent panic", evs[1].Err, leaseapi.ErrInvalidState)
		if src.Len() != 0 || c.Held() != 0 {
			t.Fatalf("%d left, %d held", src.Len(), c.Held())
		}
	})
}

// panicSource panics in Receive once, then in Ack once, then behaves.
type panicSource struct {
	*queue.MemorySource
	receives, acks atomic.Int32
}

func (s *panicSource) Receive(ctx context.Context) (queue.Item, error) {
	if s.receives.Add(1) == 1 {
		panic("receive broke")
	}
	return s.MemorySource.Receive(ctx)
}

func (s *panicSource) Ack(ctx context.Context, it queue.Item) error {
	if s.acks.Add(1) == 1 {
		panic("ack broke")
	}
	return s.MemorySource.Ack(ctx, it)
}

// TestSourcePanicsAreRecovered: a panic in Receive is a failed Receive
// (reported, then a pause), a panic in Ack a failed ack (the item stays
// queued and is redelivered after its visibility timeout, then acked).
func TestSourcePanicsAreRecovered(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := &panicSource{MemorySource: newSource(t, 10*time.Second)}
		ev := &events{}
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), Handler: okHandler, OnEvent: ev.add})
		if err != nil {
			t.Fatal(err)
		}
		_ = src.Put("a", nil)
		backendtest.Start(t, w)
		simtest.Advance(time.Minute)
		evs := ev.all()
		if len(evs) != 3 || evs[0].Outcome != queue.Failed || evs[1].Outcome != queue.Failed || evs[2].Outcome != queue.Acked {
			t.Fatalf("events %+v, want failed (Receive), failed (Ack), acked", evs)
		}
		for i, cb := range []string{"Receive", "Ack"} {
			var pe *queue.PanicError
			if !errors.As(evs[i].Err, &pe) || pe.Callback != cb {
				t.Errorf("event %d: %v, want a %s panic", i, evs[i].Err, cb)
			}
			backendtest.WantKind(t, cb+" panic", evs[i].Err, leaseapi.ErrInvalidState)
		}
		if src.Len() != 0 {
			t.Fatalf("%d left", src.Len())
		}
	})
}

// TestReleaseErrorIsReported: when the item lease's release fails,
// definitely (ErrBackendUnavailable: still held) or ambiguously
// (ErrAmbiguousOutcome: maybe held), the delivery's event says so in
// ReleaseErr; the ack itself stands.
func TestReleaseErrorIsReported(t *testing.T) {
	for _, tc := range []struct {
		fault simtest.Fault
		want  error
	}{
		{simtest.FailBeforeSend, leaseapi.ErrBackendUnavailable},
		{simtest.LoseReply, leaseapi.ErrAmbiguousOutcome},
	} {
		t.Run(tc.want.Error(), func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				c, f := newClient(t, backendtest.MemoryStore(t))
				src := newSource(t, time.Hour)
				ev := &events{}
				w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), OnEvent: ev.add,
					Handler: func(context.Context, queue.Item, leaseapi.Token) error {
						f.Inject(leaseapi.OperationRelease, tc.fault)
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				_ = src.Put("a", nil)
				backendtest.Start(t, w)
				simtest.Advance(time.Second)
				evs := ev.all()
				if len(evs) != 1 || evs[0].Outcome != queue.Acked {
					t.Fatalf("events %+v, want one acked", evs)
				}
				backendtest.WantKind(t, "ReleaseErr", evs[0].ReleaseErr, tc.want)
			})
		})
	}
}

// TestStopReportsAFailedRelease: when the release of an item that was in
// flight at Stop fails, Stop returns it (once) instead of nil.
func TestStopReportsAFailedRelease(t *testing.T) {
	for _, tc := range []struct {
		fault simtest.Fault
		want  error
	}{
		{simtest.FailBeforeSend, leaseapi.ErrBackendUnavailable},
		{simtest.LoseReply, leaseapi.ErrAmbiguousOutcome},
	} {
		t.Run(tc.want.Error(), func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				c, f := newClient(t, backendtest.MemoryStore(t))
				src := newSource(t, time.Hour)
				w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), OnStop: queue.Abandon,
					Handler: func(ctx context.Context, _ queue.Item, _ leaseapi.Token) error {
						<-ctx.Done()
						f.Inject(leaseapi.OperationRelease, tc.fault)
						return ctx.Err()
					}})
				if err != nil {
					t.Fatal(err)
				}
				_ = src.Put("a", nil)
				if err := w.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				simtest.Advance(time.Second)
				backendtest.WantKind(t, "Stop after a failed release", w.Stop(t.Context()), tc.want)
				if err := w.Stop(t.Context()); err != nil {
					t.Fatalf("second Stop: %v, want nil (reported once)", err)
				}
			})
		})
	}
}

// TestTypedNilSource: a nil *MemorySource passed as a Source is rejected
// by New, as a nil Source is.
func TestTypedNilSource(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		var src *queue.MemorySource
		_, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), Handler: okHandler})
		backendtest.WantKind(t, "New(typed nil source)", err, leaseapi.ErrInvalidState)
	})
}

// TestDownBackendPausesTheWorker: with the backend down, a worker does not
// take delivery after delivery at once (each then waits out its
// visibility timeout unprocessed): after each item whose lease it could
// not get it pauses Backoff; when the backend is back every item is acked.
func TestDownBackendPausesTheWorker(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, f := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, 10*time.Second)
		for i := range 100 {
			_ = src.Put(string(rune('a'+i%26))+string(rune('a'+i/26)), nil)
		}
		ev := &events{}
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), Handler: okHandler, OnEvent: ev.add, Backoff: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		f.SetMode(simtest.Down)
		backendtest.Start(t, w)
		simtest.Advance(time.Second)
		if n := ev.count(queue.Failed); n > 11 {
			t.Fatalf("%d deliveries failed in 1s with a 100ms backoff, want at most 11", n)
		}
		backendtest.WantKind(t, "lease while down", ev.all()[0].Err, leaseapi.ErrBackendUnavailable)
		f.SetMode(simtest.Pass)
		simtest.Advance(time.Minute)
		if src.Len() != 0 {
			t.Fatalf("%d items left after the backend came back", src.Len())
		}
	})
}
