package queue_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/queue"
	"github.com/leasekit/lease/simtest"
)

func okHandler(context.Context, queue.Item, leaseapi.Token) error { return nil }

func TestBadInput(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, 0)
		p := itemPolicy(t)
		good := queue.Options{Policy: p, Handler: okHandler}
		with := func(f func(*queue.Options)) queue.Options { o := good; f(&o); return o }
		_, err := queue.New(nil, src, good)
		backendtest.WantKind(t, "New(nil client)", err, leaseapi.ErrInvalidState)
		_, err = queue.New(c, nil, good)
		backendtest.WantKind(t, "New(nil source)", err, leaseapi.ErrInvalidState)
		for _, tc := range []struct {
			name string
			o    queue.Options
		}{
			{"zero policy", with(func(o *queue.Options) { o.Policy = leaseapi.Policy{} })},
			{"nil handler", with(func(o *queue.Options) { o.Handler = nil })},
			{"negative concurrency", with(func(o *queue.Options) { o.Concurrency = -1 })},
			{"huge concurrency", with(func(o *queue.Options) { o.Concurrency = queue.MaxConcurrency + 1 })},
			{"bad namespace", with(func(o *queue.Options) { o.KeyNamespace = "a/b" })},
			{"unknown stop mode", with(func(o *queue.Options) { o.OnStop = 7 })},
			{"negative backoff", with(func(o *queue.Options) { o.Backoff = -1 })},
		} {
			_, err := queue.New(c, src, tc.o)
			backendtest.WantKind(t, "New with "+tc.name, err, leaseapi.ErrInvalidState)
		}
		_, err = queue.NewMemorySource(queue.MemoryOptions{Visibility: -1})
		backendtest.WantKind(t, "NewMemorySource(negative visibility)", err, leaseapi.ErrInvalidState)
		backendtest.WantKind(t, "Put(empty id)", src.Put("", nil), leaseapi.ErrInvalidState)
		if err := src.Put("a", nil); err != nil {
			t.Fatal(err)
		}
		backendtest.WantKind(t, "Put(duplicate)", src.Put("a", nil), leaseapi.ErrInvalidState)
		_, err = src.Receive(nil) //nolint:staticcheck
		backendtest.WantKind(t, "Receive(nil)", err, leaseapi.ErrInvalidState)

		w, err := queue.New(c, src, good)
		if err != nil {
			t.Fatal(err)
		}
		w2, _ := queue.New(c, src, good)
		backendtest.CheckStartStop(t, w, w2, backendtest.StartStopHooks[*queue.Worker]{})
	})
}

// TestMemorySource: visibility timeouts redeliver with a new receipt; a
// stale nack changes nothing; ack works for any delivery, once.
func TestMemorySource(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		src := newSource(t, 10*time.Second)
		for _, id := range []string{"a", "b"} {
			if err := src.Put(id, []byte(id)); err != nil {
				t.Fatal(err)
			}
		}
		a1, _ := src.Receive(t.Context())
		b1, _ := src.Receive(t.Context())
		if a1.ID != "a" || b1.ID != "b" || string(a1.Payload) != "a" {
			t.Fatalf("received %+v, %+v, want a then b", a1, b1)
		}
		got := make(chan queue.Item, 1)
		go func() {
			it, err := src.Receive(t.Context())
			if err != nil {
				t.Error(err)
			}
			got <- it
		}()
		simtest.Advance(9 * time.Second)
		select {
		case it := <-got:
			t.Fatalf("redelivered %s before the visibility timeout", it.ID)
		default:
		}
		simtest.Advance(time.Second)
		a2 := <-got
		if a2.ID != "a" || a2.Receipt == a1.Receipt || src.Deliveries("a") != 2 {
			t.Fatalf("redelivery %+v (deliveries %d), want a with a new receipt", a2, src.Deliveries("a"))
		}
		backendtest.WantKind(t, "Nack of a stale delivery", src.Nack(t.Context(), a1), leaseapi.ErrStaleOwner)
		if err := src.Nack(t.Context(), b1); err != nil {
			t.Fatal(err)
		}
		b2, _ := src.Receive(t.Context()) // visible at once after the nack
		if b2.ID != "b" {
			t.Fatalf("after nack got %s", b2.ID)
		}
		if err := src.Ack(t.Context(), a1); err != nil {
			t.Fatalf("ack of an older delivery: %v", err)
		}
		backendtest.WantKind(t, "second Ack", src.Ack(t.Context(), a2), leaseapi.ErrStaleOwner)
		if src.Len() != 1 || src.Acked() != 1 {
			t.Fatalf("len %d acked %d", src.Len(), src.Acked())
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := src.Receive(ctx)
		backendtest.WantKind(t, "Receive with nothing visible", err, leaseapi.ErrTimeout)
	})
}

