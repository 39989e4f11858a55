package queue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/lifecycle"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Bounds and defaults.
const (
	// MaxConcurrency is the largest Options.Concurrency.
	MaxConcurrency = 10_000
	// DefaultKeyNamespace is the key namespace when Options.KeyNamespace is
	// empty.
	DefaultKeyNamespace = "queue"
	// MinBackoff is the shortest pause after a failed Receive or a
	// delivery that is no item (an empty or unusable ID): a smaller
	// Options.Backoff (or Policy.RenewRetry, its default) is raised to it,
	// so a source that fails at once, or answers at once with nothing,
	// costs a worker at most one call per MinBackoff instead of a spinning
	// core.
	MinBackoff = time.Millisecond
)

// StopMode says what Stop does with items being processed. It is a value,
// safe for concurrent use.
type StopMode uint8

const (
	// Finish (the zero value) lets in-flight handlers finish (and ack or
	// nack as usual) while Stop waits; only if Stop's ctx ends first are
	// their contexts canceled.
	Finish StopMode = iota
	// Abandon cancels in-flight handlers' contexts at once; an item whose
	// handler then fails is nacked (redelivered at once to another worker).
	Abandon
)

// String names the mode.
func (m StopMode) String() string {
	switch m {
	case Finish:
		return "finish"
	case Abandon:
		return "abandon"
	}
	return "invalid"
}

// Outcome is what a worker did with one delivery. It is a value, safe for
// concurrent use.
type Outcome uint8

const (
	// Acked: the handler succeeded and the item was acknowledged while
	// the item's lease was confirmed held.
	Acked Outcome = iota + 1
	// Nacked: the handler failed (Event.Err), or the worker stopped before
	// handling it; the delivery was given back for redelivery.
	Nacked
	// Contended: another worker holds the item's lease (it is processing a
	// concurrent delivery); this delivery was left alone.
	Contended
	// Lost: the item's lease was lost or could not be confirmed after the
	// handler ran: the item was neither acked nor nacked (the source
	// redelivers it after its visibility timeout).
	Lost
	// Failed: the item's lease could not be taken, the item's ID is empty
	// or not a valid key name (the worker then pauses Backoff), the ack or
	// nack failed, Receive failed (ItemID empty; the worker pauses
	// Backoff), or a callback of the worker (Options.OnEvent, a Source
	// method) panicked (Err is a *PanicError); Event.Err says why.
	Failed
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Nacked:
		return "nacked"
	case Contended:
		return "contended"
	case Lost:
		return "lost"
	case Failed:
		return "failed"
	}
	return "invalid"
}

// Event reports what a worker did with one delivery. It is a value, handed
// to Options.OnEvent and not kept.
type Event struct {
	// ItemID is the item's ID (empty for a Receive failure).
	ItemID string
	// Outcome is what happened.
	Outcome Outcome
	// Token is the item lease's token when the handler ran.
	Token leaseapi.Token
	// Err is the handler's error (Nacked, Lost) or the failure (Failed).
	Err error
	// ReleaseErr is the error of releasing the item's lease after the
	// handler ran, nil when it was released (or no lease was taken). A
	// lease whose release failed (ErrBackendUnavailable: it is still held;
	// ErrAmbiguousOutcome: it may be) ends at its TTL, and until then a
	// redelivery of the item is Contended.
	ReleaseErr error
	// At is the local time of the event.
	At time.Time
}

