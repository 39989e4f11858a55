package runtime_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Options a client may be given that are nil pointers in a non-nil
// interface: each would panic on its first call.
type (
	ptrOwners  struct{ n int }
	ptrSleeper struct{ d time.Duration }
	ptrRetry   struct{ d time.Duration }
	ptrTracer  struct{ n int }
)

func (p *ptrOwners) NewOwner() (string, error) { p.n++; return fmt.Sprintf("owner-%016d", p.n), nil }
func (p *ptrSleeper) Sleep(context.Context, time.Duration, <-chan struct{}) error {
	p.d++
	return nil
}
func (p *ptrRetry) Jitter(time.Duration) time.Duration { return p.d }
func (p *ptrTracer) TraceStart(ctx context.Context, _ runtime.TraceStart) context.Context {
	p.n++
	return ctx
}
func (p *ptrTracer) TraceEnd(context.Context, runtime.TraceEnd) { p.n++ }

// FuzzNewClient feeds NewClient any bounds, with the telemetry switches
// and, in turn, a typed-nil Clock, Owners, Sleeper, Retry or Tracer, or a
// KeyHasher that NewKeyHasher did not make. Nothing may panic. The options
// are accepted exactly when every bound is within its documented maximum
// and no option is a nil pointer; a rejection is ErrInvalidState only. An
// accepted client enforces its bounds: with MaxHeld and MaxManaged folded
// to 1..4, it holds exactly MaxHeld handles (one more TryAcquire is
// ErrCapacity, before any backend call), manages exactly MaxManaged of
// them, and closes cleanly. The seeds run with every go test; the long
// tier runs, for instance:
//
//	go test -run '^$' -fuzz '^FuzzNewClient$' -fuzztime 30s ./runtime
func FuzzNewClient(f *testing.F) {
	for _, s := range [][4]uint32{
		{0, 0, 0, 0},
		{1, 1, 1, 0},
		{runtime.MaxClientWaiters, runtime.MaxClientManaged, runtime.MaxClientHeld, 3},
		{runtime.MaxClientWaiters + 1, 0, 0, 0},
		{0, runtime.MaxClientManaged + 1, 0, 0},
		{0, 0, runtime.MaxClientHeld + 1, 0},
		{math.MaxUint32, math.MaxUint32, math.MaxUint32, 0},
		{0, 0, 0, 1 << 2}, {0, 0, 0, 2 << 2}, {0, 0, 0, 3 << 2}, {0, 0, 0, 4 << 2}, {0, 0, 0, 5 << 2}, {0, 0, 0, 6 << 2},
		{3, 2, 4, 7 << 2},
	} {
		f.Add(s[0], s[1], s[2], uint8(s[3]))
	}
	fixed := backendtest.Messages(newClientErr(runtime.ClientOptions{MaxWaiters: math.MaxUint32}),
		newClientErr(runtime.ClientOptions{MaxManaged: math.MaxUint32}), newClientErr(runtime.ClientOptions{MaxHeld: math.MaxUint32}),
		newClientErr(runtime.ClientOptions{Clock: (*clock.Mock)(nil)}))
	p := backendtest.Policy(f, leaseapi.PolicyOptions{TTL: time.Minute})
	f.Fuzz(func(t *testing.T, waiters, managed, held uint32, flags uint8) {
		o := runtime.ClientOptions{MaxWaiters: waiters, MaxManaged: managed, MaxHeld: held, NoBatching: flags&1 != 0, NoMetrics: flags&2 != 0}
		typedNil := true
		switch flags >> 2 {
		case 1:
			o.Clock = (*clock.Mock)(nil)
		case 2:
			o.Owners = (*ptrOwners)(nil)
		case 3:
			o.Sleeper = (*ptrSleeper)(nil)
		case 4:
			o.Retry = (*ptrRetry)(nil)
		case 5:
			o.Tracer = (*ptrTracer)(nil)
		case 6:
			o.KeyHasher = new(runtime.KeyHasher)
		default:
			typedNil = false
		}
		valid := !typedNil && waiters <= runtime.MaxClientWaiters && managed <= runtime.MaxClientManaged && held <= runtime.MaxClientHeld
		c, err := runtime.NewClient(backendtest.MemoryStore(t), o)
		if !valid {
			if c != nil {
				t.Fatalf("NewClient(%+v) returned a client with error %v", o, err)
			}
			backendtest.WantRejected(t, "NewClient", err, fixed)
			return
		}
		if err != nil || c == nil {
			t.Fatalf("NewClient(%+v): %v, want a client (the bounds are in range)", o, err)
		}
		if err := c.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		o.MaxHeld, o.MaxManaged = held%4+1, managed%4+1
		checkBounds(t, o, p)
	})
}

// checkBounds acquires one handle more than o.MaxHeld and starts managed
// renewal on each, checking that exactly the bounds succeed.
func checkBounds(t *testing.T, o runtime.ClientOptions, p leaseapi.Policy) {
	c, err := runtime.NewClient(backendtest.MemoryStore(t), o)
	if err != nil {
		t.Fatalf("NewClient(%+v): %v", o, err)
	}
	ctx := t.Context()
	var hs []*runtime.Handle
	for i := range int(o.MaxHeld) + 1 {
		h, err := c.TryAcquire(ctx, leaseapi.MustKey("fuzz", fmt.Sprint(i)), p)
		if i == int(o.MaxHeld) {
			backendtest.WantKind(t, "TryAcquire past MaxHeld", err, leaseapi.ErrCapacity)
			break
		}
		if err != nil {
			t.Fatalf("TryAcquire %d of MaxHeld %d: %v", i+1, o.MaxHeld, err)
		}
		hs = append(hs, h)
	}
	if got := c.Held(); got != int(o.MaxHeld) {
		t.Fatalf("Held() = %d, want MaxHeld %d", got, o.MaxHeld)
	}
	var ms []*runtime.Managed
	for i, h := range hs {
		m, err := h.StartManaged(ctx)
		if i >= int(o.MaxManaged) {
			backendtest.WantKind(t, "StartManaged past MaxManaged", err, leaseapi.ErrCapacity)
			continue
		}
		if err != nil {
			t.Fatalf("StartManaged %d of MaxManaged %d: %v", i+1, o.MaxManaged, err)
		}
		ms = append(ms, m)
	}
	if got := c.Managed(); got != len(ms) {
		t.Fatalf("Managed() = %d, want %d", got, len(ms))
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func newClientErr(o runtime.ClientOptions) error {
	s, err := memory.New(memory.Options{})
	if err != nil {
		return err
	}
	_, err = runtime.NewClient(s, o)
	return err
}
