package watchhub_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/watchhub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pending reports whether ch holds a wake-up, consuming it.
func pending(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNotifyWakesOnlyThatKeyAndCoalesces(t *testing.T) {
	var h watchhub.Hub[string, struct{}] // the zero Hub is ready
	a1, stopA1 := h.Watch("a", struct{}{})
	defer stopA1()
	a2, stopA2 := h.Watch("a", struct{}{})
	defer stopA2()
	b, stopB := h.Watch("b", struct{}{})
	defer stopB()

	h.Notify("a")
	h.Notify("a") // coalesces with the first: buffer 1, never blocks
	h.Notify("nobody")
	if got := []bool{pending(a1), pending(a2), pending(b)}; !slices.Equal(got, []bool{true, true, false}) {
		t.Fatalf("after Notify(a): got pending %v, want [true true false]", got)
	}
	if pending(a1) || pending(a2) {
		t.Fatal("got a second wake-up after two Notify calls, want them coalesced into one")
	}

	h.NotifyAll()
	if got := []bool{pending(a1), pending(a2), pending(b)}; !slices.Equal(got, []bool{true, true, true}) {
		t.Fatalf("after NotifyAll: got pending %v, want all true", got)
	}
}

func TestStopIsIdempotentAndUnregisters(t *testing.T) {
	h := watchhub.New[int, string](nil)
	ch, stop := h.Watch(1, "one")
	_, stop2 := h.Watch(2, "two")
	defer stop2()
	if got := sorted(h.Keys()); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("Keys: got %v, want [1 2]", got)
	}
	if got := sorted(h.Values()); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("Values: got %v, want [one two]", got)
	}
	stop()
	stop() // idempotent
	h.Notify(1)
	h.NotifyAll()
	if pending(ch) {
		t.Fatal("a stopped watch received a wake-up, want none")
	}
	if got := h.Keys(); !slices.Equal(got, []int{2}) {
		t.Fatalf("Keys after stop: got %v, want [2]", got)
	}
	if got := h.Values(); !slices.Equal(got, []string{"two"}) {
		t.Fatalf("Values after stop: got %v, want [two]", got)
	}
}

func TestValuesReportsOnePerKey(t *testing.T) {
	var h watchhub.Hub[string, string]
	_, s1 := h.Watch("h", "text")
	_, s2 := h.Watch("h", "text")
	defer s2()
	if got := h.Values(); !slices.Equal(got, []string{"text"}) {
		t.Fatalf("Values: got %v, want [text]", got)
	}
	s1()
	if got := h.Values(); !slices.Equal(got, []string{"text"}) {
		t.Fatalf("Values after one of two stops: got %v, want [text]", got)
	}
}

// listener is a start function that counts its runs and records its exit.
type listener struct {
	runs    atomic.Int32
	running chan struct{} // closed when the first run starts
	exited  atomic.Bool
}

func newListener() *listener { return &listener{running: make(chan struct{})} }

func (l *listener) start(ctx context.Context) {
	if l.runs.Add(1) == 1 {
		close(l.running)
	}
	<-ctx.Done()
	l.exited.Store(true)
}

func TestListenerStartsOnceAndCloseWaitsForIt(t *testing.T) {
	l := newListener()
	h := watchhub.New[string, struct{}](l.start)
	if got := l.runs.Load(); got != 0 {
		t.Fatalf("listener runs before any Watch: got %d, want 0", got)
	}
	_, stop1 := h.Watch("a", struct{}{})
	_, stop2 := h.Watch("b", struct{}{})
	stop1()
	stop2()
	_, stop3 := h.Watch("a", struct{}{}) // the listener outlives its watches
	defer stop3()
	<-l.running
	h.Close()
	if !l.exited.Load() {
		t.Fatal("Close returned before the listener did")
	}
	if got := l.runs.Load(); got != 1 {
		t.Fatalf("listener runs: got %d, want 1", got)
	}
	h.Close() // idempotent
}

