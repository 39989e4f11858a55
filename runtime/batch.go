package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/callctx"
	"github.com/leasekit/lease/leaseapi"
)

// maxBatch bounds the renewals sent in one RenewBatch call. 1,024 rather
// than 256: with more renewals due than the backend serves, fewer and
// larger calls cost less per renewal (one round trip, one context and one
// sender wake-up for four of Valkey's 256-renewal scripts, or one
// PostgreSQL statement). Interleaved in one process, 10,000 managed
// leases with RenewEvery 1 ms (bench, renew, managed), 1,024 against
// 256: client CPU per renewal 6.1–7.9 µs against 7.7–8.9 µs on Valkey
// (three runs of six windows each), 9.2–10.2 µs against 10.4–11.6 µs on
// PostgreSQL (two runs), and renewals/s 17.5k–42.8k against 16.1k–32.0k
// on PostgreSQL. A batcher's scratch space grows to the batches it
// forms, not to maxBatch.
const maxBatch = 1024

// senders is how many RenewBatch calls of one client may be in flight at
// once: the goroutines that send them. One batch at a time left the
// backend idle while the client formed, decoded and answered a batch.
const senders = 4

// batcher coalesces the renewals of a client's supervisors into
// RenewBatch calls for backends that can renew many grants in one round
// trip. It works like group commit: a renewal that arrives while every
// sender has a batch in flight waits for the next batch, so renewals that
// fall due together share a round trip without any added delay when the
// backend is idle. Each element keeps exactly the semantics (and the
// send-time anchoring, taken by the supervisor before it enqueues) of a
// single Renew.
//
// Renewals wait in a queue, not a channel: queueing never blocks (a
// supervisor has at most one renewal queued, so the queue is bounded by
// the client's leases), and a sender takes up to maxBatch at once. A
// bounded channel made a supervisor that found it full park twice per
// renewal, first in a three-way select on the send and again for the
// reply, and every receive woke a blocked sender.
//
// The senders, started by the first renewal, take batches while the
// queue is not empty; one that takes a batch and leaves renewals queued
// wakes another. They exit when the client's life context is canceled
// (Close), answering what is still queued, and Close waits for them.
// Safe for concurrent use.
//
// A batch runs under a context of its own: the client's life bounded by
// the earliest deadline of its elements, taken as a value when each was
// queued. No caller's context is part of it, so a caller that stops
// waiting (its ctx canceled, or ended before its deadline) changes nothing
// for the others: it is answered at once — nothing was sent if it was
// still queued, the outcome is unknown if its batch was formed — and the
// batch goes on. On the wall clock that context is one shared by the
// batches whose bounds end in the same short slot (internal/callctx, as
// the supervisors' calls), so a batch makes no context of its own.
//
// The senders are goroutines of their own rather than the renewing
// goroutines taking turns (the first renewal to find a free slot sending
// the batch, and handing the next one to a queued renewal's goroutine):
// under load every hand-off then waited for that goroutine's turn among
// thousands of runnable supervisors, and 10,000 managed leases on Valkey
// renewed at a third of the rate (bench, Valkey/renew, managed).
type batcher struct {
	br   leaseapi.BatchRenewer
	clk  clock.Clock
	life context.Context
	// shared bounds the batches on the wall clock (internal/callctx);
	// nil on any other clock, where each batch gets a context of its own.
	shared *callctx.Shared

	mu sync.Mutex
	// queue[head:] are the renewals waiting for a batch, in arrival
	// order; both go back to 0 whenever it empties, keeping the array.
	queue  []*renewReq
	head   int
	closed bool // the senders are exiting: nothing more is queued
	// wake holds a token when the queue became non-empty since a sender
	// last found it empty, or a sender left renewals queued.
	wake chan struct{}

	// reqs recycles requests with their reply channels: a request goes
	// back only after its reply was received, or after it was withdrawn
	// from the queue. The pool is the batcher's own, so a channel never
	// crosses from one client (and one testing/synctest bubble) to another.
	reqs      sync.Pool
	startOnce sync.Once
	running   sync.WaitGroup // the senders
}

