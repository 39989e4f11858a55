package bench

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
)

// sizes are a workload's parameters. defaultSizes are the benchmark's;
// the smoke test shrinks them.
type sizes struct {
	seqPairs   int           // seq: pairs per variant per round
	conc       int           // par, renew: goroutines
	parSlice   time.Duration // par: duration per variant per round
	leases     int           // renew: leases held, each renewed once per round
	window     time.Duration // renew, managed: measurement window per round
	contenders int           // handoff: contenders for one key
	hold       time.Duration // handoff: how long a holder keeps the lease
	handSlice  time.Duration // handoff: duration per variant per round
	poll       time.Duration // handoff: pause after a busy TryAcquire
	yieldCap   time.Duration // handoff: longest a releaser stands aside
	jitter     time.Duration // handoff: then U(0, jitter) more
	ttl        time.Duration // seq, par, handoff: lease TTL
	renewTTL   time.Duration // renew: lease TTL
	// oneRenewal (the smoke test's) makes a managed window end only once
	// a renewal was counted in it (or ctx ended): on a loaded machine a
	// server can stall for longer than a tiny window, and the smoke test
	// asks only that renewals happen. The benchmark's windows are fixed.
	oneRenewal bool
	warmup     int // seq, par: unmeasured pairs per variant (per goroutine in par)
}

var defaultSizes = sizes{
	seqPairs: 500, conc: 64, parSlice: time.Second,
	leases: 10_000, window: 2 * time.Second,
	contenders: 8, hold: time.Millisecond, handSlice: 2 * time.Second,
	poll: time.Millisecond, yieldCap: time.Second, jitter: 10 * time.Millisecond,
	ttl: 10 * time.Second, renewTTL: 30 * time.Second, warmup: 10,
}

// variant is one layer bound to the locker the single-client workloads
// (seq, par, renew) use.
//
// An operation that fails is counted in ec (or t.errs) and the workload
// goes on, as the peers harness does: on a loaded machine a call can run
// out of its OperationTimeout, and one such call must not discard a run.
// The error a slice returns is the benchmark's end (a measurement failed).
type variant struct {
	name  string
	seq   func(ctx context.Context, names []string, lat []time.Duration, ec *errCount) int64
	par   func(ctx context.Context, conc int, d time.Duration, base string, ec *errCount) int64
	renew func(ctx context.Context, m meter, t, rel *tally, conc int, names []string) error
}

// errCount counts a layer's failed operations and keeps the first error.
type errCount struct {
	n     atomic.Int64
	first firstError
}

func (e *errCount) add(err error) {
	e.n.Add(1)
	e.first.put(err)
}

func bindOne[H any, L locker[H]](name string, l L) variant {
	return variant{
		name: name,
		seq: func(ctx context.Context, names []string, lat []time.Duration, ec *errCount) int64 {
			return seqSlice[H](ctx, l, names, lat, ec)
		},
		par: func(ctx context.Context, conc int, d time.Duration, base string, ec *errCount) int64 {
			return parSlice[H](ctx, l, conc, d, base, ec)
		},
		renew: func(ctx context.Context, m meter, t, rel *tally, conc int, names []string) error {
			return renewSlice[H](ctx, m, t, rel, l, conc, names)
		},
	}
}