// TestBoundedConcurrency: ten 10s items on a worker with concurrency 3
// run at most three at a time and take four rounds.
func TestBoundedConcurrency(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, time.Hour)
		for i := range 10 {
			_ = src.Put(string(rune('a'+i)), nil)
		}
		var in, most atomic.Int32
		w, err := queue.New(c, src, queue.Options{Concurrency: 3, Policy: itemPolicy(t),
			Handler: func(ctx context.Context, _ queue.Item, _ leaseapi.Token) error {
				n := in.Add(1)
				defer in.Add(-1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				return pause(ctx, 10*time.Second)
			}})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, w)
		simtest.Advance(39 * time.Second)
		if src.Len() != 1 {
			t.Fatalf("after 39s %d items left, want 1", src.Len())
		}
		simtest.Advance(time.Second)
		if src.Len() != 0 || most.Load() != 3 {
			t.Fatalf("after 40s: %d left, at most %d at once; want 0 and 3", src.Len(), most.Load())
		}
	})
}

// TestNoAckWithoutTheLease: fenced completion. A handler whose lease was
// lost (renewals failed until the deadline) and that returns nil anyway
// does not ack; neither does one whose lease the backend no longer
// confirms (Validate says stale). Both items are redelivered and acked
// later by a healthy handling.
func TestNoAckWithoutTheLease(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, f := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, 30*time.Second)
		p := itemPolicy(t)
		ev := &events{}
		var calls atomic.Int32
		w, err := queue.New(c, src, queue.Options{Policy: p, OnEvent: ev.add,
			Handler: func(ctx context.Context, it queue.Item, _ leaseapi.Token) error {
				switch calls.Add(1) {
				case 1: // the backend goes away; the lease expires; we ignore ctx
					f.SetMode(simtest.Down)
					<-ctx.Done()
					f.SetMode(simtest.Pass)
					return nil
				case 2: // the backend denies the grant at the check before the ack
					f.Inject(leaseapi.OperationValidate, simtest.Stale)
					return nil
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		_ = src.Put("x", nil)
		backendtest.Start(t, w)
		simtest.Advance(time.Minute)
		if calls.Load() != 3 || src.Len() != 0 {
			t.Fatalf("handled %d times, %d left; want 3 handlings, then acked", calls.Load(), src.Len())
		}
		evs := ev.all()
		if len(evs) != 3 || evs[0].Outcome != queue.Lost || evs[1].Outcome != queue.Lost || evs[2].Outcome != queue.Acked {
			t.Fatalf("events %+v, want lost, lost, acked", evs)
		}
		backendtest.WantKind(t, "first handling", evs[0].Err, leaseapi.ErrLost)
		backendtest.WantKind(t, "second handling", evs[1].Err, leaseapi.ErrStaleOwner)
		if evs[2].Token <= evs[1].Token || evs[1].Token <= evs[0].Token {
			t.Fatalf("tokens %d, %d, %d: want increasing", evs[0].Token, evs[1].Token, evs[2].Token)
		}
	})
}

// TestFailureAndPanicNack: a failing handler and a panicking one nack the
// item (redelivered at once, lease released first).
func TestFailureAndPanicNack(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, time.Hour)
		ev := &events{}
		sentinel := errors.New("nope")
		var calls atomic.Int32
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), OnEvent: ev.add,
			Handler: func(context.Context, queue.Item, leaseapi.Token) error {
				switch calls.Add(1) {
				case 1:
					return sentinel
				case 2:
					panic("boom")
				}
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		_ = src.Put("x", nil)
		backendtest.Start(t, w)
		simtest.Advance(time.Second)
		evs := ev.all()
		if len(evs) != 3 || evs[0].Outcome != queue.Nacked || evs[1].Outcome != queue.Nacked || evs[2].Outcome != queue.Acked {
			t.Fatalf("events %+v, want nacked, nacked, acked", evs)
		}
		var pe *queue.PanicError
		if !errors.Is(evs[0].Err, sentinel) || !errors.As(evs[1].Err, &pe) || pe.Value != "boom" {
			t.Fatalf("errors %v, %v", evs[0].Err, evs[1].Err)
		}
		if strings.Contains(evs[1].Err.Error(), "boom") {
			t.Fatal("panic value in the error text")
		}
		if c.Held() != 0 {
			t.Fatalf("%d leases held", c.Held())
		}
	})
}

