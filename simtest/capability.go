package simtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// The capability checks: the rule of leaseapi.Capabilities says that a
// wrapper which forwards only the four Backend methods is never less safe
// than the store it wraps. These cases check it, for each backend, through
// the runtime that consumes the claims:
//
//   - the wrapper claims nothing (leaseapi.CapabilitiesOf is zero), and the
//     store's own claims are backed by its methods;
//   - an acquisition whose reply is lost behind the wrapper is never adopted
//     (ErrAmbiguousOutcome, nothing held, the grant expires at its TTL),
//     whatever the store claims; straight on the store it is adopted
//     exactly when the store claims Adopt;
//   - a call that hangs behind the wrapper is bounded by OperationTimeout
//     (NeverBlocks unknown means "may block"), even around a store that
//     claims NeverBlocks;
//   - managed renewal behind the wrapper works through plain Renew (no
//     batching is claimed, so none is attempted).
var capabilityCases = []conformanceCase{
	{"CapabilityClaimsAreBacked", testClaimsBacked},
	{"WrapperLostAcquireNotAdopted", testWrapperNoAdoption},
	{"WrapperHungCallBounded", testWrapperTimeouts},
	{"WrapperRenewsWithoutBatching", testWrapperRenews},
}

// FourMethods wraps b, forwarding only the four leaseapi.Backend methods:
// the shape of an application's logging or metrics wrapper that knows
// nothing of optional capabilities. It claims nothing. Safe for concurrent
// use if b is.
type FourMethods struct{ B leaseapi.Backend }

// TryAcquire implements leaseapi.Backend.
func (w FourMethods) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	return w.B.TryAcquire(ctx, k, owner, ttl)
}

// Renew implements leaseapi.Backend.
func (w FourMethods) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	return w.B.Renew(ctx, rec, ttl)
}

// Validate implements leaseapi.Backend.
func (w FourMethods) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	return w.B.Validate(ctx, rec)
}

// Release implements leaseapi.Backend.
func (w FourMethods) Release(ctx context.Context, rec leaseapi.Record) error {
	return w.B.Release(ctx, rec)
}

// capabilityPolicy is the policy of the capability checks: the harness TTL
// and the defaults derived from it.
func capabilityPolicy(t *testing.T, h Harness) leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: h.ttl()})
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