// pair acquires and releases name.
func pair[H any, L locker[H]](ctx context.Context, l L, name string) error {
	h, err := l.tryAcquire(ctx, name)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if err := l.release(ctx, &h); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// seqSlice runs one pair per name, one after another, records the
// latency of the n pairs that succeeded in lat[:n] (len(lat) >=
// len(names)) and returns n.
func seqSlice[H any, L locker[H]](ctx context.Context, l L, names []string, lat []time.Duration, ec *errCount) int64 {
	n := 0
	for _, name := range names {
		t0 := time.Now()
		if err := pair[H](ctx, l, name); err != nil {
			ec.add(err)
			continue
		}
		lat[n] = time.Since(t0)
		n++
	}
	return int64(n)
}

// parSlice runs conc goroutines, each doing pairs on keys of its own
// (base, its number, a counter) until d has passed, and returns the pairs
// done.
func parSlice[H any, L locker[H]](ctx context.Context, l L, conc int, d time.Duration, base string, ec *errCount) int64 {
	var done atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time // written before start is closed
	for g := range conc {
		wg.Go(func() {
			buf := make([]byte, 0, len(base)+24)
			buf = append(buf, base...)
			buf = strconv.AppendInt(buf, int64(g), 10)
			buf = append(buf, ':')
			head := len(buf)
			<-start
			n := int64(0)
			for i := int64(0); time.Now().Before(deadline); i++ {
				buf = strconv.AppendInt(buf[:head], i, 10)
				if err := pair[H](ctx, l, string(buf)); err != nil {
					ec.add(err)
					continue
				}
				n++
			}
			done.Add(n)
		})
	}
	deadline = time.Now().Add(d)
	close(start)
	wg.Wait()
	return done.Load()
}

// forEach calls f(i) for every i in [0, n) from conc goroutines and
// returns the first error (the others stop at their next call).
func forEach(n, conc int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first firstError
	for range conc {
		wg.Go(func() {
			for !first.set() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.put(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return first.get()
}

// firstError keeps the first of the errors of several goroutines.
type firstError struct {
	mu  sync.Mutex
	err error
	on  atomic.Bool
}

func (e *firstError) put(err error) {
	e.mu.Lock()
	if e.err == nil {
		e.err = err
		e.on.Store(true)
	}
	e.mu.Unlock()
}

func (e *firstError) set() bool { return e.on.Load() }

func (e *firstError) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// renewSlice acquires one lease per name (not measured), renews each once
// from conc goroutines (measured in t), and releases them all from conc
// goroutines (measured in rel: the teardown rate the peers harness reports
// too).
func renewSlice[H any, L locker[H]](ctx context.Context, m meter, t, rel *tally, l L, conc int, names []string) error {
	held := make([]H, len(names))
	got := make([]bool, len(names))
	_ = forEach(len(names), conc, func(i int) error {
		h, err := l.tryAcquire(ctx, names[i])
		if err != nil {
			t.errs.add(fmt.Errorf("acquire: %w", err))
			return nil
		}
		held[i], got[i] = h, true
		return nil
	})
	each := func(tl *tally, what string, f func(h *H) error) error {
		return m.measure(ctx, tl, func() (int64, error) {
			var ok atomic.Int64
			_ = forEach(len(names), conc, func(i int) error {
				if !got[i] {
					return nil
				}
				if err := f(&held[i]); err != nil {
					tl.errs.add(fmt.Errorf("%s: %w", what, err))
					return nil
				}
				ok.Add(1)
				return nil
			})
			return ok.Load(), nil
		})
	}
	err := each(t, "renew", func(h *H) error { return l.renew(ctx, h) })
	if rerr := each(rel, "release", func(h *H) error { return l.release(ctx, h) }); err == nil {
		err = rerr
	}
	return err
}

// managedSlice acquires one lease per name through a new Client on b
// (which counts its renewals in cnt) and starts managed renewal on each
// with RenewEvery 1ms, so that every lease is always due (not measured);
// then it counts the renewals done during sz.window (measured); then it
// closes the Client, which stops renewal and releases every lease (not
// measured; stopping 10,000 leases one by one would wait for the renewal
// in flight of each). At the end of the window no lease may be lost or
// expired; how many were uncertain (a renewal without a reply within
// OperationTimeout: the overload this workload creates on purpose can
// cause that) is returned.
func managedSlice(ctx context.Context, m meter, t *tally, b lease.Backend, cnt *renewCount, ns string, sz sizes, names []string) (uncertain int, err error) {
	p, err := lease.NewPolicy(lease.PolicyOptions{TTL: sz.renewTTL, SafetyMargin: sz.renewTTL / 10,
		OperationTimeout: sz.renewTTL / 4, MaxAttempts: 1, RenewEvery: time.Millisecond})
	if err != nil {
		return 0, err
	}
	c, err := newClient(b, lease.MaxClientManaged)
	if err != nil {
		return 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := c.Close(cctx); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	handles := make([]*lease.Handle, len(names))
	// Acquire everything first, then start managed renewal on everything:
	// with renewal always due, acquisitions made meanwhile would queue
	// behind the renewals.
	if err := forEach(len(names), sz.conc, func(i int) error {
		k, err := lease.NewKey(ns, names[i])
		if err != nil {
			return err
		}
		if handles[i], err = c.TryAcquire(ctx, k, p); err != nil {
			t.errs.add(fmt.Errorf("acquire: %w", err))
			handles[i] = nil
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if err := forEach(len(names), sz.conc, func(i int) error {
		if handles[i] == nil {
			return nil
		}
		if _, err := handles[i].StartManaged(ctx); err != nil {
			return fmt.Errorf("start managed: %w", err)
		}
		return nil
	}); err != nil {
		return 0, err
	}
	var calls int64
	err = m.measure(ctx, t, func() (int64, error) {
		r0, c0 := cnt.renewed.Load(), cnt.calls.Load()
		time.Sleep(sz.window) // renewals run on the supervisors' own timers meanwhile
		if sz.oneRenewal {
			cnt.waitPast(ctx, r0)
		}
		calls = cnt.calls.Load() - c0
		return cnt.renewed.Load() - r0, nil
	})
	t.calls += calls
	if err != nil {
		return 0, err
	}
	for _, h := range handles {
		if h == nil {
			continue
		}
		switch s := h.State(); s {
		case lease.StateActive:
		case lease.StateUncertain:
			uncertain++
		default:
			return uncertain, fmt.Errorf("a managed lease is %v after the window", s)
		}
	}
	return uncertain, nil
}

// contenders is one layer bound to the lockers of the handoff workload,
// one per contender (each with its own connections), waiting by polling
// TryAcquire or with the layer's own acquire.
type contenders struct {
	name string
	run  func(ctx context.Context, sz sizes, key string, ec *errCount) (handoffResult, error)
}

func bindMany[H any, L locker[H]](name string, ls []L, block bool) contenders {
	return contenders{name: name, run: func(ctx context.Context, sz sizes, key string, ec *errCount) (handoffResult, error) {
		return handoffSlice[H](ctx, ls, block, sz, key, ec)
	}}
}

// handoffResult is one handoff slice.
type handoffResult struct {
	acquisitions int64
	hand         []time.Duration
	waitMax      time.Duration
}

// handoffState is shared by the contenders of one slice.
type handoffState struct {
	mu      sync.Mutex
	ch      chan struct{} // closed and replaced at every acquisition
	recs    []acqRec      // every acquisition, in order (the lease is exclusive)
	last    uint64        // the previous acquisition's token
	viol    string        // the first token violation
	waitMax time.Duration
}

// acqRec is one acquisition: by whom, when its acquire returned, when its
// release returned (zero until then).
type acqRec struct {
	g        int
	acq, rel time.Time
}

// acquired records an acquisition by g, checks its token and returns its
// number.
func (s *handoffState) acquired(g int, tok uint64, at time.Time, waited time.Duration) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := int64(len(s.recs))
	s.recs = append(s.recs, acqRec{g: g, acq: at})
	if tok <= s.last && s.viol == "" {
		s.viol = fmt.Sprintf("acquisition %d got token %d after token %d", k, tok, s.last)
	}
	s.last = tok
	s.waitMax = max(s.waitMax, waited)
	close(s.ch)
	s.ch = make(chan struct{})
	return k
}

func (s *handoffState) released(k int64, at time.Time) {
	s.mu.Lock()
	s.recs[k].rel = at
	s.mu.Unlock()
}

func (s *handoffState) waited(d time.Duration) {
	s.mu.Lock()
	s.waitMax = max(s.waitMax, d)
	s.mu.Unlock()
}

// handoffs returns, for every acquisition by another contender than the
// previous one, the time from the previous release returning to this
// acquire returning (0 when the acquire returned first, as the peers
// harness counts it).
func (s *handoffState) handoffs() []time.Duration {
	var out []time.Duration
	for k := 1; k < len(s.recs); k++ {
		prev, cur := s.recs[k-1], s.recs[k]
		if prev.g == cur.g || prev.rel.IsZero() {
			continue
		}
		out = append(out, max(cur.acq.Sub(prev.rel), 0))
	}
	return out
}

// waitPast waits until acquisition k+1 exists, or cap passes, or ctx ends.
func (s *handoffState) waitPast(ctx context.Context, k int64, cap time.Duration) {
	t := time.NewTimer(cap)
	defer t.Stop()
	for {
		s.mu.Lock()
		if int64(len(s.recs)) > k+1 {
			s.mu.Unlock()
			return
		}
		ch := s.ch
		s.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// handoffSlice runs the contenders on key for sz.handSlice, as the peers
// harness's handoff workload does.
//
// A failed acquire or release is counted in ec; the contender pauses 1ms
// (after a failed acquire) and goes on. A fencing violation (a token not
// above the previous acquisition's) or two holders at once fail the slice.
func handoffSlice[H any, L locker[H]](ctx context.Context, ls []L, block bool, sz sizes, key string, ec *errCount) (handoffResult, error) {
	end := time.Now().Add(sz.handSlice)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	st := &handoffState{ch: make(chan struct{})}
	var inside, overlap atomic.Int64
	var wg sync.WaitGroup
	for g, l := range ls {
		wg.Go(func() {
			acquire := func() (H, error) {
				if block {
					return l.acquire(runCtx, key)
				}
				t := time.NewTimer(sz.poll)
				defer t.Stop()
				for {
					h, err := l.tryAcquire(runCtx, key)
					if !errors.Is(err, errBusy) {
						return h, err
					}
					t.Reset(sz.poll)
					select {
					case <-runCtx.Done():
						return h, runCtx.Err()
					case <-t.C:
					}
				}
			}
			for runCtx.Err() == nil {
				t0 := time.Now()
				h, err := acquire()
				if err != nil {
					// A layer may see the slice's deadline a moment before
					// runCtx reports it (valkey-go times a call out by the
					// deadline itself): that is the end of the slice too.
					if runCtx.Err() == nil && time.Now().Before(end) {
						ec.add(fmt.Errorf("contender %d acquire: %w", g, err))
						time.Sleep(time.Millisecond)
						continue
					}
					st.waited(time.Since(t0)) // the end of the slice cut this wait short
					return
				}
				at := time.Now()
				k := st.acquired(g, l.token(&h), at, at.Sub(t0))
				if inside.Add(1) != 1 {
					overlap.Add(1)
				}
				time.Sleep(sz.hold)
				inside.Add(-1)
				if err := l.release(context.WithoutCancel(ctx), &h); err != nil {
					ec.add(fmt.Errorf("contender %d release: %w", g, err))
				}
				st.released(k, time.Now())
				st.waitPast(runCtx, k, sz.yieldCap)
				if sz.jitter > 0 {
					select {
					case <-runCtx.Done():
					case <-time.After(time.Duration(mrand.Int64N(int64(sz.jitter)))):
					}
				}
			}
		})
	}
	wg.Wait()
	if st.viol != "" {
		return handoffResult{}, errors.New("fencing violation: " + st.viol)
	}
	if n := overlap.Load(); n > 0 {
		return handoffResult{}, fmt.Errorf("%d acquisitions overlapped another holder", n)
	}
	return handoffResult{acquisitions: int64(len(st.recs)), hand: st.handoffs(), waitMax: st.waitMax}, nil
}
