package runtime

import (
	"context"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// Handle is a held lease. It is a message handle to the lease's supervisor
// goroutine, which alone changes the lease's state; the read methods
// (Key, Owner, Token, AcquiredAt, Deadline, State, Snapshot, Status, Done) never
// block and do no I/O. A Handle is safe for concurrent use by multiple
// goroutines. After the lease reaches a terminal state (or the client is
// closed) every method answers from the final state: it fails closed, never
// blocks and never panics.
type Handle struct {
	c *Client
	s *supervisor.Supervisor
}

// Key returns the lease's key.
func (h *Handle) Key() leaseapi.Key { return h.view().Record.Key }

// Owner returns the owner id of this acquisition.
func (h *Handle) Owner() string { return h.view().Record.Owner }

// Token returns the fencing token: pass it with every protected write.
// It never changes for a handle.
func (h *Handle) Token() leaseapi.Token { return h.view().Record.Token }

// AcquiredAt returns the backend time of the acquisition.
func (h *Handle) AcquiredAt() time.Time { return h.view().AcquiredAt }

// Deadline returns the local instant from which the holder must not act:
// the send time of the request that granted or last renewed the lease, plus
// the TTL, minus the safety margin.
func (h *Handle) Deadline() time.Time { return h.view().Deadline }

// State returns the lease's state now. Only StateActive admits protected
// work; it is never reported at or after Deadline, even before the
// supervisor has noticed the deadline.
func (h *Handle) State() leaseapi.State {
	if !h.usable() {
		return 0
	}
	return h.s.State(h.c.clk.Now())
}

// Done returns a channel closed when the lease has reached a terminal state
// and its supervisor has exited (like etcd's Session.Done).
func (h *Handle) Done() <-chan struct{} {
	if !h.usable() {
		return closedDone
	}
	return h.s.Done()
}

// Snapshot returns the latest backend-authenticated record of the lease:
// the acquisition or the latest renewal, in backend times. It is meant for
// composing protected adapters (postgres.Store.Fence, valkey.Store.Guard);
// admission decisions use [Handle.State] or [Handle.Status], which apply
// the local deadline.
func (h *Handle) Snapshot() leaseapi.Record { return h.view().Record }

// Status is a consistent view of a handle: every field comes from one
// published view of its supervisor.
type Status struct {
	// Record is the latest grant (acquisition or renewal), backend times.
	Record leaseapi.Record
	// State is the state at the instant Status was called (see
	// [Handle.State]).
	State leaseapi.State
	// Deadline is the local admission deadline.
	Deadline time.Time
	// Managed reports whether managed renewal is on.
	Managed bool
	// Err is why the lease is Uncertain or terminal; nil otherwise.
	Err error
}

// Status returns the handle's current view in one consistent read: the
// state, deadline, managed flag and cause all belong to the same step of
// the supervisor, never to two different renewals. It never blocks.
func (h *Handle) Status() Status {
	if !h.usable() {
		return Status{Err: errUnusable("status")}
	}
	v := h.s.View()
	return Status{Record: v.Record, State: v.StateAt(h.c.clk.Now()), Deadline: v.Deadline, Managed: v.Managed, Err: v.Err}
}

// Renew extends the lease now (compare owner and token, one backend call
// bounded by the policy's OperationTimeout). A ctx that is already done
// sends nothing, and one that ends while the request waits behind other
// work withdraws it: ErrCanceled/ErrTimeout then mean nothing was done.
// Once the supervisor has taken the request, Renew waits for and reports
// its real outcome, whatever ctx does. Errors:
// ErrStaleOwner (the lease is gone: StateLost), ErrAmbiguousOutcome or
// ErrBackendUnavailable (StateUncertain until a later success before the
// deadline), ErrLost (the handle is Expired or Lost), ErrInvalidState
// (released), ErrCanceled/ErrTimeout (ctx ended before the request was
// taken: nothing was done).
func (h *Handle) Renew(ctx context.Context) error {
	if !h.usable() {
		return errUnusable("renew")
	}
	ctx, sp := h.span(ctx, TraceRenew)
	err := h.s.Renew(ctx)
	sp.end(h.c, h, err)
	return err
}

// Validate confirms with the backend that the lease is still this grant,
// without extending it. Success restores StateActive from StateUncertain
// if the deadline has not passed. Errors as [Handle.Renew].
func (h *Handle) Validate(ctx context.Context) error {
	if !h.usable() {
		return errUnusable("validate")
	}
	ctx, sp := h.span(ctx, TraceValidate)
	err := h.s.Validate(ctx)
	sp.end(h.c, h, err)
	return err
}

// Release gives the lease back (compare owner and token). It is idempotent:
// once a release succeeded, later calls return nil. A release that may or
// may not have been applied is ErrAmbiguousOutcome and leaves the handle
// Uncertain: call Release again. ErrStaleOwner means another grant replaced
// this one (nothing was released). On an Expired or Lost handle it returns
// ErrLost without I/O; the backend frees the key within the safety margin.
// Release ends managed renewal first, whatever its outcome: the Loss
// channel closes without a value, and a handle whose release failed is not
// renewed again (it expires at its deadline unless a later Release
// succeeds).
func (h *Handle) Release(ctx context.Context) error {
	if !h.usable() {
		return errUnusable("release")
	}
	ctx, sp := h.span(ctx, TraceRelease)
	err := h.s.Release(ctx)
	sp.end(h.c, h, err)
	return err
}

// StartManaged starts managed renewal: the supervisor renews every
// RenewEvery (measured from the last successful renewal's send time) and
// retries failures every Retry (or RenewEvery/4) until the deadline. A
// terminal failure is delivered once on the returned Managed's Loss
// channel. Errors: ErrInvalidState for a second call on one handle (even
// after Stop) or a released handle, ErrLost for an Expired or Lost handle,
// ErrCapacity when MaxManaged handles are already managed, ErrCanceled/
// ErrTimeout if ctx ended before the supervisor took the request (renewal
// was then not started).
func (h *Handle) StartManaged(ctx context.Context) (*Managed, error) {
	if !h.usable() {
		return nil, errUnusable("start managed")
	}
	loss, err := h.s.StartManaged(ctx)
	if err != nil {
		return nil, err
	}
	return &Managed{s: h.s, loss: loss}, nil
}

// Loss reports the end of a managed lease that its holder did not release
// or stop: the terminal state (Expired: renewals kept failing until the
// deadline; Lost: another grant replaced it, or the client closed), the
// local time, and an error matching ErrLost or ErrStaleOwner.
type Loss = supervisor.Loss

// Managed is managed renewal of one handle. It is safe for concurrent use.
type Managed struct {
	s    *supervisor.Supervisor
	loss <-chan Loss
}

// Loss returns a channel that yields at most one Loss and is then closed.
// It is closed without a value after Stop or a successful Release.
func (m *Managed) Loss() <-chan Loss {
	if !m.usable() {
		return closedLoss
	}
	return m.loss
}

// Stop stops renewal and waits for the supervisor to confirm; it never
// releases (call Handle.Release for that). The lease then lasts until its
// deadline unless renewed by hand. Idempotent; nil once the lease has ended.
// ctx bounds the wait (ErrCanceled/ErrTimeout).
func (m *Managed) Stop(ctx context.Context) error {
	if !m.usable() {
		return errUnusable("stop managed")
	}
	return m.s.StopManaged(ctx)
}
