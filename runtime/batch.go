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
	in        chan *renewReq
	startOnce sync.Once
	started   chan struct{} // closed by start: the loop exists and will close done
	done      chan struct{} // closed when the loop exits
}

type renewReq struct {
	rec      leaseapi.Record
	ttl      time.Duration
	deadline time.Time // the caller's own bound; the batch uses the earliest
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
	r := &renewReq{rec: rec, ttl: ttl, deadline: deadline, reply: make(chan leaseapi.RenewResult, 1)}
	select {
	case b.in <- r:
	case <-ctx.Done():
		return leaseapi.Record{}, leaseapi.ContextError(op, ctx.Err())
	case <-b.done:
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrInvalidState, "client closed")
	}
	select {
	case res := <-r.reply:
		return res.Record, res.Err
	case <-ctx.Done():
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "batched renewal timed out")
	}
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
		earliest := batch[0].deadline
		reqs = reqs[:0]
		for _, r := range batch {
			if r.deadline.Before(earliest) {
				earliest = r.deadline
			}
			reqs = append(reqs, leaseapi.RenewRequest{Record: r.rec, TTL: r.ttl})
		}
		ctx, cancel := b.clk.WithDeadline(b.life, earliest)
		res := b.br.RenewBatch(ctx, reqs)
		cancel()
		for i, r := range batch {
			out := leaseapi.RenewResult{Err: leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "short batch reply")}
			if i < len(res) {
				out = res[i]
			}
			r.reply <- out
		}
		clear(batch)
	}
}