// Options configures a [Worker]. New copies it; the value is not kept.
type Options struct {
	// Concurrency is how many items are processed at once (0: 1; at most
	// MaxConcurrency). Each slot is one goroutine that receives an item and
	// processes it.
	Concurrency int
	// Policy is the item leases' policy. Required.
	Policy leaseapi.Policy
	// Handler processes one item under its lease: ctx is canceled when the
	// lease is lost or expires (context.Cause says why) and, in Abandon
	// mode, when the worker stops; token is the lease's fencing token. It
	// returns nil to ack and an error to nack. A panic is recovered and
	// treated as an error (a *PanicError). Required.
	Handler func(ctx context.Context, it Item, token leaseapi.Token) error
	// KeyNamespace is the namespace of item lease keys; an item's key is
	// "<namespace>/<item ID>". Empty means DefaultKeyNamespace. Workers
	// that may receive the same items must share it.
	KeyNamespace string
	// OnStop is Finish (zero) or Abandon.
	OnStop StopMode
	// Clock drives pauses and ack deadlines. Nil is the real clock.
	Clock clock.Clock
	// OnEvent, if set, is called once per delivery (and per failed
	// Receive) on the worker goroutine that handled it, after the item's
	// lease was released. It must not block for long. A panic in it is
	// recovered and reported once more to OnEvent as a Failed event whose
	// Err is a *PanicError (a panic in that call is dropped); the worker
	// goes on.
	OnEvent func(Event)
	// Backoff is the pause after a failed Receive, a delivery that is no
	// item, or an item whose lease the backend could not give (other than
	// contention). Zero means Policy.RenewRetry(). Negative is invalid;
	// below MinBackoff is raised to MinBackoff.
	Backoff time.Duration
}

// PanicError reports a handler that panicked (the item is nacked), or
// another callback of the worker that panicked: Options.OnEvent or a
// Source method (Callback names it; Receive is then treated as a failed
// Receive, Ack and Nack as failed). It is immutable once made and safe for
// concurrent use. It matches leaseapi.ErrInvalidState (the callback broke
// its contract). Its message never contains the panic value; Value has it.
type PanicError struct {
	// Value is what the callback passed to panic.
	Value any
	// Callback is "" for the handler, or "OnEvent", "Receive", "Ack",
	// "Nack".
	Callback string
}

// Error implements error.
func (e *PanicError) Error() string {
	if e.Callback != "" {
		return "lease: queue: " + e.Callback + " panicked"
	}
	return "lease: queue: handler panicked"
}

// Unwrap makes the error match leaseapi.ErrInvalidState.
func (e *PanicError) Unwrap() error { return leaseapi.ErrInvalidState }

// String describes the panic value for logs that may contain it.
func (e *PanicError) String() string {
	if e.Callback != "" {
		return fmt.Sprintf("%s panicked: %v", e.Callback, e.Value)
	}
	return fmt.Sprintf("handler panicked: %v", e.Value)
}

// Worker consumes a [Source], processing each item under a managed lease
// keyed by the item's ID. Build it with [New], then Start and Stop. It is
// safe for concurrent use. The zero Worker (and a nil *Worker) is not
// usable: its methods return ErrInvalidState. It owns neither the client nor the source:
// close them after Stop. A client closed under a running Worker fails every
// item's lease (Failed events matching ErrInvalidState; the source
// redelivers the items) until Stop.
type Worker struct {
	c       *runtime.Client
	src     Source
	o       Options
	ns      string
	clk     clock.Clock
	backoff time.Duration

	// recv ends the receive loops (canceled by Stop); work is the base of
	// every handler's ctx (canceled by Stop in Abandon mode, or when Stop's
	// ctx ends). Both live from New to Stop.
	recv, work             context.Context
	cancelRecv, cancelWork context.CancelFunc

	// life runs the worker goroutines; Stop waits on the channel it
	// returns.
	life lifecycle.Life

	// mu guards stopErrs: the release failures of items that were in
	// flight when Stop was called; Stop returns them.
	mu       sync.Mutex
	stopErrs []error
}

