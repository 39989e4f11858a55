package simtest

import (
	"context"
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// Deferred wraps a backend and models a server that executes requests late
// or answers them late, the faults a timeout cannot tell apart from a lost
// request:
//
//   - [Deferred.DeferApply]: the server accepts the request but executes it
//     only later (a Valkey CLIENT PAUSE WRITE, a PostgreSQL row lock held
//     by another transaction): the caller's context ends first, so the call
//     returns ErrAmbiguousOutcome (a read: ErrBackendUnavailable), and the
//     wrapped backend applies it afterwards, on its own goroutine;
//   - [Deferred.DelayReply]: the server executes the request at once but
//     its reply takes d to come back; if the caller's context ends first,
//     the call returns as above although it was applied.
//
// One-shot faults are queued per operation, as [Faulty.Inject] does; calls
// with nothing queued pass through. Late applications use a context that
// keeps the call's values (so a [Ledger] attributes them) but never ends.
// Deferred forwards Inspect (through the same machinery) and WatchRelease,
// and claims the wrapped backend's capabilities except NeverBlocks.
// Times are the time package's (simulated inside [Simulate]). It is safe for
// concurrent use.
type Deferred struct {
	b leaseapi.Backend

	// mu guards the fields below; no call to b happens under it.
	mu      sync.Mutex
	queued  map[leaseapi.Operation][]deferral
	pending []chan struct{} // one per late application; closed when it ran
	late    []LateApply
}

// LateApply reports one deferred execution.
type LateApply struct {
	Op        leaseapi.Operation
	SentAt    time.Time // when the caller sent it
	AppliedAt time.Time // when the backend executed it
	Err       error     // what the backend answered (nobody was listening)
}

type deferral struct {
	apply time.Duration // execute this long after the send; 0: at once
	reply time.Duration // deliver the reply this long after the execution
}

// NewDeferred wraps b.
func NewDeferred(b leaseapi.Backend) *Deferred {
	return &Deferred{b: b, queued: make(map[leaseapi.Operation][]deferral)}
}

// DeferApply makes the next call of op execute after (measured from its
// send) on a goroutine of its own, which exits once the execution is done,
// while the caller gets a lost reply when its context ends. Choose after
// longer than the caller's timeout to model execution after the timeout.
func (d *Deferred) DeferApply(op leaseapi.Operation, after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queued[op] = append(d.queued[op], deferral{apply: max(after, 1)})
}

// DelayReply makes the next call of op execute at once and answer after
// delay; a caller whose context ends first gets a lost reply.
func (d *Deferred) DelayReply(op leaseapi.Operation, delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queued[op] = append(d.queued[op], deferral{reply: delay})
}

// Drain waits until every deferred execution started so far has run, or
// ctx ends.
func (d *Deferred) Drain(ctx context.Context) error {
	d.mu.Lock()
	pending := append([]chan struct{}(nil), d.pending...)
	d.mu.Unlock()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Late returns the deferred executions that have run, in order.
func (d *Deferred) Late() []LateApply {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]LateApply(nil), d.late...)
}

func (d *Deferred) next(op leaseapi.Operation) (deferral, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := d.queued[op]
	if len(q) == 0 {
		return deferral{}, false
	}
	d.queued[op] = q[1:]
	return q[0], true
}

// do runs one call of op: apply calls the wrapped backend with the context
// it is given; mutation says which error a lost reply becomes.
func (d *Deferred) do(ctx context.Context, op leaseapi.Operation, mutation bool, apply func(context.Context) error) error {
	f, ok := d.next(op)
	if !ok {
		return apply(ctx)
	}
	lost := func() error {
		if mutation {
			return leaseapi.NewError(op.String(), leaseapi.ErrAmbiguousOutcome, "injected")
		}
		return leaseapi.NewError(op.String(), leaseapi.ErrBackendUnavailable, "injected")
	}
	quiet := context.WithoutCancel(ctx)
	if f.apply > 0 {
		sentAt := time.Now()
		done := make(chan struct{})
		d.mu.Lock()
		d.pending = append(d.pending, done)
		d.mu.Unlock()
		go func() {
			defer close(done)
			t := time.NewTimer(f.apply)
			<-t.C
			err := apply(quiet)
			d.mu.Lock()
			d.late = append(d.late, LateApply{Op: op, SentAt: sentAt, AppliedAt: time.Now(), Err: err})
			d.mu.Unlock()
		}()
		<-ctx.Done()
		return lost()
	}
	err := apply(quiet)
	t := time.NewTimer(f.reply)
	defer t.Stop()
	select {
	case <-t.C:
		return err
	case <-ctx.Done():
		return lost()
	}
}

// TryAcquire implements leaseapi.Backend.
func (d *Deferred) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	var rec leaseapi.Record
	err := d.do(ctx, leaseapi.OperationAcquire, true, func(ctx context.Context) error {
		r, err := d.b.TryAcquire(ctx, k, owner, ttl)
		rec = r
		return err
	})
	if err != nil {
		return leaseapi.Record{}, err
	}
	return rec, nil
}

// Renew implements leaseapi.Backend.
func (d *Deferred) Renew(ctx context.Context, in leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	var rec leaseapi.Record
	err := d.do(ctx, leaseapi.OperationRenew, true, func(ctx context.Context) error {
		r, err := d.b.Renew(ctx, in, ttl)
		rec = r
		return err
	})
	if err != nil {
		return leaseapi.Record{}, err
	}
	return rec, nil
}

// Validate implements leaseapi.Backend.
func (d *Deferred) Validate(ctx context.Context, in leaseapi.Record) (leaseapi.Record, error) {
	var rec leaseapi.Record
	err := d.do(ctx, leaseapi.OperationValidate, false, func(ctx context.Context) error {
		r, err := d.b.Validate(ctx, in)
		rec = r
		return err
	})
	if err != nil {
		return leaseapi.Record{}, err
	}
	return rec, nil
}

// Release implements leaseapi.Backend.
func (d *Deferred) Release(ctx context.Context, rec leaseapi.Record) error {
	return d.do(ctx, leaseapi.OperationRelease, true, func(ctx context.Context) error { return d.b.Release(ctx, rec) })
}

// Inspect implements leaseapi.Inspector when the wrapped backend does.
func (d *Deferred) Inspect(ctx context.Context, k leaseapi.Key) (rec leaseapi.Record, held bool, err error) {
	in, ok := d.b.(leaseapi.Inspector)
	if !ok {
		return leaseapi.Record{}, false, leaseapi.NewError("inspect", leaseapi.ErrInvalidState, "not supported")
	}
	var r leaseapi.Record
	var h bool
	err = d.do(ctx, leaseapi.OperationInspect, false, func(ctx context.Context) error {
		var err error
		r, h, err = in.Inspect(ctx, k)
		return err
	})
	if err != nil {
		return leaseapi.Record{}, false, err
	}
	return r, h, nil
}

// WatchRelease implements leaseapi.ReleaseWatcher when the wrapped backend
// does; otherwise the channel never fires.
func (d *Deferred) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if w, ok := d.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

// Capabilities implements leaseapi.Capable: the wrapped backend's claims,
// except NeverBlocks (an injected fault can make any call wait).
func (d *Deferred) Capabilities() leaseapi.Capabilities {
	c := leaseapi.CapabilitiesOf(d.b)
	c.NeverBlocks = false
	return c
}