func TestAfterCloseChannelsNeverReceive(t *testing.T) {
	l := newListener()
	h := watchhub.New[string, struct{}](l.start)
	before, stopBefore := h.Watch("k", struct{}{})
	h.Close()
	stopBefore() // still safe after Close
	after, stopAfter := h.Watch("k", struct{}{})
	defer stopAfter()
	h.Notify("k")
	h.NotifyAll()
	if pending(before) || pending(after) {
		t.Fatal("a channel received after Close, want none")
	}
	if got := h.Keys(); got != nil {
		t.Fatalf("Keys after Close: got %v, want nil", got)
	}
	if got := h.Values(); got != nil {
		t.Fatalf("Values after Close: got %v, want nil", got)
	}
}

func TestWatchAfterCloseStartsNothing(t *testing.T) {
	l := newListener()
	h := watchhub.New[string, struct{}](l.start)
	h.Close()
	_, stop := h.Watch("k", struct{}{})
	stop()
	h.Close()
	if got := l.runs.Load(); got != 0 {
		t.Fatalf("listener runs: got %d, want 0 (Watch after Close starts nothing)", got)
	}
}

// TestListenerNotifiesDuringClose: a listener that keeps notifying until
// its context ends does not deadlock Close.
func TestListenerNotifiesDuringClose(t *testing.T) {
	var h *watchhub.Hub[string, struct{}]
	started := make(chan struct{})
	h = watchhub.New[string, struct{}](func(ctx context.Context) {
		close(started)
		for ctx.Err() == nil {
			h.Notify("k")
			h.NotifyAll()
			_ = h.Keys()
		}
	})
	ch, stop := h.Watch("k", struct{}{})
	defer stop()
	<-started
	<-ch // the listener's wake-up arrives
	h.Close()
	pending(ch) // a wake-up sent before Close may still be buffered
	h.Notify("k")
	h.NotifyAll()
	if pending(ch) {
		t.Fatal("a channel received after Close, want none")
	}
}

func TestConcurrentUse(t *testing.T) {
	l := newListener()
	h := watchhub.New[int, int](l.start)
	var wg sync.WaitGroup
	work := func(g int, check bool) {
		for i := range 200 {
			ch, stop := h.Watch(i%5, g)
			h.Notify(i % 5)
			if check && !pending(ch) {
				t.Error("a registered watch missed a Notify of its key")
			}
			if i%7 == 0 {
				h.NotifyAll()
				_, _ = h.Keys(), h.Values()
			}
			stop()
			stop()
		}
	}
	for g := range 8 {
		wg.Go(func() { work(g, true) })
	}
	wg.Wait()
	// Then again, racing with two Close calls (after which Watch
	// registers nothing, so no delivery is checked).
	for g := range 8 {
		wg.Go(func() { work(g, false) })
	}
	for range 2 {
		wg.Go(h.Close)
	}
	wg.Wait()
	if !l.exited.Load() {
		t.Fatal("Close returned before the listener did")
	}
}

func sorted[T int | string](s []T) []T {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := watchhub.Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond}
		wait := func() time.Duration {
			t.Helper()
			start := time.Now()
			if !b.Wait(t.Context()) {
				t.Fatal("Wait: got false, want true")
			}
			return time.Since(start)
		}
		for i, want := range []time.Duration{10, 20, 40, 40} {
			if got := wait(); got != want*time.Millisecond {
				t.Fatalf("wait %d: got %v, want %v", i+1, got, want*time.Millisecond)
			}
		}
		b.Reset()
		if got := wait(); got != 10*time.Millisecond {
			t.Fatalf("wait after Reset: got %v, want 10ms", got)
		}

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		if b.Wait(ctx) {
			t.Fatal("Wait with a canceled ctx: got true, want false")
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Wait with a canceled ctx took %v, want 0", d)
		}
		if got := wait(); got != 20*time.Millisecond {
			t.Fatalf("wait after a canceled one: got %v, want 20ms (unchanged delay)", got)
		}
	})
}
