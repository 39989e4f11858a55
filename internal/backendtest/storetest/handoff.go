package storetest

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// HandoffDistribution is the handoff workload of ../../bench run on the
// given Stores of one backend, one contender each (each Store with
// connections of its own, as separate processes would have): 8 of them
// on one key, each holding it 1ms with a waiting Client.Acquire (Retry
// 10ms), standing aside after a release until another contender acquired,
// then U(0, 10ms); 3s per iteration. It reports the distribution of the
// hand-off latency (the previous holder's Release returned → the next
// holder's Acquire returned): mean, p50, p90, p99, and the share that
// took longer than 5ms (a waiter that learnt of the release from its
// retry timer rather than a notification); the waiters' pauses cut short
// by a release notification and those that ran out on the retry timer,
// per acquisition; the Releases' latency; the Acquires' p99 and longest
// wait; and the
// server's operations per acquisition, as serverOps counts them (named
// unit, for example "xacts/acq" or "scripts/acq").
func HandoffDistribution(b *testing.B, stores []leaseapi.Backend, serverOps func() int64, unit string) {
	b.Helper()
	var woken, timedOut atomic.Int64
	clients := make([]*runtime.Client, len(stores))
	for i, s := range stores {
		clients[i] = NewClient(b, s, runtime.ClientOptions{Sleeper: countingSleeper{&woken, &timedOut}})
	}
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, OperationTimeout: time.Second,
		Wait: leaseapi.MaxWait, Retry: 10 * time.Millisecond, MaxAttempts: leaseapi.MaxAttempts})
	if err != nil {
		b.Fatal(err)
	}
	var all, rels, waits []time.Duration
	var acqs int
	var ops int64
	var took time.Duration
	for i := 0; b.Loop(); i++ {
		k := leaseapi.MustKey("handoff", fmt.Sprint("k", i))
		o0, t0 := serverOps(), time.Now()
		r := handoffRun(b, clients, k, p, 3*time.Second)
		took += time.Since(t0)
		ops += serverOps() - o0
		all, rels, waits, acqs = append(all, r.hand...), append(rels, r.rels...), append(waits, r.waits...), acqs+r.count
	}
	if len(all) == 0 || len(rels) == 0 {
		b.Fatal("no hand-offs")
	}
	slices.Sort(all)
	var sum time.Duration
	slow := 0
	for _, d := range all {
		sum += d
		if d > 5*time.Millisecond {
			slow++
		}
	}
	q := func(f float64) float64 { return float64(all[int(f*float64(len(all)-1))].Microseconds()) }
	slices.Sort(rels)
	var rsum time.Duration
	for _, d := range rels {
		rsum += d
	}
	b.ReportMetric(float64(rsum.Microseconds())/float64(len(rels)), "release-mean-us")
	b.ReportMetric(float64(rels[len(rels)*9/10].Microseconds()), "release-p90-us")
	b.ReportMetric(float64(acqs)/took.Seconds(), "acq/s")
	b.ReportMetric(float64(sum.Microseconds())/float64(len(all)), "handoff-mean-us")
	b.ReportMetric(q(0.5), "handoff-p50-us")
	b.ReportMetric(q(0.9), "handoff-p90-us")
	b.ReportMetric(q(0.99), "handoff-p99-us")
	b.ReportMetric(float64(slow)/float64(len(all)), "handoff-over-5ms/handoff")
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1e3, "wait-p99-ms")
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1e3, "wait-max-ms")
	b.ReportMetric(float64(woken.Load())/float64(acqs), "notified-wakes/acq")
	b.ReportMetric(float64(timedOut.Load())/float64(acqs), "timer-wakes/acq")
	b.ReportMetric(float64(ops)/float64(acqs), unit)
}

// countingSleeper is the real sleeper, counting the pauses a release
// notification cut short and those that ran their full length.
type countingSleeper struct{ woken, timedOut *atomic.Int64 }

func (s countingSleeper) Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
		s.woken.Add(1)
	case <-t.C:
		s.timedOut.Add(1)
	}
	return nil
}

// handoffResult is one run of the contenders.
type handoffResult struct {
	hand, rels, waits []time.Duration // hand-off latencies; Release latencies; Acquire latencies
	count             int             // acquisitions
}

// handoffRun runs the contenders on k for d.
func handoffRun(b *testing.B, clients []*runtime.Client, k leaseapi.Key, p leaseapi.Policy, d time.Duration) handoffResult {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu      sync.Mutex
		r       handoffResult
		next    = make(chan struct{}) // closed and replaced at every acquisition
		lastRel time.Time             // the previous release's return
		lastBy  = -1
	)
	var wg sync.WaitGroup
	for g, c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				h, err := c.Acquire(ctx, k, p)
				if err != nil {
					return
				}
				at := time.Now()
				mu.Lock()
				if lastBy != g && !lastRel.IsZero() {
					r.hand = append(r.hand, max(at.Sub(lastRel), 0))
				}
				r.waits = append(r.waits, at.Sub(t0))
				r.count++
				mine := r.count
				close(next)
				next = make(chan struct{})
				mu.Unlock()
				time.Sleep(time.Millisecond) // the hold
				r0 := time.Now()
				if err := h.Release(context.WithoutCancel(ctx)); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lastRel, lastBy = time.Now(), g
				r.rels = append(r.rels, lastRel.Sub(r0))
				ch := next
				stale := r.count != mine
				mu.Unlock()
				if !stale { // stand aside until another acquired (at most 1s)
					select {
					case <-ch:
					case <-time.After(time.Second):
					case <-ctx.Done():
					}
				}
				select {
				case <-time.After(time.Duration(mrand.Int64N(int64(10 * time.Millisecond)))):
				case <-ctx.Done():
				}
			}
		})
	}
	wg.Wait()
	return r
}
