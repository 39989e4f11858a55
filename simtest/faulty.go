package simtest

import (
	"context"
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// Fault is one injected failure of one backend call.
type Fault uint8

const (
	// FailBeforeSend fails the call without reaching the backend:
	// ErrBackendUnavailable, nothing applied.
	FailBeforeSend Fault = iota + 1
	// LoseReply applies the call, then loses the reply: a mutation returns
	// ErrAmbiguousOutcome (a read ErrBackendUnavailable) although the
	// backend applied it.
	LoseReply
	// Hang blocks the call until its context ends and never applies it
	// (a blackholed request): ErrAmbiguousOutcome for a mutation,
	// ErrBackendUnavailable for a read.
	Hang
	// Stale fails the call with ErrStaleOwner without reaching the backend
	// (a forged proof of loss, for testing the loss path).
	Stale
)

// Mode is a standing fault applied to every call until changed.
type Mode uint8

const (
	// Pass forwards every call.
	Pass Mode = iota
	// Down fails every call before sending (an unavailability window).
	Down
	// Blackhole hangs every call until its context ends.
	Blackhole
	// LoseReplies applies every call and loses every reply.
	LoseReplies
)

// Faulty wraps a backend and injects faults: one-shot faults queued per
// operation, a standing Mode, and a per-call Delay. It forwards Inspect
// (subject to the standing mode) and WatchRelease, and claims the wrapped
// backend's capabilities except NeverBlocks. It records how many
// calls of each operation reached it. It is safe for concurrent use.
type Faulty struct {
	b leaseapi.Backend

	// mu guards the fields below; no call to b happens under it.
	mu      sync.Mutex
	queued  map[leaseapi.Operation][]Fault
	mode    Mode
	delay   time.Duration
	calls   map[leaseapi.Operation]int
	applied map[leaseapi.Operation]int
}

// NewFaulty wraps b; it starts in mode Pass.
func NewFaulty(b leaseapi.Backend) *Faulty {
	return &Faulty{
		b:       b,
		queued:  make(map[leaseapi.Operation][]Fault),
		calls:   make(map[leaseapi.Operation]int),
		applied: make(map[leaseapi.Operation]int),
	}
}

// Inject queues one-shot faults for the next calls of op, in order.
func (f *Faulty) Inject(op leaseapi.Operation, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued[op] = append(f.queued[op], faults...)
}

// SetMode sets the standing mode (one-shot faults take precedence).
func (f *Faulty) SetMode(m Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode = m
}

// SetDelay makes every call wait d (on the time package's clock, so
// simulated inside Simulate) before it is applied, honouring its context:
// a call whose context ends during the delay is not applied and returns as
// Hang does.
func (f *Faulty) SetDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// Calls returns how many calls of op were made.
func (f *Faulty) Calls(op leaseapi.Operation) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Applied returns how many calls of op reached the wrapped backend.
func (f *Faulty) Applied(op leaseapi.Operation) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied[op]
}

// next pops the fault for one call of op.
func (f *Faulty) next(op leaseapi.Operation) (Fault, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	if q := f.queued[op]; len(q) > 0 {
		f.queued[op] = q[1:]
		return q[0], f.delay
	}
	switch f.mode {
	case Down:
		return FailBeforeSend, f.delay
	case Blackhole:
		return Hang, f.delay
	case LoseReplies:
		return LoseReply, f.delay
	}
	return 0, f.delay
}

// do runs one call of op through the fault machinery. apply calls the
// wrapped backend; mutation says which error a lost reply becomes.
func (f *Faulty) do(ctx context.Context, op leaseapi.Operation, mutation bool, apply func() error) error {
	fault, delay := f.next(op)
	lost := func() error {
		if mutation {
			return leaseapi.NewError(op.String(), leaseapi.ErrAmbiguousOutcome, "injected")
		}
		return leaseapi.NewError(op.String(), leaseapi.ErrBackendUnavailable, "injected")
	}
	switch fault {
	case FailBeforeSend:
		return leaseapi.NewError(op.String(), leaseapi.ErrBackendUnavailable, "injected")
	case Stale:
		return leaseapi.NewError(op.String(), leaseapi.ErrStaleOwner, "injected")
	case Hang:
		<-ctx.Done()
		return lost()
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return lost()
		}
	}
	f.mu.Lock()
	f.applied[op]++
	f.mu.Unlock()
	// Apply with a context that cannot end mid-call: the injected outcome,
	// not the wrapped backend's ctx check, decides what the caller sees.
	err := apply()
	if fault == LoseReply {
		return lost()
	}
	return err
}

// TryAcquire implements leaseapi.Backend.
func (f *Faulty) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (rec leaseapi.Record, err error) {
	err = f.do(ctx, leaseapi.OperationAcquire, true, func() error {
		rec, err = f.b.TryAcquire(context.WithoutCancel(ctx), k, owner, ttl)
		return err
	})
	if err != nil {
		return leaseapi.Record{}, err
	}
	return rec, nil
}

// Renew implements leaseapi.Backend.
func (f *Faulty) Renew(ctx context.Context, in leaseapi.Record, ttl time.Duration) (rec leaseapi.Record, err error) {
	err = f.do(ctx, leaseapi.OperationRenew, true, func() error {
		rec, err = f.b.Renew(context.WithoutCancel(ctx), in, ttl)
		return err
	})
	if err != nil {
		return leaseapi.Record{}, err
	}
	return rec, nil
}

// Validate implements leaseapi.Backend.
func (f *Faulty) Validate(ctx context.Context, in leaseapi.Record) (rec leaseapi.Record, err error) {
	err = f.do(ctx, leaseapi.OperationValidate, false, func() error {
		rec, err = f.b.Validate(context.WithoutCancel(ctx), in)
		return err
	})
	if err != nil {
		return leaseapi.Record{}, err
	}
	return rec, nil
}

// Release implements leaseapi.Backend.
func (f *Faulty) Release(ctx context.Context, rec leaseapi.Record) error {
	return f.do(ctx, leaseapi.OperationRelease, true, func() error {
		return f.b.Release(context.WithoutCancel(ctx), rec)
	})
}

// Inspect implements leaseapi.Inspector when the wrapped backend does.
func (f *Faulty) Inspect(ctx context.Context, k leaseapi.Key) (rec leaseapi.Record, held bool, err error) {
	in, ok := f.b.(leaseapi.Inspector)
	if !ok {
		return leaseapi.Record{}, false, leaseapi.NewError("inspect", leaseapi.ErrInvalidState, "not supported")
	}
	err = f.do(ctx, leaseapi.OperationInspect, false, func() error {
		rec, held, err = in.Inspect(context.WithoutCancel(ctx), k)
		return err
	})
	return rec, held, err
}

// WatchRelease implements leaseapi.ReleaseWatcher when the wrapped backend
// does; otherwise the channel never fires.
func (f *Faulty) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if w, ok := f.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

// Capabilities implements leaseapi.Capable: the wrapped backend's claims,
// except NeverBlocks (an injected fault can make any call wait).
func (f *Faulty) Capabilities() leaseapi.Capabilities {
	c := leaseapi.CapabilitiesOf(f.b)
	c.NeverBlocks = false
	return c
}
