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
	r, _, err := c.wait(ctx, done)
	return r, err
}

// wait is Wait, also reporting whether the reply was received: then the
// actor is done with the exchange.
func (c Call[Q, R]) wait(ctx context.Context, done <-chan struct{}) (_ R, replied bool, _ error) {
	select {
	case <-c.x.done:
		return c.x.r, true, nil
	case <-ctx.Done():
		if c.x.state.CompareAndSwap(pending, withdrawn) {
			var zero R
			return zero, false, ctx.Err()
		}
		// Taken: the actor is acting on it and will reply.
		select {
		case <-c.x.done:
			return c.x.r, true, nil
		case <-done:
			return c.afterExit()
		}
	case <-done:
		return c.afterExit()
	}
}

// afterExit answers a call whose actor has exited: the reply it may have
// sent just before, else ErrClosed.
func (c Call[Q, R]) afterExit() (R, bool, error) {
	select {
	case <-c.x.done:
		return c.x.r, true, nil
	default:
		var zero R
		return zero, false, ErrClosed
	}
}

// Request sends req to m and waits for the reply. A ctx that is already
// done sends nothing. Otherwise it is the three-way select on {send, ctx,
// done} and then [Call.Wait]. Errors are ctx's error (nothing was or will
// be done) or [ErrClosed].
func Request[Q, R any](ctx context.Context, m *Mailbox[Call[Q, R]], done <-chan struct{}, req Q) (R, error) {
	if err := refuse(ctx, done); err != nil {
		var zero R
		return zero, err
	}
	r, _, err := send(ctx, m, done, NewCall[Q, R](req))
	return r, err
}

// Slot is a reply exchange that the requests to one actor reuse, one at a
// time: [RequestVia] uses it when no other request holds it (and makes a
// fresh exchange otherwise), which saves the exchange and its reply
// channel per request. It is safe for concurrent use; the zero value is
// ready, and its reply channel is made by the first request that uses it.
// A Slot belongs to one actor: like the mailbox, keep it with it.
//
// A request gives the slot back only when the actor can no longer touch
// it: once the reply was received, or if nothing was sent. A withdrawn
// call stays in the mailbox until the actor skips it, and a call that
// raced the actor's exit may stay there for ever; their slot is never
// reused (later requests make fresh exchanges), so a stale call can never
// claim a later request's exchange.
type Slot[R any] struct {
	// busy is taken (false to true) by the request that uses x and given
	// back by it as described above.
	busy atomic.Bool
	x    exchange[R]
}

// RequestVia is [Request] using slot s for the exchange when it is free.
func RequestVia[Q, R any](ctx context.Context, m *Mailbox[Call[Q, R]], done <-chan struct{}, s *Slot[R], req Q) (R, error) {
	var zero R
	if err := refuse(ctx, done); err != nil {
		return zero, err
	}
	if !s.busy.CompareAndSwap(false, true) {
		r, _, err := send(ctx, m, done, NewCall[Q, R](req))
		return r, err
	}
	x := &s.x
	if x.done == nil {
		x.done = make(chan struct{}, 1)
	}
	x.state.Store(pending)
	r, free, err := send(ctx, m, done, Call[Q, R]{Req: req, x: x})
	if free {
		x.r = zero // keep nothing of this reply alive
		s.busy.Store(false)
	}
	return r, err
}

// refuse is the error of a request that must not be sent: ctx is done, or
// the actor has exited.
func refuse(ctx context.Context, done <-chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-done:
		return ErrClosed
	default:
	}
	return nil
}

// send is the three-way select on {send, ctx, done}, then the wait. free
// reports that the actor is done with c's exchange: nothing was sent, or
// the reply was received.
//
// A mailbox with room takes c at once (a non-blocking send, much cheaper
// than the select); the select is for a full one. Either way a send that
// races ctx's end or the actor's exit may land in the buffer, as the
// select alone allows: the wait then answers it.
func send[Q, R any](ctx context.Context, m *Mailbox[Call[Q, R]], done <-chan struct{}, c Call[Q, R]) (_ R, free bool, _ error) {
	var zero R
	select {
	case m.ch <- c:
		return c.wait(ctx, done)
	default:
	}
	select {
	case m.ch <- c:
	case <-ctx.Done():
		return zero, true, ctx.Err()
	case <-m.closed:
		return zero, true, ErrClosed
	case <-done:
		return zero, true, ErrClosed
	}
	return c.wait(ctx, done)
}
