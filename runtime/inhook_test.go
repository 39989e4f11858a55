package runtime

import (
	"strings"
	"testing"

	"github.com/leasekit/lease/leaseapi"
)

// TestInHook: inHook is false off a hook and true on a hook's goroutine,
// also below more frames than its first stack buffer holds.
func TestInHook(t *testing.T) {
	if !strings.HasSuffix(hookCaller, "runtime.(*stateQueue).call") {
		t.Fatalf("hookCaller = %q, want the name of stateQueue.call", hookCaller)
	}
	if inHook() {
		t.Fatal("inHook on the test's goroutine")
	}
	h, err := NewKeyHasher([]byte("a test secret of at least the minimum length"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan [2]bool, 1)
	q := newStateQueue(func(StateChange) { got <- [2]bool{inHook(), deep(200)} }, h, nil)
	q.push(leaseapi.MustKey("test", "k"), StateChange{})
	if g := <-got; !g[0] || !g[1] {
		t.Fatalf("inHook in the hook: %v, 200 frames deeper: %v; want true, true", g[0], g[1])
	}
	q.wait()
}

// deep calls inHook n frames below its caller.
//
//go:noinline
func deep(n int) bool {
	if n == 0 {
		return inHook()
	}
	return deep(n - 1)
}

// BenchmarkStateChangeDelivery: one state change delivered by a delivery
// goroutine of its own (a client whose transitions come one at a time,
// each finding the queue idle). Close's hook check (inHook) adds nothing
// here; recording each delivery goroutine's id instead would double it.
func BenchmarkStateChangeDelivery(b *testing.B) {
	h, err := NewKeyHasher([]byte("a benchmark secret of at least the minimum length"))
	if err != nil {
		b.Fatal(err)
	}
	q := newStateQueue(func(StateChange) {}, h, nil)
	k := leaseapi.MustKey("bench", "k")
	b.ReportAllocs()
	for b.Loop() {
		q.push(k, StateChange{})
		q.mu.Lock()
		idle := q.idle // wait, without Close's hook check
		q.mu.Unlock()
		if idle != nil {
			<-idle
		}
	}
}
