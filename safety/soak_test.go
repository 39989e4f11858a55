package safety_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// envSoak sets the duration of TestRealNemesisSoak per backend (a Go
// duration, e.g. 30m); without it the test runs a short smoke version.
const envSoak = "LEASE_SAFETY_SOAK"

// soakSmoke is the smoke version's duration per backend.
const soakSmoke = 10 * time.Second

// TestRealNemesisSoak is the randomised nemesis soak on real servers: six
// clients, each behind its own fault proxy, contend for three keys with
// managed holders (renewing while they write, for 100ms–1.5s) and short
// jobs (acquire, one to three writes, release), every write going to the
// key's fenced resource with the holder's token. One admission in 25 is
// followed by a stall of TTL/2–2×TTL before its write (a paused holder),
// so that the resource's fencing is exercised too. Meanwhile a seeded
// nemesis picks, every 20–400ms, a client and a fault: a delay of 5–150ms
// ± up to 100ms, a blackhole of 50ms–2.5×TTL, a one-shot cut after the
// next request (committed, reply lost), a reset of its connections, or a
// heal; or it freezes the server itself (SIGSTOP, 50ms–1.5×TTL, then
// SIGCONT). Faults on a proxy last until a later heal or their span ends.
//
// At the end every proxy is healed, the server resumed, and a fresh client
// must acquire every key (retrying for up to 5s). Then the history checker
// (simtest.History: grant order, overlap, ungranted admission, stale
// write) and the server's audit (C1 on the server's log, C4: every
// acknowledged mutation in it, every ambiguous one settled) must be clean.
//
// LEASE_SAFETY_SOAK sets the duration per backend (default 10s);
// LEASE_SAFETY_SEED replays the nemesis' schedule and the clients' choices
// (their timing against the real servers cannot be replayed). A soak of a
// minute or more must also have produced ambiguous mutations that
// committed and that did not (C6), or it proved little.
func TestRealNemesisSoak(t *testing.T) {
	d := soakSmoke
	if v := os.Getenv(envSoak); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envSoak, v)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
	}
	t.Logf("seed %d, %v per backend (replay the schedule: %s=%d %s=%v go test -run '^TestRealNemesisSoak$' ./safety)", seed, d, envSeed, seed, envSoak, d)
	for _, kind := range []string{"valkey", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			soak(t, newRealEnv(t, kind, time.Second), seed, d)
		})
	}
}

// soakStats counts what a soak did.
type soakStats struct {
	acquires, grants, acquireFails     atomic.Int64
	writes, writesRejected, admissions atomic.Int64
	holderPauses                       atomic.Int64
	mu                                 sync.Mutex
	faults                             map[string]int
}

func (s *soakStats) fault(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[name]++
}

func (s *soakStats) faultSummary() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	n := 0
	for k, v := range s.faults {
		names = append(names, fmt.Sprintf("%s %d", k, v))
		n += v
	}
	sort.Strings(names)
	return n, strings.Join(names, ", ")
}

func soak(t *testing.T, e *realEnv, seed uint64, d time.Duration) {
	keys := []leaseapi.Key{leaseapi.MustKey("soak", "a"), leaseapi.MustKey("soak", "b"), leaseapi.MustKey("soak", "c")}
	const nClients = 6
	clients := make([]*realClient, nClients)
	for i := range clients {
		clients[i] = e.client(fmt.Sprintf("c%d", i))
	}
	st := &soakStats{faults: map[string]int{}}
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	start := time.Now()

	var wg sync.WaitGroup
	for i, c := range clients {
		rng := newSeeded(seed, c.name)
		wg.Go(func() { soakWorker(ctx, e, c, keys, rng, st, i) })
	}
	var resume func()
	wg.Go(func() { resume = nemesis(ctx, e, clients, seed, st) })
	wg.Wait()

	// Heal: every proxy passes, the server runs.
	for _, c := range clients {
		c.proxy.Pass()
	}
	resume()
	healed := time.Now()
	fresh := e.client("fresh")
	for _, k := range keys {
		// Acquire retries contention and unavailability within its Wait
		// (the policy's); eventually retries an Acquire that failed
		// otherwise, within 5s in all.
		var h *runtime.Handle
		var failed []string
		err := eventually(5*time.Second, func() error {
			actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			if h, err = fresh.c.Acquire(actx, k, e.policy); err != nil {
				failed = append(failed, fmt.Sprint(leaseapi.Kind(err)))
			}
			return err
		})
		if len(failed) > 0 {
			t.Logf("fresh acquire of %v: failed attempts before the last: %v", k, failed)
		}
		if err != nil {
			t.Errorf("fresh acquire of %v %v after the heal: %v", k, time.Since(healed).Round(time.Millisecond), err)
			// Who kept the key: every call on it from 3s before the heal.
			t.Logf("the calls on %v since 3s before the heal at %s:", k, healed.Format("15:04:05.000"))
			for _, c := range e.calls.snapshot() {
				if c.Key == k.String() && c.Sent.After(healed.Add(-3*time.Second)) {
					t.Logf("  %s %s owner %s token %d sent %s returned %s: %v %s (expires %s)", c.Client, c.Op, c.Owner, c.Token,
						c.Sent.Format("15:04:05.000"), c.Returned.Format("15:04:05.000"), c.Outcome, c.Err, c.Expires.Format("15:04:05.000"))
				}
			}
			continue
		}
		e.granted(h)
		if e.admit(h) {
			if err := e.write(h, "fresh"); err != nil {
				t.Errorf("fresh write with token %d: %v", h.Token(), err)
			}
		}
		pause(context.Background(), time.Millisecond)
		_ = h.Release(context.Background())
	}
	// Close every client (releasing what it holds) so that no call is in
	// flight when the audit is read.
	for _, c := range append(clients, fresh) {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.c.Close(cctx)
		cancel()
	}

	vs := e.hist.Check()
	if len(vs) > 0 {
		t.Errorf("%d history violations (seed %d), first: %v", len(vs), seed, vs[0])
		e.writeHistory()
	}
	res, audited := e.checkAudit(false)
	nFaults, faults := st.faultSummary()
	t.Logf("%s soak %v, seed %d: %d backend mutations, %d acquisitions (%d granted, %d failed), %d admissions, %d holder pauses, %d writes (%d rejected); %d faults: %s; ambiguous mutations: %d committed, %d not committed, %d undecided",
		e.kind, time.Since(start).Round(time.Millisecond), seed, len(e.calls.snapshot()), st.acquires.Load(), st.grants.Load(), st.acquireFails.Load(),
		st.admissions.Load(), st.holderPauses.Load(), st.writes.Load(), st.writesRejected.Load(), nFaults, faults, res.committed, res.notCommitted, res.undecided)
	if st.grants.Load() < 10 {
		t.Errorf("only %d grants: too thin to prove anything", st.grants.Load())
	}
	if audited && d >= time.Minute && (res.committed == 0 || res.notCommitted == 0) {
		t.Errorf("C6: a soak of %v produced %d ambiguous mutations that committed and %d that did not: it needs both", d, res.committed, res.notCommitted)
	}
}

