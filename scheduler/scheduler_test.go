package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/scheduler"
	"github.com/leasekit/lease/simtest"
)

func TestEveryIsAlignedToTheEpoch(t *testing.T) {
	base := time.Date(2026, 11, 30, 6, 7, 8, 9, time.UTC)
	for _, tc := range []struct {
		name string
		d    time.Duration
		at   time.Time
		want time.Time
	}{
		{"minute", time.Minute, base, time.Date(2026, 11, 30, 6, 8, 0, 0, time.UTC)},
		{"on a slot is strictly after", time.Minute, time.Date(2026, 11, 30, 6, 8, 0, 0, time.UTC), time.Date(2026, 11, 30, 6, 9, 0, 0, time.UTC)},
		{"hour", time.Hour, base, time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)},
		{"before the epoch", time.Hour, time.Unix(-5400, 0), time.Unix(-3600, 0)},
		{"other zone, same instant", time.Hour, base.In(time.FixedZone("x", 5*3600+1800)), time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)},
		{"zero interval", 0, base, time.Time{}},
		{"negative interval", -time.Second, base, time.Time{}},
	} {
		if got := scheduler.Every(tc.d).Next(tc.at); !got.Equal(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		_, err := scheduler.New(nil, scheduler.Options{})
		backendtest.WantKind(t, "New(nil client)", err, leaseapi.ErrInvalidState)
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		_, err = scheduler.New(srv.client, scheduler.Options{KeyNamespace: "a/b"})
		backendtest.WantKind(t, "New(bad namespace)", err, leaseapi.ErrInvalidState)

		p := jobPolicy(t)
		run := func(context.Context, leaseapi.Token) error { return nil }
		good := scheduler.Job{Name: "j", Schedule: scheduler.Every(time.Minute), Mode: scheduler.OnOneServer, Policy: p, Run: run}
		with := func(f func(*scheduler.Job)) scheduler.Job { j := good; f(&j); return j }
		for _, tc := range []struct {
			name string
			job  scheduler.Job
		}{
			{"empty name", with(func(j *scheduler.Job) { j.Name = "" })},
			{"slash in name", with(func(j *scheduler.Job) { j.Name = "a/b" })},
			{"control byte in name", with(func(j *scheduler.Job) { j.Name = "a\x00" })},
			{"long name", with(func(j *scheduler.Job) { j.Name = strings.Repeat("n", scheduler.MaxJobNameBytes+1) })},
			{"nil schedule", with(func(j *scheduler.Job) { j.Schedule = nil })},
			{"zero interval", with(func(j *scheduler.Job) { j.Schedule = scheduler.Every(0) })},
			{"negative interval", with(func(j *scheduler.Job) { j.Schedule = scheduler.Every(-time.Second) })},
			{"huge interval", with(func(j *scheduler.Job) { j.Schedule = scheduler.Every(scheduler.MaxInterval + 1) })},
			{"schedule without future", with(func(j *scheduler.Job) { j.Schedule = pastSchedule{} })},
			{"zero mode", with(func(j *scheduler.Job) { j.Mode = 0 })},
			{"unknown mode", with(func(j *scheduler.Job) { j.Mode = 9 })},
			{"zero policy", with(func(j *scheduler.Job) { j.Policy = leaseapi.Policy{} })},
			{"nil run", with(func(j *scheduler.Job) { j.Run = nil })},
		} {
			backendtest.WantKind(t, "Add with "+tc.name, srv.sched.Add(tc.job), leaseapi.ErrInvalidState)
		}
		if err := srv.sched.Add(good); err != nil {
			t.Fatal(err)
		}
		backendtest.WantKind(t, "Add duplicate", srv.sched.Add(good), leaseapi.ErrInvalidState)
		// Stop before Start (on s2) is allowed and prevents Start.
		s2, err := scheduler.New(srv.client, scheduler.Options{})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.CheckStartStop(t, srv.sched, s2, backendtest.StartStopHooks[*scheduler.Scheduler]{
			WhileStarted: func(s *scheduler.Scheduler) {
				backendtest.WantKind(t, "Add after Start", s.Add(with(func(j *scheduler.Job) { j.Name = "k" })), leaseapi.ErrInvalidState)
			},
		})
		// Error texts never contain the job name.
		err = srv.sched.Add(with(func(j *scheduler.Job) { j.Name = "secret-name"; j.Run = nil }))
		if strings.Contains(err.Error(), "secret") {
			t.Fatalf("error text leaks the job name: %v", err)
		}
	})
}

