package supervisor

import (
	"context"
	"errors"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
)

// poolRig is a wall-clock Config on a memory store, with a policy.
type poolRig struct {
	store *memory.Store
	cfg   *Config
	p     leaseapi.Policy
	stop  context.CancelFunc
}

func newPoolRig(t *testing.T) *poolRig {
	t.Helper()
	store, _ := memory.New(memory.Options{})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Minute, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	life, stop := context.WithCancel(context.Background())
	cfg := (&Config{Backend: store, Clock: clock.New(), WallClock: true, Life: life}).Defaults()
	return &poolRig{store: store, cfg: cfg, p: p, stop: stop}
}

// start grants key i and starts its supervisor.
func (r *poolRig) start(t *testing.T, i int) *Supervisor {
	t.Helper()
	s, err := r.startErr(i)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (r *poolRig) startErr(i int) (*Supervisor, error) {
	sent := time.Now()
	g, err := r.store.TryAcquire(context.Background(), leaseapi.MustKey("pool", strconv.Itoa(i)), "owner", r.p.TTL())
	if err != nil {
		return nil, err
	}
	return Start(r.cfg, r.p, Grant{Record: g, SentAt: sent, RecvAt: time.Now()}), nil
}

// wantParked waits until the bubble is idle and checks that want
// goroutines of the pool are parked.
func (r *poolRig) wantParked(t *testing.T, want int32, when string) {
	t.Helper()
	synctest.Wait()
	if got := r.cfg.pool.parked.Load(); got != want {
		t.Fatalf("parked goroutines %s: got %d, want %d", when, got, want)
	}
}

// parkTwo starts three leases and releases two: their goroutines park
// while the third, returned, is held.
func (r *poolRig) parkTwo(t *testing.T) *Supervisor {
	t.Helper()
	held, a, b := r.start(t, 100), r.start(t, 0), r.start(t, 1)
	release(t, a)
	release(t, b)
	r.wantParked(t, 2, "while a lease is held")
	return held
}

// release releases s and waits for its actor to exit.
func release(t *testing.T, s *Supervisor) {
	t.Helper()
	if err := releaseErr(s); err != nil {
		t.Fatal(err)
	}
}

func releaseErr(s *Supervisor) error {
	err := s.Release(context.Background())
	<-s.Done()
	return err
}

// TestPoolReusesGoroutine: while another lease is held, the lease started
// after one has ended runs on the goroutine the ended one's actor ran on
// (it was parked), and a lease started while no goroutine is parked gets a
// new one: one goroutine serves one lease at a time.
func TestPoolReusesGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPoolRig(t)
		held := r.start(t, 100)
		release(t, r.start(t, 0))
		r.wantParked(t, 1, "after one lease")
		a := r.start(t, 1) // taken by the parked goroutine
		r.wantParked(t, 0, "while its lease is held")
		b := r.start(t, 2) // none parked: a goroutine of its own
		if a.State(time.Now()) != leaseapi.StateActive || b.State(time.Now()) != leaseapi.StateActive {
			t.Fatal("a lease started on the pool is not active")
		}
		release(t, a)
		release(t, b)
		r.wantParked(t, 2, "after two concurrent leases")
		release(t, held)
		r.cfg.Wait() // the last lease ended: every goroutine exits
		r.stop()
	})
}

// TestPoolBound: however many leases ended at once, at most poolIdle
// goroutines stay parked; the others exit.
func TestPoolBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPoolRig(t)
		held := r.start(t, 1000)
		n := poolIdle + 40
		sups := make([]*Supervisor, n)
		for i := range sups {
			sups[i] = r.start(t, i)
		}
		var wg sync.WaitGroup
		for _, s := range sups {
			wg.Go(func() {
				if err := releaseErr(s); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		r.wantParked(t, poolIdle, "after poolIdle+40 leases ended at once")
		release(t, held)
		r.cfg.Wait()
		r.stop()
	})
}

// TestPoolLastLeaseDismisses: when the last running actor of a Config
// ends, every parked goroutine exits without the Config's life ending, so
// a client that is never closed has no goroutine left once its leases are
// over (synctest.Test would otherwise fail: blocked goroutines remain).
func TestPoolLastLeaseDismisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPoolRig(t)
		c := r.parkTwo(t)
		release(t, c)
		r.cfg.Wait()
		r.wantParked(t, 0, "after the last lease")
		r.stop()
	})
}

// TestPoolLastLeaseRace: leases that start and end concurrently, from
// many goroutines, never leave a goroutine parked once the last has ended
// (the dismissal races the goroutines that are about to park and the
// leases that start meanwhile).
func TestPoolLastLeaseRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPoolRig(t)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					s, err := r.startErr(g*1000 + i)
					if err == nil {
						err = releaseErr(s)
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		r.cfg.Wait()
		r.stop()
	})
}

// TestPoolLifeEnds: when life ends, the lease still held is released on
// close and, the last to end, dismisses every parked goroutine at once
// (Config.Wait returns without any time passing).
func TestPoolLifeEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPoolRig(t)
		held := r.parkTwo(t)
		start := time.Now()
		r.stop()
		r.cfg.Wait()
		<-held.Done()
		if d := time.Since(start); d != 0 {
			t.Fatalf("goroutines exited %v after life ended, want at once", d)
		}
		if st := held.View().State; st != leaseapi.StateReleased {
			t.Fatalf("the lease held at close is %v, want released", st)
		}
	})
}

// TestPoolActorGoexit: an actor whose goroutine ends inside a backend
// call (runtime.Goexit, as a test backend's t.FailNow would) is still
// counted out, so that the goroutines parked meanwhile are dismissed once
// the other leases end, without the Config's life ending (a parked
// goroutine waits for its dismissal alone: synctest.Test would fail with
// it blocked, and Wait would not return).
func TestPoolActorGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPoolRig(t)
		r.cfg.Renewer = goexitRenewer{}
		held := r.start(t, 100)
		gone := r.start(t, 0)
		if err := gone.Renew(context.Background()); !errors.Is(err, leaseapi.ErrLost) {
			t.Fatalf("renew whose call ended the actor's goroutine: got %v, want ErrLost", err)
		}
		<-gone.Done()
		release(t, r.start(t, 1))
		r.wantParked(t, 1, "while a lease is held")
		release(t, held)
		r.cfg.Wait()
		r.wantParked(t, 0, "after the last lease")
		r.stop()
	})
}

// goexitRenewer ends the goroutine that calls it.
type goexitRenewer struct{}

func (goexitRenewer) Renew(context.Context, leaseapi.Record, time.Duration) (leaseapi.Record, error) {
	goruntime.Goexit()
	return leaseapi.Record{}, nil
}

// TestNoPoolOffWallClock: any other clock has no pool: each actor runs on
// a goroutine of its own that ends with it.
func TestNoPoolOffWallClock(t *testing.T) {
	cfg := (&Config{Clock: clock.NewMock()}).Defaults()
	if cfg.pool != nil {
		t.Fatal("a Config on a mock clock has a goroutine pool")
	}
}
