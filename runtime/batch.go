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
// One goroutine, started by the first renewal, runs the batches; it exits
// when the client's life context is canceled (Close) and Close waits for it.
// Safe for concurrent use.
type batcher struct {
	br   leaseapi.BatchRenewer
	clk  clock.Clock
	life context.Context
	// in carries renewals from supervisors to the loop; buffered so that a
	// burst forms a batch without waking the loop per element.
	in chan *renewReq
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
	return &batcher{br: br, clk: clk, life: life, in: make(chan *renewReq, maxBatch), started: make(chan struct{}), done: make(chan struct{})}
}

// Renew implements the supervisor's Renewer. ctx bounds the wait for the
// batch (it carries the supervisor's OperationTimeout and trust bound). If
// ctx ends before the request was queued nothing was sent; after that the
// outcome is ambiguous.
//
// ctx must end when the client's life does, as the supervisors' contexts
// do (Config.Life is the client's life): a batch runs under the context
// of its element with the earliest deadline, so that it makes no context
// of its own.
func (b *batcher) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	const op = "renew"
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
	select {
	case b.in <- r:
	case <-ctx.Done():
		b.put(r)
		return leaseapi.Record{}, leaseapi.ContextError(op, ctx.Err())
	case <-b.done:
		b.put(r)
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrInvalidState, "client closed")
	}
	select {
	case res := <-r.reply:
		b.put(r)
		return res.Record, res.Err
	case <-ctx.Done():
		// The loop still holds r and will reply on it: r is not reused.
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

func (b *batcher) loop() {
	defer close(b.done)
	batch := make([]*renewReq, 0, maxBatch)
	reqs := make([]leaseapi.RenewRequest, 0, maxBatch)
	for {
		select {
		case r := <-b.in:
			batch = append(batch[:0], r)
		case <-b.life.Done():
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case r := <-b.in:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		first := batch[0] // the element with the earliest deadline
		reqs = reqs[:0]
		for _, r := range batch {
			if r.deadline.Before(first.deadline) {
				first = r
			}
			reqs = append(reqs, leaseapi.RenewRequest{Record: r.rec, TTL: r.ttl})
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
			r.reply <- leaseapi.RenewResult{Err: leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "short batch reply")}
		}
		clear(batch)
	}
}
