package runtime

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// ObservedBackend wraps a Backend and reports every call to observers as a
// [leaseapi.Event]. Build one with [NewObservedBackend] or
// [NewObservedBackendWith]; the zero ObservedBackend (and a nil one) is not
// usable: every operation returns ErrInvalidState, every read the zero
// answer. It is safe for concurrent use and claims exactly the capabilities
// of the backend it wraps ([ObservedBackend.Capabilities]).
//
// Observers never run on the call path: after a call, each idle observer
// gets the event on a goroutine of its own, started for that one event,
// which exits when Observe returns; while an observer is busy, its events
// are dropped and counted ([ObservedBackend.Dropped]). So a slow observer
// never delays the call that emitted the event (and so never the lease),
// and a panicking observer is recovered on its goroutine, counted
// ([ObservedBackend.Panics]) and its event dropped; the call's result is
// returned unchanged either way. An ObservedBackend owns no long-lived
// goroutine and needs no Close: once every Observe in progress has
// returned, no goroutine of it is left (an Observe that never returns keeps
// its goroutine, and that observer gets no further events).
type ObservedBackend struct {
	b         leaseapi.Backend
	clk       leaseapi.Clock
	observers []*observer
	// hasher turns a key into Event.KeyHash: ObserveOptions.KeyHasher, or
	// one with a random secret per ObservedBackend.
	hasher *KeyHasher
}

// observer is one registered Observer with its busy flag: at most one
// callback per observer runs at once; events arriving meanwhile are dropped
// and counted.
type observer struct {
	o leaseapi.Observer
	// busy is set by the call that hands an event over (CAS false→true)
	// and cleared by the delivery goroutine when Observe has returned.
	busy     atomic.Bool
	dropped  atomic.Uint64
	panicked atomic.Uint64
}

// ObserveOptions configures [NewObservedBackendWith]. The zero value is
// valid: the real clock and a random hash secret.
type ObserveOptions struct {
	// Clock times the calls (only its Now is used). Nil is the real clock.
	Clock leaseapi.Clock
	// KeyHasher makes Event.KeyHash. Nil (the default) draws a random
	// secret per ObservedBackend, so hashes compare only within it. Give
	// every process of a deployment a KeyHasher built from one shared
	// secret ([NewKeyHasher]) and the same lease has the same KeyHash
	// everywhere, so it can be followed across a fleet; pass the same
	// KeyHasher in ClientOptions and a handle's state changes carry the
	// hash its backend events carry.
	KeyHasher *KeyHasher
}

// NewObservedBackend returns b wrapped so that each call emits an event to
// every observer, after the call, off the calling goroutine (see
// [ObservedBackend]). A nil backend (or a typed nil pointer), a nil
// observer (or a typed nil, such as leaseapi.ObserverFunc(nil)) or more
// than leaseapi.MaxObservers observers is ErrInvalidState. clk times the
// calls (only its Now is used); a nil clock is the real clock. KeyHash is
// keyed by a random secret; [NewObservedBackendWith] takes a fleet-wide
// [KeyHasher].
func NewObservedBackend(b leaseapi.Backend, clk leaseapi.Clock, observers ...leaseapi.Observer) (leaseapi.Backend, error) {
	return NewObservedBackendWith(b, ObserveOptions{Clock: clk}, observers...)
}

// NewObservedBackendWith is [NewObservedBackend] with options.
func NewObservedBackendWith(b leaseapi.Backend, o ObserveOptions, observers ...leaseapi.Observer) (leaseapi.Backend, error) {
	const op = "observe"
	if b == nil || isNilPointer(b) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil backend")
	}
	if len(observers) > leaseapi.MaxObservers {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "too many observers")
	}
	ob := &ObservedBackend{b: b, clk: o.Clock}
	if ob.clk == nil {
		ob.clk = clock.New()
	}
	for _, o := range observers {
		if isNilObserver(o) {
			return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil observer")
		}
		ob.observers = append(ob.observers, &observer{o: o})
	}
	ob.hasher = o.KeyHasher
	if ob.hasher == nil {
		h, err := randomKeyHasher()
		if err != nil {
			return nil, leaseapi.Wrap(err, op)
		}
		ob.hasher = h
	}
	return ob, nil
}

