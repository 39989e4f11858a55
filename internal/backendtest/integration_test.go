package backendtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/leaseapi"
)

// TestMain is this package's only TestMain (Go allows one per test binary):
// it checks for leaks and stops the servers ForEachReal started.
func TestMain(m *testing.M) { Main(m) }

func TestRandomName(t *testing.T) {
	a, b := RandomName("x-"), RandomName("x-")
	if !strings.HasPrefix(a, "x-") || len(a) != len("x-")+12 {
		t.Errorf("RandomName = %q; want x- and 12 hex digits", a)
	}
	if a == b {
		t.Errorf("RandomName twice = %q; want different names", a)
	}
}

func TestPause(t *testing.T) {
	if err := Pause(t.Context(), time.Millisecond); err != nil {
		t.Errorf("Pause until d passed = %v; want nil", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Pause(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Pause with a canceled ctx = %v; want context.Canceled", err)
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestWantKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		fail bool
	}{
		{"match", leaseapi.NewError("op", leaseapi.ErrInvalidState, "detail"), false},
		{"other kind", leaseapi.NewError("op", leaseapi.ErrLost, "detail"), true},
		{"nil", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &fatalRecorder{TB: t}
			WantKind(r, "call", tc.err, leaseapi.ErrInvalidState)
			if got := r.msg != ""; got != tc.fail {
				t.Errorf("WantKind failed the test: got %v (%q), want %v", got, r.msg, tc.fail)
			}
		})
	}
}

func TestPolicyAndMemoryStore(t *testing.T) {
	p := Policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, RenewEvery: 3 * time.Second, OperationTimeout: time.Second})
	if p.TTL() != 10*time.Second {
		t.Errorf("TTL = %v; want 10s", p.TTL())
	}
	r := &fatalRecorder{TB: t}
	Policy(r, leaseapi.PolicyOptions{TTL: -time.Second})
	if r.msg == "" {
		t.Error("Policy accepted a negative TTL")
	}
	if MemoryStore(t) == nil {
		t.Error("MemoryStore = nil")
	}
}

// TestForEachReal checks that both real backends run, that stores made in
// one subtest share their namespace (one sees the other's lease) and that
// each subtest gets a namespace of its own.
func TestForEachReal(t *testing.T) {
	key := leaseapi.MustKey("backendtest", "k")
	var mu sync.Mutex
	var ran []string
	ForEachReal(t, "bt", func(t *testing.T, newBackend NewBackend) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		a, b := newBackend(t), newBackend(t)
		rec, err := a.TryAcquire(ctx, key, "owner-a", 10*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire in a fresh namespace: %v", err)
		}
		if _, err := b.Validate(ctx, rec); err != nil {
			t.Errorf("Validate through a second store: %v; want the lease held", err)
		}
		if _, err := b.TryAcquire(ctx, key, "owner-b", 10*time.Second); err == nil {
			t.Error("TryAcquire through a second store succeeded; want the lease held by owner-a")
		}
		mu.Lock()
		ran = append(ran, t.Name())
		mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	if testenv.RequireBackends() && len(ran) != 2 {
		t.Errorf("ran %v; want the valkey and postgres subtests", ran)
	}
}
