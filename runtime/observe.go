package runtime

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// ObservedBackend wraps a Backend and reports every call to observers as a
// [leaseapi.Event]. Build one with [NewObservedBackend]. It is safe for
// concurrent use and claims exactly the capabilities of the backend it
// wraps ([ObservedBackend.Capabilities]).
type ObservedBackend struct {
	b         leaseapi.Backend
	clk       leaseapi.Clock
	observers []*observer
	// hashKey keys the HMAC that turns a key into Event.KeyHash: drawn
	// from crypto/rand per ObservedBackend, so hashes cannot be reversed by
	// guessing key names, and are stable only within this backend.
	hashKey [32]byte
}

// observer is one registered Observer with its busy flag: at most one
// callback per observer runs at once; events arriving meanwhile are dropped
// and counted.
type observer struct {
	o       leaseapi.Observer
	busy    atomic.Bool
	dropped atomic.Uint64
}

// NewObservedBackend returns b wrapped so that each call emits an event to
// every observer, after the call, on the calling goroutine, outside every
// lock. A nil backend, a nil observer or more than leaseapi.MaxObservers
// observers is ErrInvalidState. clk times the calls (only its Now is used);
// a nil clock is the real clock.
func NewObservedBackend(b leaseapi.Backend, clk leaseapi.Clock, observers ...leaseapi.Observer) (leaseapi.Backend, error) {
	const op = "observe"
	if b == nil {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil backend")
	}
	if len(observers) > leaseapi.MaxObservers {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "too many observers")
	}
	if clk == nil {
		clk = clock.New()
	}
	ob := &ObservedBackend{b: b, clk: clk}
	for _, o := range observers {
		if o == nil {
			return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil observer")
		}
		ob.observers = append(ob.observers, &observer{o: o})
	}
	if _, err := rand.Read(ob.hashKey[:]); err != nil {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "random source failed")
	}
	return ob, nil
}

// Unwrap returns the wrapped backend. The runtime never looks through it
// for capabilities: those come from [ObservedBackend.Capabilities].
func (ob *ObservedBackend) Unwrap() leaseapi.Backend { return ob.b }

// Dropped returns how many events were dropped because an observer was
// still busy, per observer in registration order.
func (ob *ObservedBackend) Dropped() []uint64 {
	out := make([]uint64, len(ob.observers))
	for i, o := range ob.observers {
		out[i] = o.dropped.Load()
	}
	return out
}

// KeyHash returns the hash events carry for k: the first 8 bytes of
// HMAC-SHA256(hashKey, k), hex encoded.
func (ob *ObservedBackend) KeyHash(k leaseapi.Key) string {
	m := hmac.New(sha256.New, ob.hashKey[:])
	m.Write([]byte(k.String()))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:8])
}

func (ob *ObservedBackend) emit(op leaseapi.Operation, k leaseapi.Key, start time.Time, err error) {
	if len(ob.observers) == 0 {
		return
	}
	now := ob.clk.Now()
	e := leaseapi.Event{At: now, Duration: now.Sub(start), Operation: op, Outcome: leaseapi.OutcomeOf(err), KeyHash: ob.KeyHash(k)}
	for _, o := range ob.observers {
		o.deliver(e)
	}
}

func (o *observer) deliver(e leaseapi.Event) {
	if !o.busy.CompareAndSwap(false, true) {
		o.dropped.Add(1)
		return
	}
	defer o.busy.Store(false)
	o.o.Observe(e)
}

// TryAcquire implements leaseapi.Backend.
func (ob *ObservedBackend) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	start := ob.clk.Now()
	rec, err := ob.b.TryAcquire(ctx, k, owner, ttl)
	ob.emit(leaseapi.OperationAcquire, k, start, err)
	return rec, err
}

// Renew implements leaseapi.Backend.
func (ob *ObservedBackend) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	start := ob.clk.Now()
	out, err := ob.b.Renew(ctx, rec, ttl)
	ob.emit(leaseapi.OperationRenew, rec.Key, start, err)
	return out, err
}

// Validate implements leaseapi.Backend.
func (ob *ObservedBackend) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	start := ob.clk.Now()
	out, err := ob.b.Validate(ctx, rec)
	ob.emit(leaseapi.OperationValidate, rec.Key, start, err)
	return out, err
}

// Release implements leaseapi.Backend.
func (ob *ObservedBackend) Release(ctx context.Context, rec leaseapi.Record) error {
	start := ob.clk.Now()
	err := ob.b.Release(ctx, rec)
	ob.emit(leaseapi.OperationRelease, rec.Key, start, err)
	return err
}

// Inspect implements leaseapi.Inspector; it is ErrInvalidState if the
// wrapped backend cannot inspect.
func (ob *ObservedBackend) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	in, ok := ob.b.(leaseapi.Inspector)
	if !ok {
		return leaseapi.Record{}, false, leaseapi.NewError("inspect", leaseapi.ErrInvalidState, "not supported")
	}
	start := ob.clk.Now()
	rec, held, err := in.Inspect(ctx, k)
	ob.emit(leaseapi.OperationInspect, k, start, err)
	return rec, held, err
}

// Capabilities implements leaseapi.Capable: exactly what the wrapped
// backend claims (leaseapi.CapabilitiesOf), no more. Inspect, WatchRelease
// and RenewBatch exist on every ObservedBackend, but the runtime uses them
// only when the wrapped backend claims them.
func (ob *ObservedBackend) Capabilities() leaseapi.Capabilities {
	return leaseapi.CapabilitiesOf(ob.b)
}

// WatchRelease implements leaseapi.ReleaseWatcher; if the wrapped backend
// cannot notify, the channel never fires (waiters fall back to their retry
// timer).
func (ob *ObservedBackend) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if w, ok := ob.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

// RenewBatch implements leaseapi.BatchRenewer, falling back to one Renew
// per element if the wrapped backend cannot batch. It emits one event per
// element.
func (ob *ObservedBackend) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	br, ok := ob.b.(leaseapi.BatchRenewer)
	if !ok {
		out := make([]leaseapi.RenewResult, len(reqs))
		for i, r := range reqs {
			out[i].Record, out[i].Err = ob.Renew(ctx, r.Record, r.TTL)
		}
		return out
	}
	start := ob.clk.Now()
	out := br.RenewBatch(ctx, reqs)
	for i, r := range out {
		ob.emit(leaseapi.OperationRenew, reqs[i].Record.Key, start, r.Err)
	}
	return out
}
