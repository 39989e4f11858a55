package scheduler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/scheduler"
	"github.com/leasekit/lease/simtest"
)

func nopRun(context.Context, leaseapi.Token) error { return nil }

// TestZeroValues: a Scheduler not built by New (the zero value, a nil
// pointer) answers ErrInvalidState and never panics.
func TestZeroValues(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*scheduler.Scheduler{"zero": {}, "nil": nil} {
		backendtest.WantKind(t, name+" Add", s.Add(scheduler.Job{Name: "j"}), leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" Start", s.Start(ctx), leaseapi.ErrInvalidState)
		backendtest.WantKind(t, name+" Stop", s.Stop(ctx), leaseapi.ErrInvalidState)
	}
}

// tightSchedule has slots every gap since the epoch, and is not an
// Interval (Add cannot see its period).
type tightSchedule struct{ gap time.Duration }

func (s tightSchedule) Next(t time.Time) time.Time {
	return scheduler.Every(s.gap).Next(t)
}

// burstSchedule's first two slots are a second apart; after that its
// slots come every nanosecond.
type burstSchedule struct{ start time.Time }

func (s burstSchedule) Next(t time.Time) time.Time {
	if t.Before(s.start) {
		return s.start
	}
	if t.Before(s.start.Add(time.Second)) {
		return s.start.Add(time.Second)
	}
	return t.Add(time.Nanosecond)
}

// TestMinInterval: Every(1ns) (the finding: 1,160 runs and 23 M Missed
// events in 2s) and any interval below MinInterval are rejected, as is a
// schedule whose first slots are closer than it; slots of a schedule that
// later come closer than MinInterval are skipped, so runs are at least
// MinInterval apart.
func TestMinInterval(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		p := jobPolicy(t)
		for _, sch := range []scheduler.Schedule{
			scheduler.Every(time.Nanosecond),
			scheduler.Every(scheduler.MinInterval - 1),
			tightSchedule{time.Nanosecond},
			tightSchedule{scheduler.MinInterval - 1},
		} {
			err := srv.sched.Add(scheduler.Job{Name: "fast", Schedule: sch, Mode: scheduler.OnOneServer, Policy: p, Run: nopRun})
			backendtest.WantKind(t, "Add below MinInterval", err, leaseapi.ErrInvalidState)
		}
		if err := srv.sched.Add(scheduler.Job{Name: "floor", Schedule: scheduler.Every(scheduler.MinInterval), Mode: scheduler.OnOneServer, Policy: p, Run: nopRun}); err != nil {
			t.Fatalf("Add at MinInterval: %v", err)
		}
		var runs []time.Time
		err := srv.sched.Add(scheduler.Job{Name: "burst", Schedule: burstSchedule{start: time.Now().Add(time.Second)}, Mode: scheduler.OnOneServer, Policy: p,
			Run: func(ctx context.Context, _ leaseapi.Token) error {
				slot, _ := scheduler.Slot(ctx)
				runs = append(runs, slot)
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(3 * time.Second)
		if len(runs) < 50 || len(runs) > int(time.Second/scheduler.MinInterval)+3 {
			t.Fatalf("%d runs of the burst schedule in 3s, want at most one per MinInterval after the first two", len(runs))
		}
		for i := 1; i < len(runs); i++ {
			if gap := runs[i].Sub(runs[i-1]); gap < scheduler.MinInterval {
				t.Fatalf("runs %d and %d %v apart, below MinInterval", i-1, i, gap)
			}
		}
	})
}

// TestIntervalNextPastRange: past 2262 Next used to wrap around (the
// finding: 1678); now it has no slot, and before 1678 it returns the first
// representable slot, which is after t. Never an instant before t.
func TestIntervalNextPastRange(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2262, 4, 11, 23, 47, 16, 854775807, time.UTC), // MaxInt64 ns
		time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		for _, d := range []time.Duration{scheduler.MinInterval, time.Minute, time.Hour, scheduler.MaxInterval} {
			if got := scheduler.Every(d).Next(at); !got.IsZero() {
				t.Errorf("Every(%v).Next(%v) = %v, want no slot", d, at, got)
			}
		}
	}
	for _, at := range []time.Time{
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1677, 9, 21, 0, 12, 43, 145224191, time.UTC), // MinInt64 ns - 1
	} {
		for _, d := range []time.Duration{scheduler.MinInterval, time.Minute, time.Hour, scheduler.MaxInterval} {
			got := scheduler.Every(d).Next(at)
			if !got.After(at) || got.UnixNano()%int64(d) != 0 {
				t.Errorf("Every(%v).Next(%v) = %v, want a slot after t", d, at, got)
			}
		}
	}
}

