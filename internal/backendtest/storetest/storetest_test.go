package storetest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is one memory Store, which both clients of a Handoff share: its
// WatchRelease wakes the waiter synchronously.
func store(t *testing.T) leaseapi.Backend {
	t.Helper()
	s, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHandoffOnMemory(t *testing.T) {
	s := store(t)
	storetest.NewHandoff(t, s, s).CheckHandoff(t, leaseapi.MustKey("ns", "handoff"), 500*time.Millisecond)
}

func TestHandoffOnceFailsWhenTheWaiterCannotWait(t *testing.T) {
	s := store(t)
	x := storetest.NewHandoff(t, s, s)
	k := leaseapi.MustKey("ns", "k")
	h, err := x.Holder.Acquire(t.Context(), k, x.Policy)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := x.Once(ctx, h, k); leaseapi.Kind(err) != leaseapi.ErrCanceled {
		t.Fatalf("canceled ctx: got %v, want ErrCanceled", err)
	}
	if err := h.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// h is released: the waiter acquires at once, without waiting.
	if _, _, err := x.Once(t.Context(), h, k); err == nil {
		t.Fatal("a waiter that never waited: got nil, want an error")
	}
}

func TestSignalSleeper(t *testing.T) {
	s := storetest.NewSignalSleeper()
	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	if err := s.Sleep(t.Context(), time.Hour, wake); err != nil {
		t.Fatalf("woken sleep: got %v, want nil", err)
	}
	select {
	case <-s.Sleeping:
	default:
		t.Fatal("no sleeping signal, want one")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Sleep(ctx, time.Hour, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled sleep: got %v, want context.Canceled", err)
	}
	if err := s.Sleep(t.Context(), time.Millisecond, nil); err != nil { // the buffered signal does not block
		t.Fatalf("timed sleep: got %v, want nil", err)
	}
}

func TestParallel(t *testing.T) {
	const n = 1000
	var seen [n]atomic.Int32
	if err := storetest.Parallel(7, n, func(i int) error { seen[i].Add(1); return nil }); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	for i := range seen {
		if got := seen[i].Load(); got != 1 {
			t.Fatalf("index %d called %d times, want 1", i, got)
		}
	}
	boom := errors.New("boom")
	err := storetest.Parallel(4, n, func(i int) error {
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
	if err := storetest.Parallel(3, 0, func(int) error { return boom }); err != nil {
		t.Fatalf("no work: got %v, want nil", err)
	}
}

func TestStartManaged(t *testing.T) {
	c := storetest.NewClient(t, store(t), runtime.ClientOptions{})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	keys := []leaseapi.Key{leaseapi.MustKey("ns", "a"), leaseapi.MustKey("ns", "b"), leaseapi.MustKey("ns", "c")}
	hs, err := storetest.StartManaged(t.Context(), c, p, 2, len(keys), func(i int) leaseapi.Key { return keys[i] })
	if err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	for i, h := range hs {
		if h == nil || h.Key() != keys[i] || h.State() != leaseapi.StateActive {
			t.Fatalf("handle %d: got %v, want an active handle of %v", i, h, keys[i])
		}
	}
	if _, err := storetest.StartManaged(t.Context(), c, p, 2, 1, func(int) leaseapi.Key { return keys[0] }); leaseapi.Kind(err) != leaseapi.ErrContended {
		t.Fatalf("a held key: got %v, want ErrContended", err)
	}
}

func TestCPUTime(t *testing.T) {
	if storetest.CPUTime() <= 0 {
		t.Fatal("CPUTime: got <= 0, want this process's CPU time")
	}
}