// isNilObserver reports a nil Observer or one holding a typed nil (a nil
// func, pointer, map, channel, slice or interface), which would panic on
// its first event, after the call it reports had been made.
func isNilObserver(o leaseapi.Observer) bool {
	if o == nil {
		return true
	}
	switch v := reflect.ValueOf(o); v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// usable reports whether ob was built by NewObservedBackendWith.
func (ob *ObservedBackend) usable() bool { return ob != nil && ob.b != nil }

// Unwrap returns the wrapped backend (nil for an unusable ObservedBackend).
// The runtime never looks through it for capabilities: those come from
// [ObservedBackend.Capabilities].
func (ob *ObservedBackend) Unwrap() leaseapi.Backend {
	if !ob.usable() {
		return nil
	}
	return ob.b
}

// Dropped returns how many events were dropped because an observer was
// still busy, per observer in registration order.
func (ob *ObservedBackend) Dropped() []uint64 {
	if !ob.usable() {
		return nil
	}
	out := make([]uint64, len(ob.observers))
	for i, o := range ob.observers {
		out[i] = o.dropped.Load()
	}
	return out
}

// Panics returns how many Observe calls panicked (each was recovered and
// its event dropped), per observer in registration order.
func (ob *ObservedBackend) Panics() []uint64 {
	if !ob.usable() {
		return nil
	}
	out := make([]uint64, len(ob.observers))
	for i, o := range ob.observers {
		out[i] = o.panicked.Load()
	}
	return out
}

// KeyHash returns the hash events carry for k ([KeyHasher.Hash]); "" for
// an unusable ObservedBackend.
func (ob *ObservedBackend) KeyHash(k leaseapi.Key) string {
	if !ob.usable() {
		return ""
	}
	return ob.hasher.Hash(k)
}

// call is one finished backend call, to be turned into an Event on the
// delivery goroutine (the key hash is computed there, off the call path).
type call struct {
	op         leaseapi.Operation
	key        leaseapi.Key
	start, end time.Time
	err        error
}

func (ob *ObservedBackend) emit(op leaseapi.Operation, k leaseapi.Key, start time.Time, err error) {
	if len(ob.observers) == 0 {
		return
	}
	c := call{op: op, key: k, start: start, end: ob.clk.Now(), err: err}
	for _, o := range ob.observers {
		if !o.busy.CompareAndSwap(false, true) {
			o.dropped.Add(1)
			continue
		}
		go ob.deliver(o, c)
	}
}

// deliver runs on the goroutine emit started for one event; it exits when
// Observe returns (or panics: recovered, counted, the event dropped).
func (ob *ObservedBackend) deliver(o *observer, c call) {
	defer o.busy.Store(false)
	defer func() {
		if recover() != nil {
			o.panicked.Add(1)
		}
	}()
	o.o.Observe(leaseapi.Event{
		At:        c.end,
		Duration:  c.end.Sub(c.start),
		Operation: c.op,
		Outcome:   leaseapi.OutcomeOf(c.err),
		KeyHash:   ob.KeyHash(c.key),
	})
}

func errObservedUnusable(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "observed backend not made by NewObservedBackend")
}

// TryAcquire implements leaseapi.Backend.
func (ob *ObservedBackend) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	if !ob.usable() {
		return leaseapi.Record{}, errObservedUnusable("try acquire")
	}
	start := ob.clk.Now()
	rec, err := ob.b.TryAcquire(ctx, k, owner, ttl)
	ob.emit(leaseapi.OperationAcquire, k, start, err)
	return rec, err
}

// Renew implements leaseapi.Backend.
func (ob *ObservedBackend) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	if !ob.usable() {
		return leaseapi.Record{}, errObservedUnusable("renew")
	}
	start := ob.clk.Now()
	out, err := ob.b.Renew(ctx, rec, ttl)
	ob.emit(leaseapi.OperationRenew, rec.Key, start, err)
	return out, err
}

// Validate implements leaseapi.Backend.
func (ob *ObservedBackend) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	if !ob.usable() {
		return leaseapi.Record{}, errObservedUnusable("validate")
	}
	start := ob.clk.Now()
	out, err := ob.b.Validate(ctx, rec)
	ob.emit(leaseapi.OperationValidate, rec.Key, start, err)
	return out, err
}

// Release implements leaseapi.Backend.
func (ob *ObservedBackend) Release(ctx context.Context, rec leaseapi.Record) error {
	if !ob.usable() {
		return errObservedUnusable("release")
	}
	start := ob.clk.Now()
	err := ob.b.Release(ctx, rec)
	ob.emit(leaseapi.OperationRelease, rec.Key, start, err)
	return err
}

// Inspect implements leaseapi.Inspector; it is ErrInvalidState if the
// wrapped backend cannot inspect.
func (ob *ObservedBackend) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	if !ob.usable() {
		return leaseapi.Record{}, false, errObservedUnusable("inspect")
	}
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
// backend claims (leaseapi.CapabilitiesOf), no more; nothing for an
// unusable ObservedBackend. Inspect, WatchRelease and RenewBatch exist on
// every ObservedBackend, but the runtime uses them only when the wrapped
// backend claims them. Observers never run on the call path, so a
// NeverBlocks claim stays true through the wrapper.
func (ob *ObservedBackend) Capabilities() leaseapi.Capabilities {
	if !ob.usable() {
		return leaseapi.Capabilities{}
	}
	return leaseapi.CapabilitiesOf(ob.b)
}

// WatchRelease implements leaseapi.ReleaseWatcher; if the wrapped backend
// cannot notify (or ob is unusable), the channel never fires (waiters fall
// back to their retry timer).
func (ob *ObservedBackend) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if !ob.usable() {
		return nil, func() {}
	}
	if w, ok := ob.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

// RenewBatch implements leaseapi.BatchRenewer, falling back to one Renew
// per element if the wrapped backend cannot batch. It emits one event per
// element. On an unusable ObservedBackend every element is ErrInvalidState.
func (ob *ObservedBackend) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	out := make([]leaseapi.RenewResult, len(reqs))
	if !ob.usable() {
		for i := range out {
			out[i].Err = errObservedUnusable("renew batch")
		}
		return out
	}
	br, ok := ob.b.(leaseapi.BatchRenewer)
	if !ok {
		for i, r := range reqs {
			out[i].Record, out[i].Err = ob.Renew(ctx, r.Record, r.TTL)
		}
		return out
	}
	start := ob.clk.Now()
	out = br.RenewBatch(ctx, reqs)
	for i, r := range out {
		ob.emit(leaseapi.OperationRenew, reqs[i].Record.Key, start, r.Err)
	}
	return out
}
