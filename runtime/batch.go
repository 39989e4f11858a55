package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// maxBatch bounds the renewals sent in one RenewBatch call.
const maxBatch = 256

// batcher coalesces the renewals of a client's supervisors into
// RenewBatch calls for backends that can renew many grants in one round
// trip. It works like group commit: a renewal that arrives while a batch is
// in flight waits for the next batch, so renewals that fall due together
// share a round trip without any added delay when the backend is idle.
// Each element keeps exactly the semantics (and the send-time anchoring,
// taken by the supervisor before it enqueues) of a single Renew.
//
// Renewals wait in a queue, not a channel: queueing never blocks (a
// supervisor has at most one renewal queued, so the queue is bounded by
// the client's leases), and the loop takes every queued renewal at once.
// A bounded channel made a supervisor that found it full park twice per
// renewal, first in a three-way select on the send and again for the
// reply, and every receive woke a blocked sender.
//
// One goroutine, started by the first renewal, runs the batches; it exits
// when the client's life context is canceled (Close) and Close waits for it.
// Safe for concurrent use.
type batcher struct {
	br   leaseapi.BatchRenewer
	clk  clock.Clock
	life context.Context

	mu     sync.Mutex
	queue  []*renewReq // renewals waiting for the next batch, in arrival order
	closed bool        // the loop has exited: nothing more is queued
	// wake holds a token when the queue became non-empty since the loop
	// last found it empty.
	wake chan struct{}

	// reqs recycles requests with their reply channels: a request goes
	// back only after its reply was received, when the loop no longer
	// holds it. The pool is the batcher's own, so a channel never crosses
	// from one client (and one testing/synctest bubble) to another.
	reqs      sync.Pool
	startOnce sync.Once
	started   chan struct{} // closed by start: the loop exists and will close done
	done      chan struct{} // closed when the loop exits
}

type renewReq struct {
	rec      leaseapi.Record
	ttl      time.Duration
	ctx      context.Context // the caller's; bounds the batch if its deadline is the earliest
	deadline time.Time       // ctx's deadline; the batch uses the earliest
	// reply receives exactly one result from the loop; buffer 1 so a caller
	// that gave up never stalls it.
	reply chan leaseapi.RenewResult
}

func newBatcher(br leaseapi.BatchRenewer, clk clock.Clock, life context.Context) *batcher {
	return &batcher{br: br, clk: clk, life: life, wake: make(chan struct{}, 1), started: make(chan struct{}), done: make(chan struct{})}
}

// Renew implements the supervisor's Renewer. ctx bounds the wait for the
// batch (it carries the supervisor's OperationTimeout and trust bound). A
// ctx already done sends nothing, nor does a renewal whose ctx ends before
// its batch is formed; otherwise a ctx that ends first makes the outcome
// ambiguous.
//
// ctx must end when the client's life does, as the supervisors' contexts
// do (Config.Life is the client's life): a batch runs under the context
// of its element with the earliest deadline, so that it makes no context
// of its own.
func (b *batcher) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	const op = "renew"
	if err := ctx.Err(); err != nil {
		return leaseapi.Record{}, leaseapi.ContextError(op, err)
	}
	b.startOnce.Do(func() {
		close(b.started)
		go b.loop()
	})
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = b.clk.Now().Add(leaseapi.MaxOperationTimeout)
	}
	r, _ := b.reqs.Get().(*renewReq)
	if r == nil {
		r = &renewReq{reply: make(chan leaseapi.RenewResult, 1)}
	}
	r.rec, r.ttl, r.ctx, r.deadline = rec, ttl, ctx, deadline
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.put(r)
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrInvalidState, "client closed")
	}
	b.queue = append(b.queue, r)
	first := len(b.queue) == 1
	b.mu.Unlock()
	if first {
		select {
		case b.wake <- struct{}{}:
		default: // a token is there already
		}
	}
	select {
	case res := <-r.reply:
		b.put(r)
		return res.Record, res.Err
	case <-ctx.Done():
		// The loop holds r and will reply on it: r is not reused.
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "batched renewal timed out")
	}
}

