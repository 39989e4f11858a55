package runtime_test

import (
	"bytes"
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

// nilPtrObserver is an Observer implemented on a pointer; a nil one
// dereferences its receiver.
type nilPtrObserver struct{ n int }

func (o *nilPtrObserver) Observe(leaseapi.Event) { o.n++ }

// TestNilObserversRejected is the regression test of the finding: a
// typed-nil observer (leaseapi.ObserverFunc(nil)) passed NewObservedBackend
// and the first call panicked after the grant was made, orphaning it. Every
// nil form is ErrInvalidState at construction, and so is a typed-nil
// backend.
func TestNilObserversRejected(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	for name, o := range map[string]leaseapi.Observer{
		"nil":                        nil,
		"leaseapi.ObserverFunc(nil)": leaseapi.ObserverFunc(nil),
		"nil pointer":                (*nilPtrObserver)(nil),
	} {
		_, err := runtime.NewObservedBackend(store, nil, leaseapi.ObserverFunc(func(leaseapi.Event) {}), o)
		wantKind(t, name+" observer", err, leaseapi.ErrInvalidState)
	}
	_, err := runtime.NewObservedBackend((*memory.Store)(nil), nil)
	wantKind(t, "typed-nil backend", err, leaseapi.ErrInvalidState)
}

// TestPanickingObserverCannotHurtALease: an observer that panics on every
// event is recovered on its own goroutine and counted; the calls it
// observes (acquisition on the caller, managed renewal on the supervisor)
// return their results unchanged, and a well-behaved observer beside it
// still gets its events.
func TestPanickingObserverCannotHurtALease(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		var mu sync.Mutex
		seen := 0
		ob, err := runtime.NewObservedBackend(store, nil,
			leaseapi.ObserverFunc(func(leaseapi.Event) { panic("observer bug") }),
			leaseapi.ObserverFunc(func(leaseapi.Event) { mu.Lock(); seen++; mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		c, err := runtime.NewClient(ob, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		h := mustAcquire(t, c, testKey(t, "panicking-observer"), p)
		simtest.Settle()
		if _, err := h.StartManaged(t.Context()); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			simtest.Advance(p.RenewEvery())
		}
		wantState(t, "managed lease observed by a panicking observer", h, leaseapi.StateActive)
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Settle()
		o := ob.(*runtime.ObservedBackend)
		panics, dropped := o.Panics(), o.Dropped()
		if panics[0] < 7 || panics[1] != 0 { // acquire, 5 renewals, release
			t.Fatalf("panics: got %v, want >= 7 for the panicking observer and 0 for the other", panics)
		}
		mu.Lock()
		defer mu.Unlock()
		if uint64(seen)+dropped[1] < 7 || seen == 0 {
			t.Fatalf("well-behaved observer: saw %d, dropped %d; want every event seen or counted", seen, dropped[1])
		}
	})
}

// TestSlowObserverNeverSlowsALease is the regression test of the finding:
// a 10 ms observer delayed the very call that emitted the event, so with a
// 10 ms TTL acquisitions failed "grant arrived after its deadline" (308 of
// them in the report). Now the observer runs off the call path: every
// acquisition succeeds in zero simulated time and the observer's busy time
// only drops events.
func TestSlowObserverNeverSlowsALease(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, _ := memory.New(memory.Options{})
		slow := leaseapi.ObserverFunc(func(leaseapi.Event) { time.Sleep(10 * time.Millisecond) })
		ob, err := runtime.NewObservedBackend(store, nil, slow)
		if err != nil {
			t.Fatal(err)
		}
		c, err := runtime.NewClient(ob, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Millisecond})
		k := testKey(t, "slow-observer-ttl")
		const n = 1000
		for i := range n {
			start := time.Now()
			h, err := c.TryAcquire(t.Context(), k, p)
			if err != nil {
				t.Fatalf("acquisition %d with a 10ms observer and a 10ms TTL: %v", i, err)
			}
			if took := time.Since(start); took != 0 {
				t.Fatalf("acquisition %d took %v of simulated time, want 0 (the observer is off the call path)", i, took)
			}
			if err := h.Release(t.Context()); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
			if i%100 == 99 {
				simtest.Advance(10 * time.Millisecond) // let the observer finish now and then
			}
		}
		simtest.Advance(10 * time.Millisecond)
		if d := ob.(*runtime.ObservedBackend).Dropped()[0]; d == 0 || d >= 2*n {
			t.Fatalf("dropped: got %d of %d events, want some dropped while the observer was busy, not all", d, 2*n)
		}
	})
}

