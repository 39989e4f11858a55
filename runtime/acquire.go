package runtime

import (
	"context"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// TryAcquire makes one attempt to acquire key under policy p and returns a
// handle in StateActive, or an error matching:
//   - ErrContended: another owner holds the key;
//   - ErrAmbiguousOutcome: the backend may have granted the lease but the
//     reply was lost and could not be resolved by inspection (the orphaned
//     grant, if any, expires at its TTL and is never handed out blind);
//   - ErrBackendUnavailable: the backend could not be asked;
//   - ErrCanceled / ErrTimeout: ctx ended (also matching ctx's error);
//   - ErrCapacity: MaxWaiters calls are already in flight, or the client
//     already holds MaxHeld handles;
//   - ErrInvalidState: bad input (zero key or policy, nil ctx), or the
//     client is closed.
//
// p.Wait, p.Retry and p.MaxAttempts are ignored. ctx bounds the call; each
// backend call is also bounded by p.OperationTimeout.
func (c *Client) TryAcquire(ctx context.Context, key leaseapi.Key, p leaseapi.Policy) (*Handle, error) {
	return c.observedAcquire(ctx, key, p, false)
}

// Acquire acquires key under policy p, retrying while the key is contended
// or the backend is unavailable: it pauses p.Retry plus up to p.Jitter
// between attempts (waking early when the backend reports a release), for
// at most p.Wait in all and p.MaxAttempts attempts. It returns a handle in
// StateActive, or an error matching ErrTimeout when Wait ran out,
// ErrContended (or the last attempt's kind) when MaxAttempts ran out first,
// ErrCanceled/ErrTimeout (also matching the context error) when ctx ended,
// and otherwise as [Client.TryAcquire]. With p.Wait zero it makes one
// attempt. Close aborts a waiting Acquire with ErrInvalidState.
func (c *Client) Acquire(ctx context.Context, key leaseapi.Key, p leaseapi.Policy) (*Handle, error) {
	return c.observedAcquire(ctx, key, p, true)
}

// a receives the acquisition's timing for the metrics (acquisition).
func (c *Client) acquire(ctx context.Context, key leaseapi.Key, p leaseapi.Policy, wait bool, a *acquisition) (*Handle, error) {
	const op = "acquire"
	switch {
	case !c.usable():
		return nil, errUnusable(op)
	case ctx == nil:
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	case key.IsZero():
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "zero key")
	case p.Check() != nil:
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "zero policy")
	}
	if c.life.Err() != nil { // closing: fail fast without the registry lock
		return nil, errClosed(op)
	}
	if c.waiters.Add(1) > c.maxWaiters {
		c.waiters.Add(-1)
		return nil, leaseapi.NewError(op, leaseapi.ErrCapacity, "max waiters")
	}
	defer c.waiters.Add(-1)
	if c.held.full() { // fail fast; register takes the slot exactly
		return nil, errMaxHeld
	}

	if !wait || p.Wait() == 0 {
		return c.attempt(ctx, key, p, a)
	}

	// A waiting acquisition also ends when the client closes.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnClose := context.AfterFunc(c.life, cancel)
	defer stopOnClose()

	var wake <-chan struct{}
	if c.watcher != nil {
		ch, stop := c.watcher.WatchRelease(key)
		defer stop()
		wake = ch
	}
	end := c.clk.Now().Add(p.Wait())
	for attempt := uint32(1); ; attempt++ {
		h, err := c.attempt(ctx, key, p, a)
		if err == nil || !retryable(err) {
			return h, c.closedOr(err, op)
		}
		if attempt >= p.MaxAttempts() {
			return nil, err
		}
		remaining := end.Sub(c.clk.Now())
		if remaining <= 0 {
			return nil, leaseapi.NewError(op, leaseapi.ErrTimeout, waitExhausted(err))
		}
		pause := retryPause(p.Retry(), c.retry.Jitter(p.Jitter()), remaining)
		if err := c.sleeper.Sleep(ctx, pause, wake); err != nil {
			return nil, c.closedOr(leaseapi.ContextError(op, err), op)
		}
	}
}

// retryPause is the pause before the next attempt: retry plus jitter,
// never more than remaining (the rest of the caller's Wait) and never
// negative. It saturates instead of overflowing, so a Retry near
// math.MaxInt64, or a RetrySource that returns a value outside [0, max),
// still waits out the remaining Wait rather than wrapping to a negative
// pause and spinning through the attempts.
func retryPause(retry, jitter, remaining time.Duration) time.Duration {
	retry, jitter = max(retry, 0), max(jitter, 0)
	if retry >= remaining || jitter >= remaining-retry {
		return remaining
	}
	return retry + jitter
}

// waitExhausted says, in fixed text, why the last attempt failed, so that a
// caller can tell "held by another owner" from "backend unreachable".
func waitExhausted(last error) string {
	switch leaseapi.Kind(last) {
	case leaseapi.ErrContended:
		return "wait exhausted: key held by another owner"
	case leaseapi.ErrBackendUnavailable:
		return "wait exhausted: backend unavailable"
	case leaseapi.ErrAmbiguousOutcome:
		return "wait exhausted: last attempt ambiguous"
	}
	return "wait exhausted"
}