type pastSchedule struct{}

func (pastSchedule) Next(time.Time) time.Time { return time.Unix(0, 0) }

// TestPanicIsRecovered: a panicking job is reported as a PanicError, its
// lease is released, and the next slot runs.
func TestPanicIsRecovered(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		var runs atomic.Int32
		err := srv.sched.Add(scheduler.Job{
			Name: "p", Schedule: scheduler.Every(time.Minute), Mode: scheduler.NonOverlap, Policy: jobPolicy(t),
			Run: func(context.Context, leaseapi.Token) error {
				if runs.Add(1) == 1 {
					panic("boom")
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(2*time.Minute + time.Second)
		if runs.Load() != 2 {
			t.Fatalf("runs: got %d, want 2", runs.Load())
		}
		evs := srv.eventList()
		var pe *scheduler.PanicError
		if len(evs) < 2 || evs[0].Outcome != scheduler.Ran || !errors.As(evs[0].Err, &pe) || pe.Value != "boom" {
			t.Fatalf("first event: %+v, want Ran with a PanicError", evs)
		}
		backendtest.WantKind(t, "panic error", evs[0].Err, leaseapi.ErrInvalidState)
		if strings.Contains(evs[0].Err.Error(), "boom") {
			t.Fatal("panic value in the error text")
		}
		if evs[1].Outcome != scheduler.Ran || evs[1].Err != nil || evs[1].Token != evs[0].Token+1 {
			t.Fatalf("second event: %+v, want a clean run with the next token", evs[1])
		}
		if srv.client.Held() != 0 {
			t.Fatalf("leases held after the runs: %d", srv.client.Held())
		}
	})
}

// TestLossCancelsRun: when the backend becomes unreachable during a run,
// the run's ctx is canceled at the lease's deadline with the loss as cause,
// and the event reports ErrLost even though the job returned nil.
func TestLossCancelsRun(t *testing.T) {
	for _, mode := range []scheduler.Mode{scheduler.OnOneServer, scheduler.NonOverlap} {
		t.Run(mode.String(), func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
				p := jobPolicy(t)
				var canceledAfter time.Duration
				var cause error
				err := srv.sched.Add(scheduler.Job{
					Name: "l", Schedule: scheduler.Every(time.Hour), Mode: mode, Policy: p,
					Run: func(ctx context.Context, _ leaseapi.Token) error {
						began := time.Now()
						srv.faulty.SetMode(simtest.Down)
						<-ctx.Done()
						canceledAfter = time.Since(began)
						cause = context.Cause(ctx)
						if h := scheduler.HandleFrom(ctx); h.State() == leaseapi.StateActive {
							t.Error("ctx canceled while the lease is Active")
						}
						return nil
					},
				})
				if err != nil {
					t.Fatal(err)
				}
				backendtest.Start(t, srv.sched)
				simtest.Advance(time.Hour + time.Minute)
				if want := p.TTL() - p.SafetyMargin(); canceledAfter != want {
					t.Fatalf("ctx canceled after %v, want the deadline %v", canceledAfter, want)
				}
				if k := leaseapi.Kind(cause); k != leaseapi.ErrLost && k != leaseapi.ErrStaleOwner {
					t.Fatalf("cause: %v", cause)
				}
				evs := srv.eventList()
				if len(evs) != 1 || evs[0].Outcome != scheduler.Ran {
					t.Fatalf("events %+v", evs)
				}
				backendtest.WantKind(t, "event error", evs[0].Err, leaseapi.ErrLost)
			})
		})
	}
}