// reqState is where a renewal is, under batcher.mu.
type reqState uint8

const (
	reqQueued    reqState = iota // in the queue
	reqTaken                     // in a batch: its reply will come
	reqWithdrawn                 // still in the queue, but its caller has left: never sent
)

type renewReq struct {
	rec      leaseapi.Record
	ttl      time.Duration
	deadline time.Time // the caller's ctx's deadline; the batch is bounded by the earliest
	state    reqState  // under batcher.mu
	// reply receives exactly one result once r is taken; buffer 1 so a
	// caller that gave up never stalls a sender.
	reply chan leaseapi.RenewResult
}

// newBatcher returns the batcher of a client whose life is life; wall
// says clk is the wall clock.
func newBatcher(br leaseapi.BatchRenewer, clk clock.Clock, wall bool, life context.Context) *batcher {
	b := &batcher{br: br, clk: clk, life: life, wake: make(chan struct{}, 1)}
	if wall {
		b.shared = callctx.NewShared(life)
	}
	return b
}

// Renew implements the supervisor's Renewer. ctx bounds the wait for the
// batch (it carries the supervisor's OperationTimeout and trust bound),
// and its deadline, as a value, bounds the batch. A ctx already done
// sends nothing, nor does a renewal whose ctx ends while it is queued (it
// is withdrawn: ErrTimeout or ErrCanceled as ctx ended, or
// ErrInvalidState once the client closes); a ctx that ends once its batch
// is formed makes the outcome ambiguous for this renewal only, unless the
// result has come: the batch, and every other element of it, goes on.
func (b *batcher) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	const op = "renew"
	if err := ctx.Err(); err != nil {
		return leaseapi.Record{}, leaseapi.ContextError(op, err)
	}
	b.startOnce.Do(func() {
		b.running.Add(senders)
		for range senders {
			go b.send()
		}
	})
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = b.clk.Now().Add(leaseapi.MaxOperationTimeout)
	}
	r, _ := b.reqs.Get().(*renewReq)
	if r == nil {
		r = &renewReq{reply: make(chan leaseapi.RenewResult, 1)}
	}
	r.rec, r.ttl, r.deadline, r.state = rec, ttl, deadline, reqQueued
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.put(r)
		return leaseapi.Record{}, errBatcherClosed
	}
	b.queue = append(b.queue, r)
	first := len(b.queue)-b.head == 1
	b.mu.Unlock()
	if first {
		b.signal()
	}
	select {
	case res := <-r.reply:
		b.put(r)
		return res.Record, res.Err
	case <-ctx.Done():
		res := b.abandon(r, ctx.Err())
		return res.Record, res.Err
	}
}

var (
	errBatcherClosed = leaseapi.NewError("renew", leaseapi.ErrInvalidState, "client closed")
	errNotSent       = leaseapi.NewError("renew", leaseapi.ErrTimeout, "bound ended before the batch was sent")
	errBatchTimedOut = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "batched renewal sent, outcome unknown: its caller stopped waiting")
)

// signal wakes a sender, unless a token is there already.
func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// abandon is Renew's answer when its ctx ended (with cause) before r's
// result came: the result if it has come meanwhile, a definite error if r
// was still queued (it is withdrawn: never sent), else
// ErrAmbiguousOutcome. The batch r is in, if any, is not touched.
func (b *batcher) abandon(r *renewReq, cause error) leaseapi.RenewResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.state == reqTaken {
		select {
		case res := <-r.reply:
			b.put(r)
			return res
		default:
		}
		// Its batch may be on its way; its result will come to r, which
		// is therefore not reused.
		return leaseapi.RenewResult{Err: errBatchTimedOut}
	}
	// Marked, not removed: removing it would scan the queue, and a mass
	// withdrawal (every supervisor's ctx ends at Close, with thousands of
	// renewals queued) made that quadratic. The sender that reaches it
	// skips it and recycles it.
	r.state = reqWithdrawn
	if b.closed || b.life.Err() != nil {
		return leaseapi.RenewResult{Err: errBatcherClosed}
	}
	return leaseapi.RenewResult{Err: leaseapi.ContextError("renew", cause)}
}