// New returns a Worker that takes item leases through client and items
// from src. It starts nothing. Errors (ErrInvalidState): a nil client or
// source, a zero policy, a nil handler, a concurrency out of range, an
// invalid namespace, an unknown stop mode, a negative backoff.
func New(client *runtime.Client, src Source, o Options) (*Worker, error) {
	const op = "new worker"
	bad := func(detail string) (*Worker, error) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, detail)
	}
	switch {
	case client == nil:
		return bad("nil client")
	case src == nil || isNilPointer(src):
		return bad("nil source")
	case o.Policy.Check() != nil:
		return bad("zero policy")
	case o.Handler == nil:
		return bad("nil handler")
	case o.Concurrency < 0 || o.Concurrency > MaxConcurrency:
		return bad("concurrency out of range")
	case o.OnStop != Finish && o.OnStop != Abandon:
		return bad("unknown stop mode")
	case o.Backoff < 0:
		return bad("negative backoff")
	}
	ns := o.KeyNamespace
	if ns == "" {
		ns = DefaultKeyNamespace
	}
	if _, err := leaseapi.NewKey(ns, "x"); err != nil {
		return bad("invalid key namespace")
	}
	w := &Worker{c: client, src: src, o: o, ns: ns, clk: o.Clock, backoff: o.Backoff}
	if w.o.Concurrency == 0 {
		w.o.Concurrency = 1
	}
	if w.clk == nil {
		w.clk = clock.New()
	}
	if w.backoff == 0 {
		w.backoff = o.Policy.RenewRetry()
	}
	w.backoff = max(w.backoff, MinBackoff)
	w.recv, w.cancelRecv = context.WithCancel(context.Background())
	w.work, w.cancelWork = context.WithCancel(context.Background())
	return w, nil
}

// Start starts Concurrency worker goroutines, each receiving and
// processing one item at a time; each exits when Stop is called, after
// its current item is done (acked, nacked or left). A goroutine waiting
// for them exits right after. ctx is only checked. A nil ctx, a second
// Start or a Start after Stop is ErrInvalidState; a done ctx is
// ErrCanceled/ErrTimeout.
func (w *Worker) Start(ctx context.Context) error {
	const op = "start worker"
	if !w.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	if err := ctx.Err(); err != nil {
		return leaseapi.ContextError(op, err)
	}
	loops := make([]func(), w.o.Concurrency)
	for i := range loops {
		loops[i] = w.loop
	}
	if !w.life.Start(loops...) {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "already started or stopped")
	}
	return nil
}

// Stop stops receiving and, per OnStop, lets in-flight items finish or
// cancels them, then waits until every worker goroutine has exited (every
// in-flight item acked, nacked or left, and the release of its lease
// returned). It returns nil only if every release it waited for
// succeeded: the release failures of the items in flight at Stop are
// returned (matching ErrBackendUnavailable: a lease still held, or
// ErrAmbiguousOutcome: maybe held, until its TTL; several joined with
// errors.Join), as well as reported in their events. ctx bounds the wait:
// when it ends first, in-flight handlers' contexts are canceled (Finish
// escalates to Abandon) and Stop returns ErrCanceled/ErrTimeout; a later
// Stop waits again. Idempotent (a release failure is returned once); Stop
// before Start prevents Start.
// A nil ctx, or a Worker not built by New, is ErrInvalidState.
func (w *Worker) Stop(ctx context.Context) error {
	const op = "stop worker"
	if !w.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	done := w.life.Stop()
	w.cancelRecv()
	if w.o.OnStop == Abandon {
		w.cancelWork()
	}
	err := lifecycle.Wait(ctx, done)
	w.cancelWork()
	if err != nil {
		return leaseapi.ContextError(op, err)
	}
	w.mu.Lock()
	errs := w.stopErrs
	w.stopErrs = nil
	w.mu.Unlock()
	return errors.Join(errs...)
}

// isNilPointer reports whether v is a typed nil pointer (a nil
// *MemorySource in a Source, say), which a nil check of the interface
// misses.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// built reports whether w was made by New.
func (w *Worker) built() bool { return w != nil && w.c != nil }

func errNotBuilt(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "worker not built by New")
}

