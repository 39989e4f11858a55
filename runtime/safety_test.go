package runtime_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// TestSafetyUnderFaults runs seeded scenarios in simulated time: clients
// with their own fault-injecting view of one backend contend for keys,
// act only while their handle is Active and write through a fenced
// resource. The history checker must find no overlap, no token regression
// and no stale write. A failure prints the seed and writes the history.
func TestSafetyUnderFaults(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 20
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			simtest.Simulate(t, func(t *testing.T) { safetyScenario(t, seed) })
		})
	}
}

func safetyScenario(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	var rngMu sync.Mutex
	intn := func(n int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.IntN(n)
	}
	store, _ := memory.New(memory.Options{})
	hist := simtest.NewHistory()
	keys := []leaseapi.Key{leaseapi.MustKey("safety", "a"), leaseapi.MustKey("safety", "b")}
	resources := map[leaseapi.Key]*simtest.Resource{}
	for _, k := range keys {
		resources[k] = simtest.NewResource(k.String(), hist)
	}
	p := policy(t, leaseapi.PolicyOptions{
		TTL: 4 * time.Second, SafetyMargin: 400 * time.Millisecond, RenewEvery: time.Second,
		Retry: 300 * time.Millisecond, Jitter: 200 * time.Millisecond, Wait: 30 * time.Second,
		OperationTimeout: 500 * time.Millisecond,
	})
	const clients = 4
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	var wg sync.WaitGroup
	for range clients {
		f := simtest.NewFaulty(store)
		f.SetDelay(time.Duration(intn(50)) * time.Millisecond)
		c, err := runtime.NewClient(f, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer c.Close(context.Background())
			for ctx.Err() == nil {
				k := keys[intn(len(keys))]
				h, err := c.Acquire(ctx, k, p)
				if err != nil {
					continue
				}
				hist.Grant(k, h.Owner(), h.Token(), time.Now())
				// Half the holders renew by hand, now and then or never, so
				// that holders do reach their deadline while still acting.
				var loss <-chan runtime.Loss
				var m *runtime.Managed
				if intn(2) == 0 {
					if m, err = h.StartManaged(ctx); err != nil {
						_ = h.Release(context.Background())
						continue
					}
					loss = m.Loss()
				}
				for step := intn(20); step > 0 && ctx.Err() == nil; step-- {
					switch intn(10) { // a fault on this client's next calls
					case 0:
						f.Inject(leaseapi.OperationRenew, simtest.LoseReply)
					case 1:
						f.Inject(leaseapi.OperationRenew, simtest.FailBeforeSend, simtest.FailBeforeSend)
					case 2:
						f.SetMode(simtest.Blackhole) // a partition
					case 3:
						f.SetMode(simtest.Pass)
					case 4:
						if m == nil {
							_ = h.Renew(ctx)
						}
					}
					if h.State() == leaseapi.StateActive {
						now := time.Now()
						hist.Admit(k, h.Owner(), h.Token(), now)
						_ = resources[k].Write(h.Owner(), h.Token(), "v", now)
					}
					timer := time.NewTimer(time.Duration(100+intn(900)) * time.Millisecond)
					select {
					case <-timer.C:
					case <-loss:
						timer.Stop()
						step = 0
					}
				}
				f.SetMode(simtest.Pass)
				if m != nil {
					_ = m.Stop(context.Background())
				}
				_ = h.Release(context.Background())
			}
		})
	}
	wg.Wait()
	if vs := hist.Check(); len(vs) > 0 {
		dir := t.TempDir()
		if out := os.Getenv("LEASE_TEST_ARTIFACTS"); out != "" {
			dir = out
		}
		path := filepath.Join(dir, fmt.Sprintf("history-seed-%d.json", seed))
		if fh, err := os.Create(path); err == nil {
			_ = hist.WriteJSON(fh)
			fh.Close()
		}
		t.Fatalf("seed %d: %d violations, first: %v (history: %s)", seed, len(vs), vs[0], path)
	}
	var grants, writes int
	for _, e := range hist.Events() {
		switch e.Kind {
		case simtest.Granted:
			grants++
		case simtest.Wrote:
			writes++
		}
	}
	if grants < 5 || writes < 5 {
		t.Fatalf("seed %d: scenario too thin to prove anything: %d grants, %d writes", seed, grants, writes)
	}
}