func newCapabilityClient(t *testing.T, b leaseapi.Backend) *runtime.Client {
	t.Helper()
	c, err := runtime.NewClient(b, runtime.ClientOptions{})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

func closeClient(t *testing.T, c *runtime.Client) {
	t.Helper()
	if err := c.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func testClaimsBacked(t *testing.T, h Harness, b leaseapi.Backend) {
	caps := leaseapi.CapabilitiesOf(b)
	if raw, ok := b.(leaseapi.Capable); ok && raw.Capabilities() != caps {
		t.Fatalf("the backend claims %+v but implements only %+v: every claim needs its method", raw.Capabilities(), caps)
	}
	if caps.Adopt && !caps.Inspect {
		t.Fatalf("claims %+v: Adopt without Inspect", caps)
	}
	if again := leaseapi.CapabilitiesOf(b); again != caps {
		t.Fatalf("claims changed between two reads: %+v, then %+v", caps, again)
	}
	if got := leaseapi.CapabilitiesOf(FourMethods{b}); got != (leaseapi.Capabilities{}) {
		t.Fatalf("a wrapper forwarding only the four methods claims %+v, want nothing", got)
	}
	// The fault wrapper forwards the claims, minus what it cannot keep: it
	// may block, and it has no RenewBatch.
	want := caps
	want.NeverBlocks, want.RenewBatch = false, false
	if got := leaseapi.CapabilitiesOf(NewFaulty(b)); got != want {
		t.Fatalf("the fault wrapper claims %+v around %+v, want %+v", got, caps, want)
	}
}

func testWrapperNoAdoption(t *testing.T, h Harness, b leaseapi.Backend) {
	caps := leaseapi.CapabilitiesOf(b)
	p := capabilityPolicy(t, h)

	// Straight on the store (through the fault injector, which forwards the
	// claims): adoption exactly when the store claims it.
	direct := NewFaulty(b)
	dc := newCapabilityClient(t, direct)
	defer closeClient(t, dc)
	kd := key(t, "capability/direct")
	direct.Inject(leaseapi.OperationAcquire, LoseReply)
	hd, err := dc.TryAcquire(t.Context(), kd, p)
	switch {
	case caps.Adopt && err != nil:
		t.Fatalf("lost reply on a store that claims Adopt: got %v, want the grant adopted", err)
	case caps.Adopt:
		if err := hd.Release(t.Context()); err != nil {
			t.Fatalf("Release of the adopted grant: %v", err)
		}
	default:
		wantKind(t, "lost reply on a store that does not claim Adopt", err, leaseapi.ErrAmbiguousOutcome)
	}

	// Behind the wrapper: never adopted, whatever the store claims.
	f := NewFaulty(b)
	c := newCapabilityClient(t, FourMethods{f})
	defer closeClient(t, c)
	k := key(t, "capability/wrapped")
	f.Inject(leaseapi.OperationAcquire, LoseReply)
	sent := time.Now()
	_, err = c.TryAcquire(t.Context(), k, p)
	wantKind(t, "lost reply behind a four-method wrapper", err, leaseapi.ErrAmbiguousOutcome)
	if c.Held() != 0 {
		t.Fatal("the runtime adopted a grant behind a wrapper that claims nothing")
	}
	if n := f.Calls(leaseapi.OperationInspect); n != 0 {
		t.Fatalf("the runtime inspected %d times behind a wrapper that claims nothing", n)
	}
	if in, ok := b.(leaseapi.Inspector); ok && caps.Inspect {
		if _, held, err := in.Inspect(t.Context(), k); err != nil || !held {
			t.Fatalf("Inspect after the lost acquisition: held %v, %v; want the orphan grant (or the test is vacuous)", held, err)
		}
	}
	// The orphan lives until its TTL (checked only while it surely lives:
	// real servers run on real time) and then the key is free again.
	_, err = c.TryAcquire(t.Context(), k, p)
	if time.Since(sent) < p.TTL()/2 {
		wantKind(t, "TryAcquire while the orphan lives", err, leaseapi.ErrContended)
	}
	pass(p.TTL() + h.slack())
	hk, err := c.TryAcquire(t.Context(), k, p)
	if err != nil {
		t.Fatalf("TryAcquire after the orphan's TTL: %v", err)
	}
	if err := hk.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func testWrapperTimeouts(t *testing.T, h Harness, b leaseapi.Backend) {
	p := capabilityPolicy(t, h)
	f := NewFaulty(b)
	c := newCapabilityClient(t, FourMethods{f})
	defer closeClient(t, c)
	f.Inject(leaseapi.OperationAcquire, Hang)
	start := time.Now()
	_, err := c.TryAcquire(context.Background(), key(t, "capability/hang"), p)
	took := time.Since(start)
	wantKind(t, "hung acquisition behind a four-method wrapper", err, leaseapi.ErrAmbiguousOutcome)
	// Never before OperationTimeout. On the wall clock a call whose
	// caller's context never ends shares its timer with the calls that end
	// in the same slot of time and may end up to 1/64 of the timeout late
	// (runtime's doc: Bounds); in simulation that is the only slack.
	if h.Simulated && (took < p.OperationTimeout() || took > p.OperationTimeout()+p.OperationTimeout()/64) {
		t.Fatalf("hung acquisition took %v, want OperationTimeout %v, at most 1/64 of it late", took, p.OperationTimeout())
	}
	if took < p.OperationTimeout() || took > p.OperationTimeout()+p.TTL() {
		t.Fatalf("hung acquisition took %v, want OperationTimeout %v (bounded by it)", took, p.OperationTimeout())
	}
}

// renewCounter forwards the four methods and signals each successful Renew.
type renewCounter struct {
	FourMethods
	mu      sync.Mutex
	n       int
	reached chan struct{} // closed at the second successful renewal
}

func (r *renewCounter) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	out, err := r.FourMethods.Renew(ctx, rec, ttl)
	if err == nil {
		r.mu.Lock()
		if r.n++; r.n == 2 {
			close(r.reached)
		}
		r.mu.Unlock()
	}
	return out, err
}

func testWrapperRenews(t *testing.T, h Harness, b leaseapi.Backend) {
	p := capabilityPolicy(t, h)
	w := &renewCounter{FourMethods: FourMethods{b}, reached: make(chan struct{})}
	c := newCapabilityClient(t, w)
	defer closeClient(t, c)
	hd, err := c.TryAcquire(t.Context(), key(t, "capability/renew"), p)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if _, err := hd.StartManaged(t.Context()); err != nil {
		t.Fatalf("StartManaged: %v", err)
	}
	// A liveness bound, not a latency figure: two renewals are due within
	// 2*RenewEvery.
	wait := time.NewTimer(10 * p.TTL())
	defer wait.Stop()
	select {
	case <-w.reached:
	case <-wait.C:
		t.Fatal("no two managed renewals through plain Renew behind the wrapper")
	}
	if st := hd.State(); st == leaseapi.StateLost {
		t.Fatalf("managed lease behind the wrapper: state %v", st)
	}
	if err := hd.Release(t.Context()); err != nil && leaseapi.Kind(err) != leaseapi.ErrLost {
		t.Fatalf("Release: %v", err)
	}
}