// emit hands e to OnEvent. A panic in OnEvent is recovered and reported
// once more as a Failed event; a panic in that report is dropped.
func (w *Worker) emit(e Event) {
	if w.o.OnEvent == nil {
		return
	}
	e.At = w.clk.Now()
	if perr := protect("OnEvent", func() error { w.o.OnEvent(e); return nil }); perr != nil {
		_ = protect("OnEvent", func() error {
			w.o.OnEvent(Event{ItemID: e.ItemID, Outcome: Failed, Err: perr, At: w.clk.Now()})
			return nil
		})
	}
}

// loop receives and processes items until Stop. A Receive that fails or
// delivers no item (an empty ID) is followed by a pause of Backoff; a
// delivery that arrives after Stop is given back (nacked) unprocessed.
func (w *Worker) loop() {
	for {
		var it Item
		err := protect("Receive", func() (err error) { it, err = w.src.Receive(w.recv); return err })
		if w.recv.Err() != nil {
			if err == nil && it.ID != "" {
				w.nack(context.WithoutCancel(w.work), it, Event{ItemID: it.ID}, nil)
			}
			return
		}
		switch {
		case err != nil:
			w.emit(Event{Outcome: Failed, Err: wrap(err, "receive")})
		case it.ID == "":
			w.emit(Event{Outcome: Failed, Err: leaseapi.NewError("receive", leaseapi.ErrInvalidState, "source delivered an item without an id")})
		default:
			if w.process(it) {
				continue
			}
		}
		if !w.pause() {
			return
		}
	}
}

// pause waits Backoff; false if Stop was called meanwhile.
func (w *Worker) pause() bool {
	tm := w.clk.Timer(w.backoff)
	select {
	case <-tm.C:
		return true
	case <-w.recv.Done():
		tm.Stop()
		return false
	}
}

// process handles one delivery under the item's lease. It returns false
// when the delivery was no item (its ID cannot name a lease) or its lease
// could not be taken for another reason than contention: the caller then
// pauses, as after a failed Receive. Every event of the delivery is
// emitted after the lease was released, with the release's error.
func (w *Worker) process(it Item) bool {
	ev := Event{ItemID: it.ID}
	ctx := w.work
	cleanup := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		// Abandoned before it started: give it back.
		w.nack(cleanup, it, ev, nil)
		return true
	}
	key, err := leaseapi.NewKey(w.ns, it.ID)
	if err != nil {
		ev.Outcome, ev.Err = Failed, leaseapi.NewError("process item", leaseapi.ErrInvalidState, "item id not usable as a key")
		w.emit(ev)
		return false
	}
	h, err := w.c.TryAcquire(ctx, key, w.o.Policy)
	if err != nil {
		if leaseapi.Kind(err) == leaseapi.ErrContended {
			ev.Outcome = Contended
			w.emit(ev)
			return true
		}
		// The backend gave no lease (unavailable, ambiguous, capacity, a
		// closed client): pause rather than take the next delivery at
		// once, which would drain the source into failures as fast as the
		// backend can fail.
		ev.Outcome, ev.Err = Failed, err
		w.emit(ev)
		return false
	}
	ev.Token = h.Token()
	m, err := h.StartManaged(ctx)
	if err != nil {
		ev.Outcome, ev.Err = Failed, err
		ev.ReleaseErr = h.Release(cleanup)
		w.emit(ev)
		return true
	}

	herr, lost := w.handle(ctx, h, m, it)
	switch {
	case lost != nil:
		ev.Outcome, ev.Err = Lost, lost
		if herr != nil {
			ev.Err = herr
		}
		ev.ReleaseErr = w.release(cleanup, h, m)
		w.emit(ev)
	case herr != nil:
		// Give the lease back first, so that the redelivery is not
		// contended by our own lease.
		ev.ReleaseErr = w.release(cleanup, h, m)
		w.nack(cleanup, it, ev, herr)
	default:
		ev = w.ack(cleanup, h, it, ev)
		ev.ReleaseErr = w.release(cleanup, h, m)
		w.emit(ev)
	}
	return true
}

