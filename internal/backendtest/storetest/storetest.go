// Package storetest holds the helpers the real backends' own tests
// (backend/valkey, backend/postgres) repeated: the runtime hand-off check
// (a waiter parked in runtime.Client.Acquire is woken by the holder's
// release through its Store's release watch), runtime clients closed at the
// end of the test, and the fan-out and CPU accounting of the renewal
// benchmarks. Only tests import it; it knows no concrete backend.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// SignalSleeper is the real sleeper (a timer, cut short by the release
// watch or ctx) plus a signal each time a waiter starts sleeping, so that a
// test knows the waiter lost its attempt and is parked on its release
// watch. Sleeping has buffer 1 and is sent to without blocking, so a signal
// nobody reads never stalls the waiter. It is safe for concurrent use.
type SignalSleeper struct{ Sleeping chan struct{} }

// NewSignalSleeper returns a SignalSleeper with its buffer-1 channel.
func NewSignalSleeper() SignalSleeper {
	return SignalSleeper{Sleeping: make(chan struct{}, 1)}
}

// Sleep implements [leaseapi.Sleeper]: it signals, then returns nil after d
// or when wake receives, or ctx's error when ctx ends first.
func (s SignalSleeper) Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	select {
	case s.Sleeping <- struct{}{}:
	default:
	}
	return runtime.NewSleeper(nil).Sleep(ctx, d, wake)
}