// retryable reports whether another attempt may succeed.
func retryable(err error) bool {
	switch leaseapi.Kind(err) {
	case leaseapi.ErrContended, leaseapi.ErrBackendUnavailable, leaseapi.ErrAmbiguousOutcome:
		return true
	}
	return false
}

// closedOr replaces err by "client closed" when the client closed under it.
func (c *Client) closedOr(err error, op string) error {
	if err != nil && c.life.Err() != nil {
		return errClosed(op)
	}
	return err
}

func errClosed(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "client closed")
}

// attempt makes one acquisition: a fresh owner id, one backend call
// anchored at its send time, and, if the reply was lost, one inspection to
// adopt the grant the call may have made.
func (c *Client) attempt(ctx context.Context, key leaseapi.Key, p leaseapi.Policy, a *acquisition) (*Handle, error) {
	const op = "acquire"
	owner, err := c.owners.NewOwner()
	if err != nil {
		return nil, leaseapi.Wrap(err, op)
	}
	sentAt := c.clk.Now()
	if a.first.IsZero() {
		a.first = sentAt
	}
	resolved := false
	octx, cancel := c.opContext(ctx, p, sentAt)
	rec, err := c.b.TryAcquire(octx, key, owner, p.TTL())
	cancel()
	doneAt := c.clk.Now() // the reply's arrival: the call's latency, and recvAt below
	a.called(c.m, doneAt.Sub(sentAt), err)
	if err != nil {
		switch kind := leaseapi.Kind(err); {
		case kind == leaseapi.ErrAmbiguousOutcome:
		case ctx.Err() != nil:
			return nil, leaseapi.ContextError(op, ctx.Err())
		case kind == leaseapi.ErrTimeout || kind == leaseapi.ErrCanceled:
			// The caller's ctx is live, so the operation timeout ended a
			// call that sent nothing (say, while connecting): the backend
			// is unavailable for now, and a waiting Acquire tries again.
			return nil, leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, "operation timeout before send")
		default:
			return nil, leaseapi.Wrap(err, op)
		}
		rec, err = c.resolve(ctx, key, owner, p)
		if err != nil {
			return nil, err
		}
		resolved = true
	}
	sentAt = grantAnchor(c.clk, sentAt, resolved)
	if rec.Key != key || rec.Owner != owner || rec.Token == 0 || !rec.ExpiresAt.After(rec.AcquiredAt) {
		// A backend that answers for another grant is broken: fail closed.
		c.releaseQuietly(rec, p)
		return nil, leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, "backend returned another grant")
	}
	if !c.admitToken(key, rec.Token) {
		c.releaseQuietly(rec, p)
		return nil, leaseapi.NewError(op, leaseapi.ErrFencingRegression, "token not above one already granted")
	}
	recvAt := doneAt
	if resolved || recvAt.Before(sentAt) { // received after the inspection (or re-anchored)
		recvAt = c.clk.Now()
	}
	if !recvAt.Before(rec.LocalDeadline(sentAt, p)) {
		c.releaseQuietly(rec, p)
		return nil, leaseapi.NewError(op, leaseapi.ErrTimeout, "grant arrived after its deadline")
	}
	h, err := c.register(p, rec, sentAt, recvAt)
	if err != nil {
		c.releaseQuietly(rec, p)
		return nil, err
	}
	return h, nil
}

// resolve settles an acquisition whose reply was lost by reading the key,
// only if the backend claims that such a read proves a durable grant
// (leaseapi.Capabilities.Adopt; unclaimed, the outcome stays ambiguous):
// if our owner id holds it, the grant is adopted, anchored at the original
// send time (the grant cannot have started before it). If another owner
// or nobody holds it, nothing of ours is live. If the key cannot be read,
// the outcome stays ambiguous; an orphan then expires at its TTL.
func (c *Client) resolve(ctx context.Context, key leaseapi.Key, owner string, p leaseapi.Policy) (leaseapi.Record, error) {
	const op = "acquire"
	ambiguous := leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "")
	if c.inspector == nil || !c.canAdopt {
		return leaseapi.Record{}, ambiguous
	}
	start := c.clk.Now()
	ictx, cancel := c.opContext(ctx, p, start)
	defer cancel()
	rec, held, err := c.inspector.Inspect(ictx, key)
	c.m.called(callInspect, c.clk.Since(start), err)
	switch {
	case err != nil:
		return leaseapi.Record{}, ambiguous
	case held && rec.Owner == owner:
		return rec, nil
	case held:
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrContended, "")
	}
	return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, "acquire not applied")
}

// releaseQuietly gives back a grant this client will not use, best effort,
// bounded by the operation timeout.
func (c *Client) releaseQuietly(rec leaseapi.Record, p leaseapi.Policy) {
	if rec.Check() != nil {
		return
	}
	start := c.clk.Now()
	ctx, cancel := c.opContext(context.Background(), p, start)
	defer cancel()
	err := c.b.Release(ctx, rec)
	c.m.called(callDiscard, c.clk.Since(start), err)
}
