package runtime

import (
	"context"
	"errors"

	"github.com/leasekit/lease/leaseapi"
)

// Run is the one-call API: it acquires key (waiting as [Client.Acquire]
// does), starts managed renewal, runs fn with a context that is canceled as
// soon as the lease is lost, expires or the client closes, and when fn
// returns (or panics) it stops renewal and releases the lease.
//
// Run returns the acquisition's error if it never held the lease. Once it
// held it, Run returns fn's error if fn failed; an error matching ErrLost
// if fn returned nil but the lease ended while it ran (its work may not
// have been exclusive); and the release's error if the release failed or
// could not be confirmed (ErrBackendUnavailable, ErrAmbiguousOutcome, ...:
// the lease may then be held until its TTL runs out), joined with fn's
// error if both failed. It returns nil only when fn succeeded and the
// lease was released. A release by fn itself counts as Run's release:
// fn may release and return nil. fn's ctx carries the loss as its cause
// (context.Cause). The goroutine Run starts to watch for loss exits before
// Run returns.
func (c *Client) Run(ctx context.Context, key leaseapi.Key, p leaseapi.Policy, fn func(ctx context.Context, h *Handle) error) (err error) {
	if !c.usable() {
		return errUnusable("run")
	}
	var h *Handle // the lease, once acquired: its token and state end Run's trace
	ctx, sp := c.startSpan(ctx, TraceRun, key, 0)
	defer func() { sp.end(c, h, err) }()
	if fn == nil {
		return leaseapi.NewError("run", leaseapi.ErrInvalidState, "nil function")
	}
	h, err = c.Acquire(ctx, key, p)
	if err != nil {
		return err
	}
	// Cleanup must not depend on the caller's ctx, which may be why fn
	// returned; every backend call is still bounded by OperationTimeout.
	cleanup := context.WithoutCancel(ctx)
	defer func() {
		rerr := h.Release(cleanup)
		if rerr == nil || leaseapi.Kind(rerr) == leaseapi.ErrLost {
			return // released, or ended before: err already says so
		}
		err = errors.Join(err, rerr)
	}()

	m, err := h.StartManaged(ctx)
	if err != nil {
		return err
	}
	defer m.Stop(cleanup) //nolint:errcheck // nil or ended

	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	var lost error // written by the watcher before it closes watched
	go func() {
		defer close(watched)
		select {
		case l, ok := <-m.Loss():
			if ok {
				lost = l.Err
			}
		case <-h.Done():
			// The lease ended: a loss, unless fn released it (the loss
			// channel then closed without a value, and the final view
			// says Released).
			if h.s.View().State != leaseapi.StateReleased {
				lost = leaseapi.NewError("run", leaseapi.ErrLost, "lease ended")
			}
		case <-stop:
		}
		if lost != nil {
			cancel(lost)
		}
	}()
	defer func() {
		close(stop)
		<-watched
		if err == nil && lost != nil {
			err = leaseapi.NewError("run", leaseapi.ErrLost, "lease ended while running")
		}
	}()
	return fn(fctx, h)
}