// soakWorker is one client's workload until ctx ends: pick a key, acquire
// it, then hold it under managed renewal or run a short job, writing to
// the key's resource while admitted, and release.
func soakWorker(ctx context.Context, e *realEnv, c *realClient, keys []leaseapi.Key, rng *seeded, st *soakStats, i int) {
	for ctx.Err() == nil {
		k := keys[rng.intn(len(keys))]
		managed := rng.intn(2) == 0
		st.acquires.Add(1)
		h, err := c.c.Acquire(ctx, k, e.policy)
		if err != nil {
			st.acquireFails.Add(1)
			pause(ctx, rng.between(5*time.Millisecond, 50*time.Millisecond))
			continue
		}
		st.grants.Add(1)
		e.granted(h)
		work := func() {
			if e.admit(h) {
				st.admissions.Add(1)
				if rng.intn(25) == 0 {
					// The holder stalls between its admission check
					// and its write (a GC pause, SIGSTOP): only the
					// resource's fencing protects the data now.
					st.holderPauses.Add(1)
					pause(ctx, rng.between(e.policy.TTL()/2, 2*e.policy.TTL()))
				}
				st.writes.Add(1)
				if err := e.write(h, c.name); err != nil {
					st.writesRejected.Add(1)
				}
			}
		}
		if managed {
			if _, err := h.StartManaged(ctx); err == nil {
				end := time.Now().Add(rng.between(100*time.Millisecond, 1500*time.Millisecond))
				for time.Now().Before(end) && !h.State().Terminal() && ctx.Err() == nil {
					work()
					pause(ctx, 20*time.Millisecond)
				}
			}
		} else {
			for range 1 + rng.intn(3) {
				work()
				pause(ctx, rng.between(10*time.Millisecond, 50*time.Millisecond))
			}
		}
		pause(context.Background(), time.Millisecond)
		rctx, cancel := context.WithTimeout(context.Background(), e.policy.TTL())
		_ = h.Release(rctx)
		cancel()
	}
}

// nemesis applies seeded random faults until ctx ends and returns the
// function that resumes the server if it is frozen then.
func nemesis(ctx context.Context, e *realEnv, clients []*realClient, seed uint64, st *soakStats) (resume func()) {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	ttl := e.policy.TTL()
	healAt := make([]time.Time, len(clients))
	freeze, thaw := e.vk.Pause, e.vk.Resume
	if e.kind == "postgres" {
		freeze, thaw = e.pg.Pause, e.pg.Resume
	}
	resume = func() {
		if err := thaw(); err != nil {
			e.t.Errorf("resume the server: %v", err)
		}
	}
	for {
		if !pause(ctx, between(20*time.Millisecond, 400*time.Millisecond)) {
			return resume
		}
		now := time.Now()
		for i, at := range healAt {
			if !at.IsZero() && now.After(at) {
				clients[i].proxy.Pass()
				healAt[i] = time.Time{}
			}
		}
		i := rng.IntN(len(clients))
		p := clients[i].proxy
		switch f := rng.IntN(12); {
		case f < 3:
			p.Delay(between(5*time.Millisecond, 150*time.Millisecond), between(0, 100*time.Millisecond)+1)
			healAt[i] = now.Add(between(50*time.Millisecond, 2*ttl))
			st.fault("delay")
		case f < 5:
			p.Blackhole()
			healAt[i] = now.Add(between(50*time.Millisecond, ttl*5/2))
			st.fault("blackhole")
		case f < 8:
			p.CutAfterRequest()
			st.fault("cut")
		case f < 9:
			p.ResetAll()
			st.fault("reset")
		case f < 11:
			p.Pass()
			healAt[i] = time.Time{}
			st.fault("heal")
		default:
			span := between(50*time.Millisecond, ttl*3/2)
			if err := freeze(); err != nil {
				e.t.Errorf("freeze the server: %v", err)
				return resume
			}
			st.fault("server-stop")
			pause(context.Background(), span) // not ctx: always resume
			resume()
		}
	}
}