// TestStopCancelsAndReleases: Stop cancels a running job, waits for it and
// releases its lease, so another server can take the job's lease at once.
func TestStopCancelsAndReleases(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store := backendtest.MemoryStore(t)
		srv := newServer(t, store, "s", 0)
		other := newServer(t, store, "o", 0)
		p := jobPolicy(t)
		var returned atomic.Bool
		err := srv.sched.Add(scheduler.Job{
			Name: "long", Schedule: scheduler.Every(time.Minute), Mode: scheduler.NonOverlap, Policy: p,
			Run: func(ctx context.Context, _ leaseapi.Token) error {
				<-ctx.Done()
				returned.Store(true)
				return ctx.Err()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(90 * time.Second)
		if srv.client.Held() != 1 {
			t.Fatalf("held during the run: %d", srv.client.Held())
		}
		if err := srv.sched.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		simtest.Settle() // the released lease's supervisor exits
		if !returned.Load() || srv.client.Held() != 0 {
			t.Fatalf("after Stop: returned %v, held %d", returned.Load(), srv.client.Held())
		}
		k := leaseapi.MustKey(scheduler.DefaultKeyNamespace, "long/run")
		h, err := other.client.TryAcquire(t.Context(), k, p)
		if err != nil {
			t.Fatalf("job lease not released by Stop: %v", err)
		}
		_ = h.Release(t.Context())
	})
}

// TestStopTimesOut: a job that ignores its ctx makes Stop return
// ErrTimeout when its ctx ends; a later Stop waits again.
func TestStopTimesOut(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		release := make(chan struct{})
		err := srv.sched.Add(scheduler.Job{
			Name: "stubborn", Schedule: scheduler.Every(time.Minute), Mode: scheduler.OnOneServer, Policy: jobPolicy(t),
			Run: func(context.Context, leaseapi.Token) error { <-release; return nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		backendtest.WantKind(t, "Stop with a stubborn job", srv.sched.Stop(ctx), leaseapi.ErrTimeout)
		close(release)
		if err := srv.sched.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLongRunSkipsSlots: on one server, a NonOverlap run of 3.5 intervals
// makes the three slots that pass during it Missed; the next run is at the
// next slot after the run, not late.
func TestLongRunSkipsSlots(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		var starts []time.Time
		err := srv.sched.Add(scheduler.Job{
			Name: "slow", Schedule: scheduler.Every(time.Minute), Mode: scheduler.NonOverlap, Policy: jobPolicy(t),
			Run: func(ctx context.Context, _ leaseapi.Token) error {
				starts = append(starts, time.Now())
				if len(starts) == 1 {
					return backendtest.Pause(ctx, 210*time.Second)
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(6*time.Minute - time.Second)
		if len(starts) != 2 || starts[1].Sub(starts[0]) != 4*time.Minute {
			t.Fatalf("run starts %v, want two, 4 minutes apart", starts)
		}
		if n := srv.count(scheduler.Missed); n != 3 {
			t.Fatalf("missed %d slots, want 3", n)
		}
	})
}

// TestClaimRetriesWithinWait: a claim that fails for lack of a backend
// answer is retried every Retry within Wait; beyond Wait it is Failed.
func TestClaimRetriesWithinWait(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		var ranAt []time.Duration
		err := srv.sched.Add(scheduler.Job{
			Name: "r", Schedule: scheduler.Every(time.Minute), Mode: scheduler.OnOneServer, Policy: jobPolicy(t),
			Run: func(ctx context.Context, _ leaseapi.Token) error {
				slot, _ := scheduler.Slot(ctx)
				ranAt = append(ranAt, time.Since(slot))
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		srv.faulty.Inject(leaseapi.OperationAcquire, simtest.FailBeforeSend, simtest.FailBeforeSend)
		backendtest.Start(t, srv.sched)
		simtest.Advance(time.Minute + 5*time.Second)
		if len(ranAt) != 1 || ranAt[0] != 2*time.Second {
			t.Fatalf("ran %v after the slot, want once, after 2 retries (2s)", ranAt)
		}
		srv.faulty.SetMode(simtest.Down)
		simtest.Advance(time.Minute)
		evs := srv.eventList()
		if last := evs[len(evs)-1]; last.Outcome != scheduler.Failed || leaseapi.Kind(last.Err) != leaseapi.ErrBackendUnavailable {
			t.Fatalf("last event %+v, want Failed with ErrBackendUnavailable", last)
		}
		srv.faulty.SetMode(simtest.Pass)
	})
}

// TestScheduleEnds: a schedule with no further slot ends its goroutine.
func TestScheduleEnds(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		var runs atomic.Int32
		err := srv.sched.Add(scheduler.Job{
			Name: "once", Schedule: onceSchedule{at: time.Now().Add(time.Minute)}, Mode: scheduler.OnOneServer, Policy: jobPolicy(t),
			Run: func(context.Context, leaseapi.Token) error { runs.Add(1); return nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(time.Hour)
		if runs.Load() != 1 {
			t.Fatalf("runs %d, want 1", runs.Load())
		}
	})
}

type onceSchedule struct{ at time.Time }

func (s onceSchedule) Next(t time.Time) time.Time {
	if t.Before(s.at) {
		return s.at
	}
	return time.Time{}
}

// TestLateServerSkipsReleasedSlot isolates the claim rule: server A runs a
// slot and releases its lease; server B, whose clock is 30s behind, claims
// the same slot key afterwards, is granted it (token 2: nothing holds the
// key any more) and still skips it, because only token 1 runs a slot.
func TestLateServerSkipsReleasedSlot(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store := backendtest.MemoryStore(t)
		a := newServer(t, store, "a", 0)
		b := newServer(t, store, "b", -30*time.Second)
		var ran []string
		for _, srv := range []*server{a, b} {
			err := srv.sched.Add(scheduler.Job{
				Name: "j", Schedule: scheduler.Every(time.Hour), Mode: scheduler.OnOneServer, Policy: jobPolicy(t),
				Run: func(context.Context, leaseapi.Token) error { ran = append(ran, srv.name); return nil },
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		simtest.Advance(time.Minute) // both clocks in the same hour
		backendtest.Start(t, a.sched)
		backendtest.Start(t, b.sched)
		slot := scheduler.Every(time.Hour).Next(time.Now())
		simtest.Advance(time.Hour)
		if len(ran) != 1 || ran[0] != "a" {
			t.Fatalf("ran on %v, want a only", ran)
		}
		if evs := b.eventList(); len(evs) != 1 || evs[0].Outcome != scheduler.Taken || !evs[0].Slot.Equal(slot) {
			t.Fatalf("late server events %+v, want the slot Taken", evs)
		}
		k := leaseapi.MustKey(scheduler.DefaultKeyNamespace, fmt.Sprintf("j/slot/%d", slot.UnixNano()))
		rec, held, err := store.Inspect(t.Context(), k)
		if err != nil || held || rec.Token != 2 {
			t.Fatalf("slot key: token %d, held %v, err %v; want token 2 (the late claim), released", rec.Token, held, err)
		}
	})
}

// TestFarBehindWaitsForTheNextSlot: a server whose clock jumps more than
// maxCatchUp slots ahead (or that wakes that late) reports what it can as
// Missed and waits for the next slot instead of claiming it early.
func TestFarBehindWaitsForTheNextSlot(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		clk := &jumpClock{offsetClock: offsetClock{clock.New(), 0}}
		store := backendtest.MemoryStore(t)
		srv := newServer(t, store, "s", 0)
		s, err := scheduler.New(srv.client, scheduler.Options{Clock: clk, OnEvent: srv.record})
		if err != nil {
			t.Fatal(err)
		}
		var ranAt []time.Duration
		err = s.Add(scheduler.Job{Name: "j", Schedule: scheduler.Every(time.Second), Mode: scheduler.OnOneServer, Policy: jobPolicy(t),
			Run: func(ctx context.Context, _ leaseapi.Token) error {
				slot, _ := scheduler.Slot(ctx)
				ranAt = append(ranAt, clk.Now().Sub(slot))
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, s)
		simtest.Advance(500 * time.Millisecond)
		clk.jump(5 * time.Hour) // 18,000 slots pass at once
		simtest.Advance(3 * time.Second)
		for i, d := range ranAt {
			if d < 0 {
				t.Fatalf("run %d started %v before its slot", i, -d)
			}
		}
		if len(ranAt) < 2 || srv.count(scheduler.Missed) < 10_000 {
			t.Fatalf("runs %v, missed %d", ranAt, srv.count(scheduler.Missed))
		}
	})
}

// jumpClock is an offsetClock whose offset can jump.
type jumpClock struct {
	offsetClock
	mu sync.Mutex
}

func (c *jumpClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offsetClock.Now()
}
func (c *jumpClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *jumpClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
