package runtime

import (
	"context"

	"github.com/leasekit/lease/leaseapi"
)

// Run is the one-call API: it acquires key (waiting as [Client.Acquire]
// does), starts managed renewal, runs fn with a context that is canceled as
// soon as the lease is lost, expires or the client closes, and when fn
// returns (or panics) it stops renewal and releases the lease.
//
// Run returns the acquisition's error if it never held the lease, fn's
// error if fn failed, an error matching ErrLost if fn returned nil but the
// lease ended while it ran (its work may not have been exclusive), and nil
// otherwise. fn's ctx carries the loss as its cause (context.Cause). A
// release that fails after fn returned is not reported: the lease then ends
// at its TTL. The goroutine Run starts to watch for loss exits before Run
// returns.
func (c *Client) Run(ctx context.Context, key leaseapi.Key, p leaseapi.Policy, fn func(ctx context.Context, h *Handle) error) (err error) {
	if !c.usable() {
		return errUnusable("run")
	}
	ctx, sp := c.startSpan(ctx, TraceRun, key, 0)
	defer func() { sp.end(c, nil, err) }()
	if fn == nil {
		return leaseapi.NewError("run", leaseapi.ErrInvalidState, "nil function")
	}
	h, err := c.Acquire(ctx, key, p)
	if err != nil {
		return err
	}
	// Cleanup must not depend on the caller's ctx, which may be why fn
	// returned; every backend call is still bounded by OperationTimeout.
	cleanup := context.WithoutCancel(ctx)
	defer h.Release(cleanup) //nolint:errcheck // documented: ends at TTL

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
			lost = leaseapi.NewError("run", leaseapi.ErrLost, "lease ended")
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