// panicSchedule panics from its nth call to Next on.
type panicSchedule struct {
	calls *atomic.Int32
	from  int32
}

func (s panicSchedule) Next(t time.Time) time.Time {
	if s.calls.Add(1) >= s.from {
		panic("cron broke")
	}
	return scheduler.Every(time.Minute).Next(t)
}

// TestSchedulePanicIsRecovered: a Schedule.Next that panics in Add is
// ErrInvalidState; one that panics later is reported as a Failed event with
// a PanicError and ends the job, without crashing the process and without
// another run.
func TestSchedulePanicIsRecovered(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		p := jobPolicy(t)
		err := srv.sched.Add(scheduler.Job{Name: "a", Schedule: panicSchedule{calls: new(atomic.Int32), from: 1}, Mode: scheduler.OnOneServer, Policy: p, Run: nopRun})
		backendtest.WantKind(t, "Add with a panicking schedule", err, leaseapi.ErrInvalidState)

		var runs atomic.Int32
		// Add calls Next twice, the loop once for the first slot, once when
		// it is due (is a later slot due too?) and once after the run: the
		// fifth call panics.
		err = srv.sched.Add(scheduler.Job{Name: "b", Schedule: panicSchedule{calls: new(atomic.Int32), from: 5}, Mode: scheduler.OnOneServer, Policy: p,
			Run: func(context.Context, leaseapi.Token) error { runs.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, srv.sched)
		simtest.Advance(10 * time.Minute)
		if runs.Load() != 1 {
			t.Fatalf("%d runs, want 1 (then the schedule panicked)", runs.Load())
		}
		// A panic before a due slot runs it not: the job ends at once.
		var calls atomic.Int32
		s2, err := scheduler.New(srv.client, scheduler.Options{KeyNamespace: "other", OnEvent: srv.record})
		if err != nil {
			t.Fatal(err)
		}
		err = s2.Add(scheduler.Job{Name: "c", Schedule: panicSchedule{calls: &calls, from: 4}, Mode: scheduler.OnOneServer, Policy: p,
			Run: func(context.Context, leaseapi.Token) error { runs.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, s2)
		simtest.Advance(10 * time.Minute)
		if runs.Load() != 1 || calls.Load() != 4 {
			t.Fatalf("%d runs, %d calls of Next; want no run after the panic and no further call", runs.Load()-1, calls.Load())
		}
		evs := srv.eventList()
		if len(evs) != 3 || evs[0].Outcome != scheduler.Ran || evs[1].Outcome != scheduler.Failed || evs[2].Outcome != scheduler.Failed {
			t.Fatalf("events %+v, want ran, failed (b), failed (c)", evs)
		}
		var pe *scheduler.PanicError
		if !errors.As(evs[1].Err, &pe) || pe.Callback != "Schedule.Next" || pe.Value != "cron broke" {
			t.Fatalf("panic report %v", evs[1].Err)
		}
		backendtest.WantKind(t, "Schedule.Next panic", evs[1].Err, leaseapi.ErrInvalidState)
	})
}

// TestOnEventPanicIsRecovered: a panicking OnEvent does not crash the
// process; it is reported once more (Failed, PanicError) and the job goes
// on with its next slot.
func TestOnEventPanicIsRecovered(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		var n atomic.Int32
		s, err := scheduler.New(srv.client, scheduler.Options{OnEvent: func(e scheduler.Event) {
			srv.record(e)
			if n.Add(1) == 1 {
				panic("observer broke")
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		err = s.Add(scheduler.Job{Name: "j", Schedule: scheduler.Every(time.Minute), Mode: scheduler.NonOverlap, Policy: jobPolicy(t),
			Run: func(context.Context, leaseapi.Token) error { runs.Add(1); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		backendtest.Start(t, s)
		simtest.Advance(2*time.Minute + time.Second)
		evs := srv.eventList()
		if runs.Load() != 2 || len(evs) != 3 || evs[0].Outcome != scheduler.Ran || evs[1].Outcome != scheduler.Failed || evs[2].Outcome != scheduler.Ran {
			t.Fatalf("runs %d, events %+v; want 2 runs: ran, failed (the panic), ran", runs.Load(), evs)
		}
		var pe *scheduler.PanicError
		if !errors.As(evs[1].Err, &pe) || pe.Callback != "OnEvent" {
			t.Fatalf("panic report %v", evs[1].Err)
		}
		if srv.client.Held() != 0 {
			t.Fatalf("%d leases held", srv.client.Held())
		}
	})
}

// zoneClock reads the (simulated) real clock in a time zone, as a server
// whose time.Local is that zone would.
type zoneClock struct {
	clock.Clock
	loc *time.Location
}

func (c zoneClock) Now() time.Time { return c.Clock.Now().In(c.loc) }

// dailyAt is a naive "every day at hour:00" schedule, as users write them:
// it reads the wall clock of t's location.
type dailyAt struct{ hour int }

func (s dailyAt) Next(t time.Time) time.Time {
	n := time.Date(t.Year(), t.Month(), t.Day(), s.hour, 0, 0, 0, t.Location())
	if !n.After(t) {
		n = time.Date(t.Year(), t.Month(), t.Day()+1, s.hour, 0, 0, 0, t.Location())
	}
	return n
}

// TestSlotsInUTC: two servers, one whose clock reads UTC and one whose
// clock reads New York time, share a "daily at 09:00" job. Both pick the
// same slot, 09:00Z, so the job runs once a day (the finding: 09:00Z on
// the UTC server and 14:00Z on the New York one, two runs a day). With
// Job.Location naming New York, both pick 09:00 New York (14:00Z).
func TestSlotsInUTC(t *testing.T) {
	newYork := time.FixedZone("EST", -5*3600)
	for _, tc := range []struct {
		name     string
		loc      *time.Location
		wantHour int // of each run's slot, in UTC
	}{
		{"default UTC", nil, 9},
		{"named location", newYork, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				store := backendtest.MemoryStore(t)
				var slots []time.Time
				var ranOn []string
				for _, z := range []struct {
					name string
					loc  *time.Location
				}{{"utc", time.UTC}, {"new-york", newYork}} {
					clk := zoneClock{clock.New(), z.loc}
					client, _ := backendtest.FaultyClient(t, store, runtime.ClientOptions{Clock: clk})
					s, err := scheduler.New(client, scheduler.Options{Clock: clk})
					if err != nil {
						t.Fatal(err)
					}
					err = s.Add(scheduler.Job{Name: "daily", Schedule: dailyAt{9}, Location: tc.loc, Mode: scheduler.OnOneServer, Policy: jobPolicy(t),
						Run: func(ctx context.Context, _ leaseapi.Token) error {
							slot, _ := scheduler.Slot(ctx)
							slots = append(slots, slot)
							ranOn = append(ranOn, z.name)
							return nil
						}})
					if err != nil {
						t.Fatal(err)
					}
					backendtest.Start(t, s)
				}
				simtest.Advance(72 * time.Hour)
				if len(slots) != 3 {
					t.Fatalf("%d runs in 3 days (%v on %v), want 3", len(slots), slots, ranOn)
				}
				for _, slot := range slots {
					if u := slot.UTC(); u.Hour() != tc.wantHour || u.Minute() != 0 {
						t.Fatalf("slot %v, want %02d:00Z", u, tc.wantHour)
					}
				}
			})
		})
	}
}

// TestFailedAttemptsAreReported: each claim attempt that fails for lack
// of a backend answer (a misconfigured or unreachable backend) is
// reported as Retrying with its error, then the slot as Failed: nothing is
// retried silently.
func TestFailedAttemptsAreReported(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		err := srv.sched.Add(scheduler.Job{Name: "j", Schedule: scheduler.Every(time.Minute), Mode: scheduler.OnOneServer, Policy: jobPolicy(t), Run: nopRun})
		if err != nil {
			t.Fatal(err)
		}
		srv.faulty.SetMode(simtest.Down)
		backendtest.Start(t, srv.sched)
		simtest.Advance(time.Minute + 10*time.Second)
		evs := srv.eventList()
		// Retry 1s within Wait 5s: attempts at +0s..+4s are retried, the
		// one at +4s is the last (a pause would end past the Wait).
		if len(evs) != 5 || evs[4].Outcome != scheduler.Failed {
			t.Fatalf("events %+v, want 4 Retrying then Failed", evs)
		}
		for i, e := range evs {
			if i < 4 && e.Outcome != scheduler.Retrying {
				t.Fatalf("event %d: %+v, want Retrying", i, e)
			}
			backendtest.WantKind(t, "attempt error", e.Err, leaseapi.ErrBackendUnavailable)
		}
		srv.faulty.SetMode(simtest.Pass)
	})
}

// TestReleaseErrorIsReported: a run's release that fails, definitely or
// ambiguously, is reported in the run's Event.ReleaseErr; when Stop ended
// the run, Stop returns it too.
func TestReleaseErrorIsReported(t *testing.T) {
	for _, tc := range []struct {
		fault simtest.Fault
		want  error
	}{
		{simtest.FailBeforeSend, leaseapi.ErrBackendUnavailable},
		{simtest.LoseReply, leaseapi.ErrAmbiguousOutcome},
	} {
		t.Run(tc.want.Error(), func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
				var runs atomic.Int32
				err := srv.sched.Add(scheduler.Job{Name: "j", Schedule: scheduler.Every(time.Minute), Mode: scheduler.NonOverlap, Policy: jobPolicy(t),
					Run: func(ctx context.Context, _ leaseapi.Token) error {
						if runs.Add(1) == 2 {
							<-ctx.Done() // the second run lasts until Stop
						}
						srv.faulty.Inject(leaseapi.OperationRelease, tc.fault)
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.sched.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				simtest.Advance(time.Minute + time.Second)
				evs := srv.eventList()
				if len(evs) != 1 || evs[0].Outcome != scheduler.Ran {
					t.Fatalf("events %+v, want one run", evs)
				}
				backendtest.WantKind(t, "ReleaseErr of the first run", evs[0].ReleaseErr, tc.want)
				simtest.Advance(time.Minute) // the second run starts
				err = srv.sched.Stop(t.Context())
				backendtest.WantKind(t, "Stop after a failed release", err, tc.want)
				if err := srv.sched.Stop(t.Context()); err != nil {
					t.Fatalf("second Stop: %v, want nil (reported once)", err)
				}
			})
		})
	}
}

// ptrSchedule has a pointer receiver that reads its field: a nil one
// would panic.
type ptrSchedule struct{ d time.Duration }

func (s *ptrSchedule) Next(t time.Time) time.Time { return scheduler.Every(s.d).Next(t) }

// TestTypedNilSchedule: a nil *ptrSchedule in Job.Schedule is "nil
// schedule" (ErrInvalidState), as a nil Schedule is.
func TestTypedNilSchedule(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		srv := newServer(t, backendtest.MemoryStore(t), "s", 0)
		var sch *ptrSchedule
		err := srv.sched.Add(scheduler.Job{Name: "j", Schedule: sch, Mode: scheduler.OnOneServer, Policy: jobPolicy(t), Run: nopRun})
		backendtest.WantKind(t, "Add(typed nil schedule)", err, leaseapi.ErrInvalidState)
		if err := srv.sched.Add(scheduler.Job{Name: "k", Schedule: &ptrSchedule{time.Minute}, Mode: scheduler.OnOneServer, Policy: jobPolicy(t), Run: nopRun}); err != nil {
			t.Fatalf("Add(a *ptrSchedule): %v", err)
		}
	})
}