// TestInvalidItemID: an item whose ID cannot name a lease is not
// processed and is reported.
func TestInvalidItemID(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		c, _ := newClient(t, backendtest.MemoryStore(t))
		src := newSource(t, time.Hour)
		ev := &events{}
		var calls atomic.Int32
		w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), OnEvent: ev.add,
			Handler: func(context.Context, queue.Item, leaseapi.Token) error { calls.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		_ = src.Put("a//b", nil)
		backendtest.Start(t, w)
		simtest.Advance(time.Second)
		if calls.Load() != 0 || ev.count(queue.Failed) != 1 {
			t.Fatalf("calls %d, events %+v", calls.Load(), ev.all())
		}
		backendtest.WantKind(t, "invalid id", ev.all()[0].Err, leaseapi.ErrInvalidState)
	})
}

// TestStopModes: Finish lets the in-flight item finish and ack while Stop
// waits; Abandon cancels it and nacks it (visible at once); Finish whose
// Stop ctx ends escalates to canceling the handler.
func TestStopModes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      queue.StopMode
		stopAfter time.Duration // Stop's ctx timeout; 0: none
		wantLeft  int
		wantOut   queue.Outcome
		wantTook  time.Duration
	}{
		{"finish", queue.Finish, 0, 0, queue.Acked, 20 * time.Second},
		{"abandon", queue.Abandon, 0, 1, queue.Nacked, 0},
		{"finish with a deadline", queue.Finish, 5 * time.Second, 1, queue.Nacked, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				c, _ := newClient(t, backendtest.MemoryStore(t))
				src := newSource(t, time.Hour)
				ev := &events{}
				w, err := queue.New(c, src, queue.Options{Policy: itemPolicy(t), OnEvent: ev.add, OnStop: tc.mode,
					Handler: func(ctx context.Context, _ queue.Item, _ leaseapi.Token) error {
						return pause(ctx, 30*time.Second)
					}})
				if err != nil {
					t.Fatal(err)
				}
				_ = src.Put("x", nil)
				if err := w.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				simtest.Advance(10 * time.Second)
				ctx := t.Context()
				if tc.stopAfter > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.stopAfter)
					defer cancel()
				}
				began := time.Now()
				err = w.Stop(ctx)
				if tc.stopAfter > 0 {
					backendtest.WantKind(t, "Stop past its deadline", err, leaseapi.ErrTimeout)
					if err := w.Stop(t.Context()); err != nil {
						t.Fatal(err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if took := time.Since(began); took != tc.wantTook {
					t.Fatalf("Stop took %v, want %v", took, tc.wantTook)
				}
				evs := ev.all()
				if src.Len() != tc.wantLeft || len(evs) != 1 || evs[0].Outcome != tc.wantOut {
					t.Fatalf("left %d, events %+v; want %d left and %v", src.Len(), evs, tc.wantLeft, tc.wantOut)
				}
				simtest.Settle()
				if c.Held() != 0 {
					t.Fatalf("%d leases held after Stop", c.Held())
				}
			})
		})
	}
}