// put returns r, which no one will send to any more, for reuse.
func (b *batcher) put(r *renewReq) {
	r.rec = leaseapi.Record{}
	b.reqs.Put(r)
}

// wait blocks until the senders, if they were ever started, have exited.
func (b *batcher) wait() {
	b.startOnce.Do(func() {}) // none start after this
	b.running.Wait()
}

// send is a sender: it takes batches of up to maxBatch, in arrival
// order, while the queue is not empty, and sends them.
func (b *batcher) send() {
	defer b.running.Done()
	var bt batch // its slices grow to the largest batch taken, and are reused
	for {
		select {
		case <-b.wake:
		case <-b.life.Done():
			b.shut()
			return
		}
		for {
			if b.life.Err() != nil {
				b.shut()
				return
			}
			b.mu.Lock()
			n := min(len(b.queue)-b.head, maxBatch)
			bt.elems = bt.elems[:0]
			for _, r := range b.queue[b.head : b.head+n] {
				if r.state == reqWithdrawn {
					b.put(r) // its caller has left: nothing to send or answer
					continue
				}
				r.state = reqTaken
				bt.elems = append(bt.elems, r)
			}
			clear(b.queue[b.head : b.head+n])
			b.head += n
			more := b.head < len(b.queue)
			if !more {
				b.queue, b.head = b.queue[:0], 0
			}
			b.mu.Unlock()
			if n == 0 {
				break
			}
			if more {
				b.signal() // another sender takes the rest meanwhile
			}
			if len(bt.elems) > 0 {
				b.run(&bt)
			}
		}
	}
}

// batch is one RenewBatch call's renewals, and scratch space for it.
type batch struct {
	elems []*renewReq
	reqs  []leaseapi.RenewRequest
}

// run sends the renewals of bt that are still wanted as one RenewBatch
// and answers every one of them.
func (b *batcher) run(bt *batch) {
	const op = "renew"
	now := b.clk.Now()
	send, reqs := bt.elems[:0], bt.reqs[:0] // filtered in place
	var first *renewReq                     // the element with the earliest deadline
	for _, r := range bt.elems {
		if !r.deadline.After(now) {
			// Its bound ended while it waited: it is not sent, and its
			// caller has been (or is being) told so.
			r.reply <- leaseapi.RenewResult{Err: errNotSent}
			continue
		}
		if first == nil || r.deadline.Before(first.deadline) {
			first = r
		}
		send = append(send, r)
		reqs = append(reqs, leaseapi.RenewRequest{Record: r.rec, TTL: r.ttl})
	}
	if len(send) > 0 {
		ctx, cancel := b.context(now, first.deadline)
		res := b.br.RenewBatch(ctx, reqs)
		if cancel != nil {
			cancel()
		}
		for i, r := range send {
			if i < len(res) {
				r.reply <- res[i]
				continue
			}
			r.reply <- leaseapi.RenewResult{Err: leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "short batch reply")}
		}
	}
	clear(bt.elems)
	clear(bt.reqs)
	bt.elems, bt.reqs = send[:0], reqs[:0]
}

// context returns the context of a batch formed at now whose earliest
// element's deadline is deadline: the client's life, ending at deadline
// (on the wall clock a shared one that may end up to 1/64 of the bound
// early, never late), and its cancel func, nil for a shared one.
func (b *batcher) context(now, deadline time.Time) (context.Context, context.CancelFunc) {
	if d := deadline.Sub(now); b.shared != nil && d >= callctx.Min {
		return b.shared.Context(now, d), nil
	}
	return b.clk.WithDeadline(b.life, deadline)
}

// shut closes the queue as a sender exits and answers the renewals still
// queued: nothing was sent.
func (b *batcher) shut() {
	b.mu.Lock()
	b.closed = true
	queued := b.queue[b.head:]
	for _, r := range queued {
		if r.state == reqWithdrawn {
			continue // its caller has left
		}
		r.state = reqTaken
		r.reply <- leaseapi.RenewResult{Err: errBatcherClosed}
	}
	b.queue, b.head = nil, 0
	b.mu.Unlock()
}