// NewClient returns a runtime client on b, closed (bounded by 5s) when tb
// ends; a construction error fails tb.
func NewClient(tb testing.TB, b leaseapi.Backend, o runtime.ClientOptions) *runtime.Client {
	tb.Helper()
	c, err := runtime.NewClient(b, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// Handoff is a holder and a waiter on two runtime clients, each on its own
// Store of one backend (two processes, in effect), under one policy whose
// retry interval (1s) is far longer than a notified hand-off takes.
type Handoff struct {
	Holder, Waiter *runtime.Client
	// Sleeper is the Waiter's: it signals when the waiter is parked.
	Sleeper SignalSleeper
	// Policy is TTL 10s, Wait 5s, Retry 1s.
	Policy leaseapi.Policy
}

// NewHandoff returns a Handoff whose holder runs on holder and whose waiter
// runs on waiter; both clients are closed when tb ends. The waiter's Store
// must already be listening for releases (warm it first), or the first
// hand-off may wait for the retry interval.
func NewHandoff(tb testing.TB, holder, waiter leaseapi.Backend) *Handoff {
	tb.Helper()
	sleeper := NewSignalSleeper()
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, Wait: 5 * time.Second, Retry: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	return &Handoff{
		Holder:  NewClient(tb, holder, runtime.ClientOptions{}),
		Waiter:  NewClient(tb, waiter, runtime.ClientOptions{Sleeper: sleeper}),
		Sleeper: sleeper,
		Policy:  p,
	}
}

// Once hands h (the holder's handle of k) over: the waiter calls Acquire
// for k on its own goroutine, and once it is parked the holder releases h.
// It returns the waiter's handle and the time from the release call to the
// waiter holding the lease. It waits for the waiter's Acquire, bounded by
// ctx and the policy's Wait; an error of the release or of the waiter's
// Acquire is returned as is, and a waiter that acquires without waiting is
// an error too (the waiter's goroutine has exited whenever Once returns).
func (x *Handoff) Once(ctx context.Context, h *runtime.Handle, k leaseapi.Key) (*runtime.Handle, time.Duration, error) {
	type result struct {
		h   *runtime.Handle
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() { // exits when the waiter's Acquire returns
		h, err := x.Waiter.Acquire(ctx, k, x.Policy)
		got <- result{h, err, time.Now()}
	}()
	select {
	case <-x.Sleeper.Sleeping: // the waiter lost its first attempt and waits
	case r := <-got: // it never waited: h was not live, or ctx ended
		if r.err == nil {
			_ = r.h.Release(ctx)
			return nil, 0, errors.New("the waiter acquired without waiting")
		}
		return nil, 0, r.err
	}
	start := time.Now()
	if err := h.Release(ctx); err != nil {
		if r := <-got; r.err == nil {
			_ = r.h.Release(ctx)
		}
		return nil, 0, err
	}
	r := <-got
	if r.err != nil {
		return nil, 0, r.err
	}
	return r.h, r.at.Sub(start), nil
}

// CheckHandoff runs five hand-offs of k from x's holder to its waiter and
// fails t unless every waiter gets a higher token than the holder it
// followed and the median latency is under 100ms (the retry interval is
// 1s: only a release notification is that fast). The median, not every
// sample, so that one scheduling hiccup on a loaded machine does not fail
// the run while a missed notification still does; maxEach > 0 also bounds
// every sample. Each latency is logged.
func (x *Handoff) CheckHandoff(t *testing.T, k leaseapi.Key, maxEach time.Duration) {
	t.Helper()
	ctx := t.Context()
	var lats []time.Duration
	for range 5 {
		h, err := x.Holder.Acquire(ctx, k, x.Policy)
		if err != nil {
			t.Fatal(err)
		}
		next, lat, err := x.Once(ctx, h, k)
		if err != nil {
			t.Fatalf("hand-off: %v", err)
		}
		t.Logf("release -> waiter holds the lease: %v", lat)
		lats = append(lats, lat)
		if maxEach > 0 && lat > maxEach {
			t.Fatalf("handoff took %v, want at most %v (far less than the 1s retry interval)", lat, maxEach)
		}
		if next.Token() <= h.Token() {
			t.Fatalf("token: got %d, want > %d", next.Token(), h.Token())
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(lats)
	if med := lats[len(lats)/2]; med > 100*time.Millisecond {
		t.Fatalf("handoff median %v (all: %v), want < 100ms with a 1s retry interval", med, lats)
	}
}

// Parallel calls f(i) for every i in [0, n) from workers goroutines and
// returns when all have exited: nil, or the first error a worker met (a
// worker stops at its error; the others run on to the end). Each index is
// given to exactly one call.
func Parallel(workers, n int, f func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, workers)
	for range workers {
		go func() { // exits after its error or when no index is left
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					errs <- nil
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// BenchRenewBatch is the measured part of a RenewBatch benchmark: each
// b.Loop iteration renews every request of reqs with one s.RenewBatch call,
// failing b on any element's error; then a [RenewMeter] (server as for
// [StartRenewMeter]) started just before the loop reports per renewal.
func BenchRenewBatch(b *testing.B, s leaseapi.BatchRenewer, reqs []leaseapi.RenewRequest, server func() time.Duration) {
	benchRenew(b, len(reqs), server, func(ctx context.Context) error {
		for i, r := range s.RenewBatch(ctx, reqs) {
			if r.Err != nil {
				return fmt.Errorf("element %d: %w", i, r.Err)
			}
		}
		return nil
	})
}

// BenchRenewConcurrent is [BenchRenewBatch] with one s.Renew call per
// request, from 64 goroutines ([Parallel]), for comparison with it.
func BenchRenewConcurrent(b *testing.B, s leaseapi.Backend, reqs []leaseapi.RenewRequest, server func() time.Duration) {
	benchRenew(b, len(reqs), server, func(ctx context.Context) error {
		return Parallel(64, len(reqs), func(i int) error {
			_, err := s.Renew(ctx, reqs[i].Record, reqs[i].TTL)
			return err
		})
	})
}

// benchRenew runs renewAll, which renews n leases, once per b.Loop
// iteration under a RenewMeter, failing b on its error.
func benchRenew(b *testing.B, n int, server func() time.Duration, renewAll func(ctx context.Context) error) {
	ctx := context.Background()
	b.ReportAllocs()
	m := StartRenewMeter(server)
	var renewals int64
	for b.Loop() {
		if err := renewAll(ctx); err != nil {
			b.Fatal(err)
		}
		renewals += int64(n)
	}
	m.Report(b, renewals)
}

// StartManaged acquires n leases through c, the i-th named key(i), with
// workers concurrent callers, and starts the managed renewal of each. It
// returns the handles in index order, or the first error (the handles
// already started keep running until c is closed).
func StartManaged(ctx context.Context, c *runtime.Client, p leaseapi.Policy, workers, n int, key func(i int) leaseapi.Key) ([]*runtime.Handle, error) {
	handles := make([]*runtime.Handle, n)
	err := Parallel(workers, n, func(i int) error {
		h, err := c.TryAcquire(ctx, key(i), p)
		if err == nil {
			_, err = h.StartManaged(ctx)
		}
		if err != nil {
			return err
		}
		handles[i] = h
		return nil
	})
	return handles, err
}

// CPUTime is this process's user+system CPU time (0 if the OS cannot tell).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RenewMeter measures a renewal benchmark: renewals/s and the CPU each
// renewal costs in this process and in the server. It is not safe for
// concurrent use.
type RenewMeter struct {
	server     func() time.Duration
	start      time.Time
	cpu0, srv0 time.Duration
}

// StartRenewMeter starts measuring now. server reads the server's CPU time
// (0 when it cannot be read, e.g. a remote server).
func StartRenewMeter(server func() time.Duration) *RenewMeter {
	return &RenewMeter{server: server, start: time.Now(), cpu0: CPUTime(), srv0: server()}
}

// Report reports renewals/s, client-cpu-ns/renewal and, when the server's
// CPU time can be read, server-cpu-ns/renewal for the renewals made since
// the meter started.
func (m *RenewMeter) Report(b *testing.B, renewals int64) {
	el := time.Since(m.start)
	cpu := CPUTime() - m.cpu0
	b.ReportMetric(float64(renewals)/el.Seconds(), "renewals/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(renewals), "client-cpu-ns/renewal")
	if srv := m.server(); srv > 0 {
		b.ReportMetric(float64((srv-m.srv0).Nanoseconds())/float64(renewals), "server-cpu-ns/renewal")
	}
}
