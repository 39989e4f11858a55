package mailbox

import (
	"context"
	"sync/atomic"
)

// Call is a request carrying its own reply channel, the unit of
// request/reply with an actor. A Call is a small value; copies share one
// exchange (the reply channel and the hand-over state).
//
// A Call is acted on at most once, and only if its caller still wants it:
// the actor claims it with [Call.Take] before acting, and a caller whose
// ctx ends while the call is still queued withdraws it. Exactly one of the
// two wins (a compare-and-swap on the call's state), so a caller that saw
// its ctx end either knows nothing was done or waits for the reply of what
// is being done — never "canceled" while the actor acts.
//
// The reply signal has buffer 1, so the actor replies without blocking
// even if the caller has gone: a departed caller can never stall the actor.
type Call[Q, R any] struct {
	// Req is the request.
	Req Q
	x   *exchange[R]
}

// exchange is what a caller and the actor share for one call.
type exchange[R any] struct {
	// state moves from pending to taken (by the actor) or to withdrawn (by
	// the caller), and from taken to replied (by the actor's first Reply).
	state atomic.Uint32
	// r is the reply: written once by the actor before it signals done,
	// read by the caller only after receiving from done.
	r R
	// done receives one value, sent by the actor after writing r; buffer 1
	// so the actor never blocks. Never closed. Its element carries no data
	// (the reply is r), which keeps a call to two small allocations.
	done chan struct{}
}

const (
	pending uint32 = iota
	taken
	withdrawn
	replied
)

// NewCall returns a pending Call for req with a fresh reply channel.
func NewCall[Q, R any](req Q) Call[Q, R] {
	x := &exchange[R]{done: make(chan struct{}, 1)}
	return Call[Q, R]{Req: req, x: x}
}

// Take claims the call for the actor. It reports false if the caller has
// withdrawn it (its ctx ended while it was queued): the actor must then
// skip it without acting or replying. After a true Take the caller waits
// for the reply whatever its ctx does, so the actor must reply.
func (c Call[Q, R]) Take() bool { return c.x.state.CompareAndSwap(pending, taken) }

// Reply delivers r to the caller without blocking. Only the first reply to
// a taken call is kept; later ones, and replies to a call that was never
// taken, are dropped. Only the actor may call it.
func (c Call[Q, R]) Reply(r R) {
	if !c.x.state.CompareAndSwap(taken, replied) {
		return
	}
	c.x.r = r
	c.x.done <- struct{}{}
}

// Wait returns the reply. If ctx ends first and the actor has not taken
// the call yet, Wait withdraws it and returns ctx's error: the actor will
// never act on it. If the actor has taken it, Wait keeps waiting for the
// reply (the actor bounds its own work) or for done. It returns
// [ErrClosed] if done (the actor's exit channel) closes without a reply.
func (c Call[Q, R]) Wait(ctx context.Context, done <-chan struct{}) (R, error) {
	select {
	case <-c.x.done:
		return c.x.r, nil
	case <-ctx.Done():
		if c.x.state.CompareAndSwap(pending, withdrawn) {
			var zero R
			return zero, ctx.Err()
		}
		// Taken: the actor is acting on it and will reply.
		select {
		case <-c.x.done:
			return c.x.r, nil
		case <-done:
			return c.afterExit()
		}
	case <-done:
		return c.afterExit()
	}
}

// afterExit answers a call whose actor has exited: the reply it may have
// sent just before, else ErrClosed.
func (c Call[Q, R]) afterExit() (R, error) {
	select {
	case <-c.x.done:
		return c.x.r, nil
	default:
		var zero R
		return zero, ErrClosed
	}
}

// Request sends req to m and waits for the reply. A ctx that is already
// done sends nothing. Otherwise it is the three-way select on {send, ctx,
// done} and then [Call.Wait]. Errors are ctx's error (nothing was or will
// be done) or [ErrClosed].
func Request[Q, R any](ctx context.Context, m *Mailbox[Call[Q, R]], done <-chan struct{}, req Q) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	select {
	case <-done:
		return zero, ErrClosed
	default:
	}
	c := NewCall[Q, R](req)
	select {
	case m.ch <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-m.closed:
		return zero, ErrClosed
	case <-done:
		return zero, ErrClosed
	}
	return c.Wait(ctx, done)
}