// release stops h's renewal and releases it, returning the release's
// error: nil when released (or when the lease had already ended: the
// handle then reports what it knows). A failure while Stop is under way
// is kept for Stop.
func (w *Worker) release(cleanup context.Context, h *runtime.Handle, m *runtime.Managed) error {
	_ = m.Stop(cleanup) // nil, or renewal had already ended
	err := h.Release(cleanup)
	if err != nil && w.recv.Err() != nil {
		w.mu.Lock()
		w.stopErrs = append(w.stopErrs, err)
		w.mu.Unlock()
	}
	return err
}

// handle runs the handler with a ctx canceled on loss. It starts one
// watcher goroutine that exits before handle returns. lost is non-nil if
// the lease ended while the handler ran.
func (w *Worker) handle(ctx context.Context, h *runtime.Handle, m *runtime.Managed, it Item) (herr, lost error) {
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, ctxKey{}, h))
	defer cancel(nil)
	stopWatch := lifecycle.WatchLoss(m.Loss(), func(l runtime.Loss) error { return l.Err }, h.Done(), func() error {
		return leaseapi.NewError("process item", leaseapi.ErrLost, "lease ended")
	}, cancel)
	herr = callHandler(hctx, w.o.Handler, it, h.Token())
	return herr, stopWatch()
}

// ack is fenced completion: the lease is confirmed with the backend
// (Validate) and must still be Active locally right before the ack, which
// is bounded by the lease's deadline. It returns ev with the outcome.
func (w *Worker) ack(cleanup context.Context, h *runtime.Handle, it Item, ev Event) Event {
	if err := h.Validate(cleanup); err != nil {
		ev.Outcome, ev.Err = Lost, err
		return ev
	}
	remaining := h.Deadline().Sub(w.clk.Now())
	if h.State() != leaseapi.StateActive || remaining <= 0 {
		ev.Outcome, ev.Err = Lost, leaseapi.NewError("ack item", leaseapi.ErrLost, "lease not active")
		return ev
	}
	actx, cancel := w.clk.WithTimeout(cleanup, remaining)
	defer cancel()
	if err := protect("Ack", func() error { return w.src.Ack(actx, it) }); err != nil {
		ev.Outcome, ev.Err = Failed, wrap(err, "ack item")
		return ev
	}
	ev.Outcome = Acked
	return ev
}

// nack gives the delivery back, bounded by the policy's OperationTimeout.
func (w *Worker) nack(cleanup context.Context, it Item, ev Event, cause error) {
	nctx, cancel := w.clk.WithTimeout(cleanup, w.o.Policy.OperationTimeout())
	defer cancel()
	if err := protect("Nack", func() error { return w.src.Nack(nctx, it) }); err != nil {
		ev.Outcome, ev.Err = Failed, wrap(err, "nack item")
		w.emit(ev)
		return
	}
	ev.Outcome, ev.Err = Nacked, cause
	w.emit(ev)
}

// ctxKey keys the item's lease in the handler's ctx.
type ctxKey struct{}

// HandleFrom returns the lease a handler's ctx runs under (nil outside a
// handler). Use it to check State before a protected action; do not
// Release it: the worker does after the ack or nack.
func HandleFrom(ctx context.Context) *runtime.Handle {
	h, _ := ctx.Value(ctxKey{}).(*runtime.Handle)
	return h
}

// callHandler calls h and turns a panic into a *PanicError.
func callHandler(ctx context.Context, h func(context.Context, Item, leaseapi.Token) error, it Item, token leaseapi.Token) error {
	return protect("", func() error { return h(ctx, it, token) })
}

// wrap redacts a Source's error (leaseapi.Wrap), but keeps a *PanicError
// as it is: it is ours and already redacted.
func wrap(err error, op string) error {
	var pe *PanicError
	if errors.As(err, &pe) {
		return pe
	}
	return leaseapi.Wrap(err, op)
}

// protect calls f and turns a panic into a *PanicError naming callback.
func protect(callback string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Callback: callback}
		}
	}()
	return f()
}