// TestFleetKeyHash: with one KeyHasher built from a shared secret, two
// observed backends (two processes of a fleet) give one lease the same
// KeyHash, in KeyHash and in events, and a client given the same KeyHasher
// puts that hash in its state changes; different keys hash differently;
// without a KeyHasher the hash is per backend.
func TestFleetKeyHash(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		secret := bytes.Repeat([]byte{0x5a}, runtime.MinKeyHashSecret)
		k1, k2 := testKey(t, "fleet-a"), testKey(t, "fleet-b")
		var mu sync.Mutex
		var hashes, changes []string
		rec := leaseapi.ObserverFunc(func(e leaseapi.Event) { mu.Lock(); hashes = append(hashes, e.KeyHash); mu.Unlock() })
		var obs []*runtime.ObservedBackend
		for range 2 {
			hasher, err := runtime.NewKeyHasher(secret) // one per process, same secret
			if err != nil {
				t.Fatal(err)
			}
			store, _ := memory.New(memory.Options{})
			b, err := runtime.NewObservedBackendWith(store, runtime.ObserveOptions{KeyHasher: hasher}, rec)
			if err != nil {
				t.Fatal(err)
			}
			obs = append(obs, b.(*runtime.ObservedBackend))
			c, err := runtime.NewClient(b, runtime.ClientOptions{KeyHasher: hasher, OnStateChange: func(sc runtime.StateChange) {
				mu.Lock()
				changes = append(changes, sc.KeyHash)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatal(err)
			}
			h := mustAcquire(t, c, k1, basicPolicy(t))
			simtest.Settle()
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			simtest.Settle()
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		want := obs[0].KeyHash(k1)
		if h1 := obs[1].KeyHash(k1); want == "" || want != h1 {
			t.Fatalf("one lease on two processes with one secret: %q and %q, want equal", want, h1)
		}
		if want == obs[0].KeyHash(k2) {
			t.Fatal("two keys share a hash")
		}
		mu.Lock()
		if len(hashes) == 0 || len(changes) == 0 {
			t.Fatalf("got %d events and %d state changes, want some of each", len(hashes), len(changes))
		}
		for _, h := range append(hashes, changes...) {
			if h != want {
				t.Fatalf("event and state-change hashes: got %q and %q, want all %q", hashes, changes, want)
			}
		}
		mu.Unlock()
		store, _ := memory.New(memory.Options{})
		a, _ := runtime.NewObservedBackend(store, nil)
		b, _ := runtime.NewObservedBackend(store, nil)
		if a.(*runtime.ObservedBackend).KeyHash(k1) == b.(*runtime.ObservedBackend).KeyHash(k1) {
			t.Fatal("without a KeyHasher, two observed backends share a hash (want a random secret each)")
		}
	})
}

// BenchmarkObservedPair is one TryAcquire+Release pair on the memory store
// through an ObservedBackend with 0, 1 and 16 observers: the cost an
// observer adds to the call path (a CAS and a goroutine start per idle
// observer; the key hash and the callback run off the path).
func BenchmarkObservedPair(b *testing.B) {
	for _, n := range []int{0, 1, 16} {
		b.Run(fmt.Sprintf("observers=%d", n), func(b *testing.B) {
			store, _ := memory.New(memory.Options{})
			obs := make([]leaseapi.Observer, n)
			for i := range obs {
				obs[i] = leaseapi.ObserverFunc(func(leaseapi.Event) {})
			}
			ob, err := runtime.NewObservedBackend(store, nil, obs...)
			if err != nil {
				b.Fatal(err)
			}
			k := leaseapi.MustKey("bench", "observed")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				rec, err := ob.TryAcquire(ctx, k, "owner-0123456789abcdef", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := ob.Release(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
