package service_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

// TestFleetHandOff: three candidates on one backend. The leader crashes
// (every backend call fails from then on; it never releases): another
// leads within TTL + Retry. That leader stops cleanly: the third leads
// within one Retry (at once, thanks to the release notification). Terms
// never overlap and the history of admissions and fenced writes is clean.
func TestFleetHandOff(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, hist, res, ts, p := fleetParts(t)
		var cs []*candidate
		for i := range 3 {
			cs = append(cs, newCandidate(t, store, fmt.Sprint("c", i), p, ts, hist, res))
		}
		for _, c := range cs {
			if err := c.single.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, c := range cs {
				if err := c.single.Stop(context.Background()); err != nil {
					t.Errorf("Stop: %v", err)
				}
			}
		}()
		simtest.Advance(10 * time.Millisecond)
		ls := leaders(cs)
		if len(ls) != 1 {
			t.Fatalf("%d leaders after start, want 1", len(ls))
		}
		first := ls[0]
		simtest.Advance(time.Minute)
		if got := leaders(cs); len(got) != 1 || got[0] != first || len(ts.all()) != 1 {
			t.Fatalf("leadership changed without a fault: %d terms", len(ts.all()))
		}

		// Crash the leader.
		crashAt := time.Now()
		first.faulty.SetMode(simtest.Down)
		var second *candidate
		for second == nil && time.Since(crashAt) < time.Minute {
			simtest.Advance(100 * time.Millisecond)
			if ls := leaders(cs); len(ls) == 1 && ls[0] != first {
				second = ls[0]
			}
		}
		if second == nil {
			t.Fatal("nobody took over after the leader crashed")
		}
		all := ts.all()
		took := all[len(all)-1].start.Sub(crashAt)
		if limit := p.TTL() + p.Retry(); took > limit {
			t.Fatalf("take-over after a crash took %v, want at most TTL + Retry = %v", took, limit)
		}
		crashed := all[0]
		if crashed.end.IsZero() || crashed.end.Sub(crashAt) > p.TTL()-p.SafetyMargin() {
			t.Fatalf("crashed leader's term ended %v after the crash, want by its deadline", crashed.end.Sub(crashAt))
		}
		if k := leaseapi.Kind(crashed.cause); k != leaseapi.ErrLost {
			t.Fatalf("crashed leader's ctx cause %v, want ErrLost", crashed.cause)
		}
		if started, stopped := first.counts(); started != 1 || stopped != 1 {
			t.Fatalf("crashed leader callbacks: started %d, stopped %d", started, stopped)
		}
		t.Logf("take-over after a crash: %v", took)

		// Clean stop of the new leader.
		simtest.Advance(time.Minute)
		stopAt := time.Now()
		if err := second.single.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := second.single.Leading(); ok {
			t.Fatal("still leading after Stop")
		}
		var third *candidate
		for third == nil && time.Since(stopAt) <= p.Retry() {
			simtest.Settle()
			if ls := leaders(cs); len(ls) == 1 {
				third = ls[0]
				break
			}
			simtest.Advance(100 * time.Millisecond)
		}
		if third == nil || third == first || third == second {
			t.Fatalf("no take-over within one Retry after a clean stop")
		}
		all = ts.all()
		t.Logf("take-over after a clean stop: %v", all[len(all)-1].start.Sub(stopAt))

		// The crashed candidate comes back: it follows.
		first.faulty.SetMode(simtest.Pass)
		simtest.Advance(5 * time.Minute)
		if ls := leaders(cs); len(ls) != 1 || ls[0] != third {
			t.Fatalf("leadership moved without a fault")
		}
		checkTerms(t, ts.all())
		if vs := hist.Check(); len(vs) > 0 {
			t.Fatalf("%d history violations, first: %v", len(vs), vs[0])
		}
		if _, _, accepted := res.Value(); accepted < 100 {
			t.Fatalf("only %d fenced writes accepted", accepted)
		}
	})
}

// TestFleetChurn: seeded scenarios of four candidates over two simulated
// hours, with random crashes, partitions (blackholes), lost replies,
// recoveries and restarts (a fresh Singleton after Stop). At any time at
// most one term is open, tokens increase, the history is clean, and a
// leader exists most of the time.
func TestFleetChurn(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			simtest.Simulate(t, func(t *testing.T) { churn(t, seed) })
		})
	}
}

func churn(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5e4))
	store, hist, res, ts, p := fleetParts(t)
	var cs []*candidate
	for i := range 4 {
		c := newCandidate(t, store, fmt.Sprint("c", i), p, ts, hist, res)
		if err := c.single.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	stopAll := func() {
		for _, c := range cs {
			if err := c.single.Stop(context.Background()); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}
	}
	led := 0
	const steps = 240
	for range steps {
		c := cs[rng.IntN(len(cs))]
		switch rng.IntN(12) {
		case 0:
			c.faulty.SetMode(simtest.Down)
		case 1:
			c.faulty.SetMode(simtest.Blackhole)
		case 2:
			c.faulty.SetMode(simtest.LoseReplies)
		case 3, 4, 5:
			c.faulty.SetMode(simtest.Pass)
		case 6:
			// Restart: stop cleanly, then campaign with a fresh Singleton.
			if err := c.single.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			*c = *newCandidate(t, store, c.name, p, ts, hist, res)
			if err := c.single.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		simtest.Advance(time.Duration(5+rng.IntN(55)) * time.Second)
		if n := len(leaders(cs)); n > 1 {
			t.Fatalf("seed %d: %d candidates lead at once", seed, n)
		} else if n == 1 {
			led++
		}
	}
	stopAll()
	checkTerms(t, ts.all())
	if vs := hist.Check(); len(vs) > 0 {
		evs := hist.Events()
		for _, i := range vs[0].Events {
			t.Logf("event %+v", evs[i])
		}
		for _, tm := range ts.all() {
			t.Logf("term %s token %d [%v, %v] %v", tm.who, tm.token, tm.start.Format("15:04:05.000"), tm.end.Format("15:04:05.000"), tm.cause)
		}
		t.Fatalf("seed %d: %d history violations, first: %v", seed, len(vs), vs[0])
	}
	if led < steps/3 || len(ts.all()) < 5 {
		t.Fatalf("seed %d: scenario too thin: led at %d of %d checks, %d terms", seed, led, steps, len(ts.all()))
	}
}
