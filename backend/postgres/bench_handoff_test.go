package postgres_test

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// BenchmarkHandoffDistribution is the handoff workload of ../../bench (8
// contenders on one key, each with a pool, Store and Client of its own,
// holding it 1ms, a waiting Client.Acquire with Retry 10ms, standing
// aside after a release until another contender acquired, then U(0,
// 10ms)), run for 3s per iteration, with the distribution of the
// hand-off latency (the previous holder's Release returned → the next
// holder's Acquire returned): mean, p50, p90, p99, and how many took
// longer than 5ms (a waiter that learnt of the release from its 10ms
// retry timer rather than a notification), and the server's transactions
// per acquisition (attempts, marks, releases: pg_stat_database).
func BenchmarkHandoffDistribution(b *testing.B) {
	url := dbURL(b)
	direct := newPool(b, url)
	_, opts := newStore(b, url, direct)
	const contenders = 8
	clients := make([]*runtime.Client, contenders)
	for i := range clients {
		s, err := postgres.New(newPool(b, url), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		c, err := runtime.NewClient(s, runtime.ClientOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close(context.Background()) })
		clients[i] = c
	}
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, OperationTimeout: time.Second,
		Wait: leaseapi.MaxWait, Retry: 10 * time.Millisecond, MaxAttempts: leaseapi.MaxAttempts})
	if err != nil {
		b.Fatal(err)
	}
	xacts := func() int64 {
		var n int64
		if err := direct.QueryRow(context.Background(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	var all, rels []time.Duration
	var acqs int
	var xa int64
	var took time.Duration
	for i := 0; b.Loop(); i++ {
		k := leaseapi.MustKey("handoff", fmt.Sprint("k", i))
		x0, t0 := xacts(), time.Now()
		hand, rel, n := handoffRun(b, clients, k, p, 3*time.Second)
		took += time.Since(t0)
		xa += xacts() - x0
		all, rels, acqs = append(all, hand...), append(rels, rel...), acqs+n
	}
	slices.Sort(all)
	if len(all) == 0 {
		b.Fatal("no hand-offs")
	}
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
	b.ReportMetric(float64(xa)/float64(acqs), "xacts/acq")
}

// handoffRun runs the contenders on k for d and returns the hand-off
// latencies, the releases' latencies and the number of acquisitions.
func handoffRun(b *testing.B, clients []*runtime.Client, k leaseapi.Key, p leaseapi.Policy, d time.Duration) (hand, rels []time.Duration, count int) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu      sync.Mutex
		next    = make(chan struct{}) // closed and replaced at every acquisition
		lastRel time.Time             // the previous release's return
		lastBy  = -1
	)
	var wg sync.WaitGroup
	for g, c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				h, err := c.Acquire(ctx, k, p)
				if err != nil {
					return
				}
				at := time.Now()
				mu.Lock()
				if lastBy != g && !lastRel.IsZero() {
					hand = append(hand, max(at.Sub(lastRel), 0))
				}
				count++
				mine := count
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
				rels = append(rels, lastRel.Sub(r0))
				ch := next
				stale := count != mine
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
	return hand, rels, count
}
