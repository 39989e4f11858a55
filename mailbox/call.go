package mailbox

import "context"

// Call is a request carrying its own reply channel, the unit of
// request/reply with an actor. Its reply channel has buffer 1, so the actor
// replies without blocking even if the caller has given up: a departed
// caller can never stall the actor. A Call is a small value; copies share
// the reply channel.
type Call[Q, R any] struct {
	// Req is the request.
	Req Q
	// reply receives at most one reply, sent by the actor; never closed.
	reply chan R
}

// NewCall returns a Call for req with a fresh reply channel.
func NewCall[Q, R any](req Q) Call[Q, R] {
	return Call[Q, R]{Req: req, reply: make(chan R, 1)}
}

// Reply delivers r to the caller without blocking. Only the first reply is
// kept; later ones are dropped.
func (c Call[Q, R]) Reply(r R) {
	select {
	case c.reply <- r:
	default:
	}
}

// Wait returns the reply. It returns ctx's error if ctx ends first, and
// [ErrClosed] if done (the actor's exit channel) closes without a reply.
func (c Call[Q, R]) Wait(ctx context.Context, done <-chan struct{}) (R, error) {
	var zero R
	select {
	case r := <-c.reply:
		return r, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-done:
		// The actor may have replied just before it exited.
		select {
		case r := <-c.reply:
			return r, nil
		default:
			return zero, ErrClosed
		}
	}
}

// Request sends req to m and waits for the reply: the three-way select on
// {send, ctx, done} and then on {reply, ctx, done}. Errors are ctx's error
// or [ErrClosed].
func Request[Q, R any](ctx context.Context, m *Mailbox[Call[Q, R]], done <-chan struct{}, req Q) (R, error) {
	c := NewCall[Q, R](req)
	var zero R
	select {
	case <-done:
		return zero, ErrClosed
	default:
	}
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