// put returns r, which the loop no longer holds, for reuse.
func (b *batcher) put(r *renewReq) {
	r.rec, r.ctx = leaseapi.Record{}, nil
	b.reqs.Put(r)
}

// wait blocks until the loop, if it was ever started, has exited.
func (b *batcher) wait() {
	select {
	case <-b.started:
		<-b.done
	default:
	}
}

// loop takes the whole queue whenever it is not empty and runs it as
// batches of up to maxBatch, in arrival order; renewals queued meanwhile
// wait for the next take.
func (b *batcher) loop() {
	defer close(b.done)
	var taken, spare []*renewReq
	batch := make([]*renewReq, 0, maxBatch)
	reqs := make([]leaseapi.RenewRequest, 0, maxBatch)
	for {
		select {
		case <-b.wake:
		case <-b.life.Done():
			b.shut(nil)
			return
		}
		for {
			b.mu.Lock()
			taken, b.queue = b.queue, spare[:0]
			b.mu.Unlock()
			if len(taken) == 0 {
				spare = taken
				break
			}
			for rest := taken; len(rest) > 0; {
				if b.life.Err() != nil {
					b.shut(rest)
					return
				}
				n := min(len(rest), maxBatch)
				batch, reqs = b.run(rest[:n], batch, reqs)
				rest = rest[n:]
			}
			clear(taken)
			spare = taken
		}
	}
}

// run sends the renewals of elems that are still wanted as one RenewBatch
// and answers every one of them. batch and reqs are scratch space.
func (b *batcher) run(elems, batch []*renewReq, reqs []leaseapi.RenewRequest) ([]*renewReq, []leaseapi.RenewRequest) {
	const op = "renew"
	now := b.clk.Now()
	batch, reqs = batch[:0], reqs[:0]
	var first *renewReq // the element with the earliest deadline
	for _, r := range elems {
		if !r.deadline.After(now) {
			// Its bound ended while it waited: it is not sent, and its
			// caller has been (or is being) told so.
			r.reply <- leaseapi.RenewResult{Err: leaseapi.NewError(op, leaseapi.ErrTimeout, "bound ended before the batch was sent")}
			continue
		}
		if first == nil || r.deadline.Before(first.deadline) {
			first = r
		}
		batch = append(batch, r)
		reqs = append(reqs, leaseapi.RenewRequest{Record: r.rec, TTL: r.ttl})
	}
	if len(batch) == 0 {
		return batch, reqs
	}
	// first's context ends at the earliest deadline or with life; its
	// caller keeps it alive until its reply, so it outlives the batch.
	// One without a deadline (none of the supervisors') gets one.
	ctx, cancel := first.ctx, context.CancelFunc(nil)
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = b.clk.WithDeadline(b.life, first.deadline)
	}
	res := b.br.RenewBatch(ctx, reqs)
	if cancel != nil {
		cancel()
	}
	for i, r := range batch {
		if i < len(res) {
			r.reply <- res[i]
			continue
		}
		r.reply <- leaseapi.RenewResult{Err: leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "short batch reply")}
	}
	clear(batch)
	clear(reqs)
	return batch, reqs
}

// shut closes the queue as the loop exits and answers the renewals it
// holds (rest, not yet sent) and those still queued: nothing was sent.
func (b *batcher) shut(rest []*renewReq) {
	b.mu.Lock()
	b.closed = true
	queued := b.queue
	b.queue = nil
	b.mu.Unlock()
	for _, q := range [2][]*renewReq{rest, queued} {
		for _, r := range q {
			r.reply <- leaseapi.RenewResult{Err: leaseapi.NewError("renew", leaseapi.ErrInvalidState, "client closed")}
		}
	}
}
