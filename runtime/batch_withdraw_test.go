package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// gatedBatches holds every RenewBatch until the test lets one return (a
// token on gate) or its context ends, and keeps each batch's context and
// size.
type gatedBatches struct {
	gate chan struct{}

	mu    sync.Mutex
	ctxs  []context.Context
	sizes []int
}

func (g *gatedBatches) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	g.mu.Lock()
	g.ctxs, g.sizes = append(g.ctxs, ctx), append(g.sizes, len(reqs))
	g.mu.Unlock()
	out := make([]leaseapi.RenewResult, len(reqs))
	select {
	case <-g.gate:
		for i, r := range reqs {
			out[i].Record = r.Record
		}
	case <-ctx.Done():
		for i := range out {
			out[i].Err = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "batch context ended")
		}
	}
	return out
}

func (g *gatedBatches) last() (context.Context, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctxs[len(g.ctxs)-1], g.sizes[len(g.sizes)-1]
}

// TestWithdrawnRenewalLeavesItsBatchAlone: a caller of the batcher that
// is not a supervisor, whose ctx is canceled while its renewal is in a
// batch in flight, is answered at once with an error that says the
// outcome is unknown (the renewal was sent); the batch's context is not
// canceled, and the other element of the batch gets its result. A caller
// canceled while still queued is told nothing was sent (ErrCanceled), and
// is left out of the batch. The withdrawn in-flight caller has the
// earliest deadline of its batch, whose context the batch once was. Both
// kinds of batch context are covered: shared (wall clock) and own.
func TestWithdrawnRenewalLeavesItsBatchAlone(t *testing.T) {
	for _, wall := range []bool{true, false} {
		t.Run(fmt.Sprint("wall=", wall), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { withdrawFromBatch(t, wall) })
		})
	}
}

func withdrawFromBatch(t *testing.T, wall bool) {
	g := &gatedBatches{gate: make(chan struct{})}
	life, end := context.WithCancel(context.Background())
	b := newBatcher(g, clock.New(), wall, life)
	defer func() { end(); b.wait() }()
	rec := func(name string) leaseapi.Record {
		return leaseapi.Record{Key: leaseapi.MustKey("withdraw", name), Owner: "o-" + name, Token: 1}
	}
	renew := func(ctx context.Context, name string) <-chan error {
		done := make(chan error, 1)
		go func() {
			got, err := b.Renew(ctx, rec(name), time.Minute)
			if err == nil && got != rec(name) {
				err = fmt.Errorf("renewed record %v, want %v", got, rec(name))
			}
			done <- err
		}()
		return done
	}
	long, cancelLong := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelLong()
	// Every sender busy with a batch of its own.
	var blockers []<-chan error
	for i := range senders {
		blockers = append(blockers, renew(long, fmt.Sprint("blocker-", i)))
		synctest.Wait()
	}
	// a (earliest deadline) and b queue for the next batch; c queues too
	// and withdraws before it is formed.
	aCtx, cancelA := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelA()
	cCtx, cancelC := context.WithCancel(long)
	a := renew(aCtx, "a")
	synctest.Wait()
	bDone := renew(long, "b")
	c := renew(cCtx, "c")
	synctest.Wait()
	cancelC()
	synctest.Wait()
	if err := <-c; !errors.Is(err, leaseapi.ErrCanceled) {
		t.Fatalf("renewal withdrawn while queued: got %v, want ErrCanceled (nothing was sent)", err)
	}
	g.gate <- struct{}{} // blocker-0 returns; its sender forms the next batch
	synctest.Wait()
	if err := <-blockers[0]; err != nil {
		t.Fatalf("blocker-0: %v", err)
	}
	batchCtx, size := g.last()
	if size != 2 {
		t.Fatalf("batch after the withdrawal: got %d renewals, want 2 (a and b, not c)", size)
	}
	cancelA()
	synctest.Wait()
	select {
	case err := <-a:
		if leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
			t.Fatalf("renewal withdrawn in flight: got %v, want ErrAmbiguousOutcome (sent, outcome unknown)", err)
		}
	default:
		t.Fatal("renewal withdrawn in flight: its caller is still waiting")
	}
	if err := batchCtx.Err(); err != nil {
		t.Fatalf("batch context after a caller withdrew: got %v, want it still live", err)
	}
	for range senders {
		g.gate <- struct{}{} // the other blockers' batches and a's and b's
	}
	if err := <-bDone; err != nil {
		t.Fatalf("renewal batched with a withdrawn one: got %v, want its result", err)
	}
	for i, d := range blockers[1:] {
		if err := <-d; err != nil {
			t.Fatalf("blocker-%d: %v", i+1, err)
		}
	}
}

// BenchmarkWithdrawQueued withdraws 10,000 queued renewals, as happens
// when the client closes with every supervisor's renewal queued behind
// batches in flight (their ctxs end with the client's life): ns/op is
// one round of 10,000 withdrawals. A withdrawal marks its renewal rather
// than removing it from the queue; removing it scanned the queue, which
// made the round quadratic.
func BenchmarkWithdrawQueued(b *testing.B) {
	const n = 10_000
	bt := newBatcher(nil, clock.New(), false, context.Background())
	reqs := make([]*renewReq, n)
	for i := range reqs {
		reqs[i] = &renewReq{reply: make(chan leaseapi.RenewResult, 1)}
	}
	for b.Loop() {
		bt.mu.Lock()
		for _, r := range reqs {
			r.state = reqQueued
			bt.queue = append(bt.queue, r)
		}
		bt.mu.Unlock()
		for i := n - 1; i >= 0; i -= 2 { // the later half first, then the rest
			bt.abandon(reqs[i], context.Canceled)
		}
		for i := n - 2; i >= 0; i -= 2 {
			bt.abandon(reqs[i], context.Canceled)
		}
		bt.mu.Lock()
		bt.queue, bt.head = bt.queue[:0], 0
		bt.mu.Unlock()
	}
}
