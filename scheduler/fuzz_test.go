package scheduler_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/scheduler"
)

// FuzzEveryNext checks the slots of Every(d) for any interval and any
// instant t whose Unix nanoseconds fit an int64 (1678 to 2262: outside that
// range time.Time.UnixNano, which Next is defined by, is undefined; a
// scheduler's t comes from a clock). The package has no schedule decoder
// (no cron syntax) to fuzz.
//
//   - Never panics. An interval d <= 0 or above MaxInterval has no slot
//     (the zero time), whatever t.
//   - For a valid d, s = Next(t) is after t and at most d after it, a
//     multiple of d since the epoch, and the same for t in any time zone.
//   - Boundaries: Next(s-1ns) = s, Next(s-d) = s (the previous slot leads
//     to s), Next(s) = s+d.
//
// Long tier: go test -run '^$' -fuzz '^FuzzEveryNext$' -fuzztime 30s ./scheduler
func FuzzEveryNext(f *testing.F) {
	now := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC).UnixNano()
	for _, s := range []struct {
		d, n int64
		zone int32
	}{
		{int64(time.Minute), now, 0},
		{int64(time.Minute), now + 1, 3600},
		{int64(time.Hour), now - 1, -5 * 3600},
		{int64(24 * time.Hour), now, 5*3600 + 1800}, // a day is not a local day
		{1, now, 0},
		{1, math.MaxInt64 - 1, 0},
		{int64(7 * time.Second), 0, 0}, // the epoch is a slot
		{int64(7 * time.Second), -1, 0},
		{int64(7 * time.Second), -7e9, 0}, // a slot before the epoch
		{int64(7 * time.Second), -7e9 - 1, 0},
		{int64(scheduler.MaxInterval), now, 0},
		{int64(scheduler.MaxInterval), math.MinInt64, 0},
		{int64(scheduler.MaxInterval), math.MaxInt64 - int64(scheduler.MaxInterval), 0},
		{int64(scheduler.MaxInterval), math.MaxInt64, 0}, // the next slot is past 2262
		{int64(scheduler.MaxInterval) + 1, now, 0},       // too long: no slot
		{0, now, 0},
		{-int64(time.Second), now, 0},
		{math.MinInt64, math.MinInt64, 0},
		{math.MaxInt64, math.MaxInt64, 0},
	} {
		f.Add(s.d, s.n, s.zone)
	}
	f.Fuzz(func(t *testing.T, d, n int64, zone int32) {
		at := time.Unix(0, n)
		if d <= 0 || d > int64(scheduler.MaxInterval) {
			if got := scheduler.Every(time.Duration(d)).Next(at); !got.IsZero() {
				t.Fatalf("Every(%v).Next(%v) = %v, want no slot for an invalid interval", time.Duration(d), n, got.UnixNano())
			}
			// Go on with a valid interval made of the same bits, so that
			// the fuzzer's draws of d are not wasted.
			d = 1 + int64(uint64(d)%uint64(scheduler.MaxInterval))
		}
		iv := scheduler.Every(time.Duration(d))
		// Is the next slot, (floor(n/d)+1)*d, past MaxInt64 nanoseconds?
		q := n / d
		if n < 0 && n%d != 0 {
			q--
		}
		if q >= math.MaxInt64/d {
			// The next slot is after 2262-04-11: Next must say "no slot"
			// (zero), never wrap around to an instant before t.
			if got := iv.Next(at); !got.IsZero() {
				t.Fatalf("Every(%v).Next(%d) = %d past the representable range, want the zero time", time.Duration(d), n, got.UnixNano())
			}
			return
		}
		s := iv.Next(at)
		switch {
		case !s.After(at):
			t.Fatalf("Every(%v).Next(%d) = %d, not after t", time.Duration(d), n, s.UnixNano())
		case s.Sub(at) > time.Duration(d):
			t.Fatalf("Every(%v).Next(%d) = %d, more than the interval after t", time.Duration(d), n, s.UnixNano())
		case s.UnixNano()%d != 0:
			t.Fatalf("Every(%v).Next(%d) = %d, not a multiple of the interval since the epoch", time.Duration(d), n, s.UnixNano())
		}
		if z := iv.Next(at.In(time.FixedZone("fuzz", int(zone)))); !z.Equal(s) {
			t.Fatalf("Every(%v).Next(%d) in zone %+ds = %d, in UTC %d", time.Duration(d), n, zone, z.UnixNano(), s.UnixNano())
		}
		if got := iv.Next(s.Add(-1)); !got.Equal(s) {
			t.Fatalf("Every(%v): Next(slot-1ns) = %d, want the slot %d", time.Duration(d), got.UnixNano(), s.UnixNano())
		}
		if s.UnixNano() >= math.MinInt64+d { // else the previous slot is before 1678
			prev := s.UnixNano() - d
			if prev > n {
				t.Fatalf("Every(%v).Next(%d) = %d: the previous slot %d is after t", time.Duration(d), n, s.UnixNano(), prev)
			}
			if got := iv.Next(time.Unix(0, prev)); !got.Equal(s) {
				t.Fatalf("Every(%v): Next(previous slot %d) = %d, want %d", time.Duration(d), prev, got.UnixNano(), s.UnixNano())
			}
		}
		if s.UnixNano() <= math.MaxInt64-d {
			if got := iv.Next(s); got.Sub(s) != time.Duration(d) {
				t.Fatalf("Every(%v): Next(slot %d) = %d, want the slot after it", time.Duration(d), s.UnixNano(), got.UnixNano())
			}
		}
	})
}

// FuzzEveryAnyInstant checks Every(d).Next for any instant t a time.Time
// can hold (seconds and nanoseconds since the epoch, far outside 1678 to
// 2262 too: the finding was a wrap-around to 1678 for t past 2262):
//
//   - Never panics. Next(t) is the zero time (no slot) or strictly after
//     t, and a multiple of d since the epoch: never an instant before t.
//   - Within the representable range it is at most d after t.
//   - Following the slots never loops: each Next of a slot is the zero
//     time or exactly d later.
//   - Scheduler.Add accepts Every(d) exactly when MinInterval <= d <=
//     MaxInterval (checked for every d in FuzzIntervalBounds).
//
// Long tier: go test -run '^$' -fuzz '^FuzzEveryAnyInstant$' -fuzztime 30s ./scheduler
func FuzzEveryAnyInstant(f *testing.F) {
	for _, s := range []struct{ d, sec, nsec int64 }{
		{int64(time.Hour), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 0}, // the finding
		{int64(time.Minute), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix(), 999_999_999},
		{int64(time.Minute), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), 0},
		{int64(scheduler.MinInterval), math.MaxInt64 / int64(time.Second), 854_775_807},
		{int64(scheduler.MinInterval), math.MinInt64 / int64(time.Second), -854_775_808},
		{int64(scheduler.MaxInterval), 0, 0},
		{int64(time.Second), math.MaxInt64, 0},
		{int64(time.Second), math.MinInt64, 0},
		{1, 1 << 40, -1},
	} {
		f.Add(s.d, s.sec, s.nsec)
	}
	f.Fuzz(func(t *testing.T, d, sec, nsec int64) {
		if d <= 0 || d > int64(scheduler.MaxInterval) {
			d = 1 + int64(uint64(d)%uint64(scheduler.MaxInterval))
		}
		at := time.Unix(sec, nsec)
		iv := scheduler.Every(time.Duration(d))
		s := iv.Next(at)
		if s.IsZero() {
			// Only when no slot after t fits in int64 nanoseconds.
			if last := time.Unix(0, math.MaxInt64/d*d); last.After(at) {
				t.Fatalf("Every(%v).Next(%v) = no slot, but %v is one after t", time.Duration(d), at, last)
			}
			return
		}
		if !s.After(at) {
			t.Fatalf("Every(%v).Next(%v) = %v, not after t", time.Duration(d), at, s)
		}
		if s.UnixNano()%d != 0 {
			t.Fatalf("Every(%v).Next(%v) = %v, not a multiple of the interval", time.Duration(d), at, s)
		}
		inRange := !at.Before(time.Unix(0, math.MinInt64))
		if inRange && s.Sub(at) > time.Duration(d) {
			t.Fatalf("Every(%v).Next(%v) = %v, more than the interval after t", time.Duration(d), at, s)
		}
		for range 3 {
			n := iv.Next(s)
			if n.IsZero() {
				return
			}
			if n.Sub(s) != time.Duration(d) {
				t.Fatalf("Every(%v): Next(slot %v) = %v, want the slot %v after it", time.Duration(d), s, n, time.Duration(d))
			}
			s = n
		}
	})
}

// FuzzIntervalBounds: Scheduler.Add accepts Every(d) exactly when
// MinInterval <= d <= MaxInterval, whatever d, and never panics (the
// finding: Every(time.Nanosecond) was accepted).
//
// Long tier: go test -run '^$' -fuzz '^FuzzIntervalBounds$' -fuzztime 30s ./scheduler
func FuzzIntervalBounds(f *testing.F) {
	for _, d := range []int64{1, int64(scheduler.MinInterval) - 1, int64(scheduler.MinInterval), int64(time.Hour),
		int64(scheduler.MaxInterval), int64(scheduler.MaxInterval) + 1, 0, -1, math.MinInt64, math.MaxInt64} {
		f.Add(d)
	}
	store, err := memory.New(memory.Options{})
	if err != nil {
		f.Fatal(err)
	}
	client, err := runtime.NewClient(store, runtime.ClientOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = client.Close(context.Background()) })
	policy, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, d int64) {
		s, err := scheduler.New(client, scheduler.Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Add(scheduler.Job{Name: "j", Schedule: scheduler.Every(time.Duration(d)), Mode: scheduler.OnOneServer, Policy: policy,
			Run: func(context.Context, leaseapi.Token) error { return nil }})
		want := d >= int64(scheduler.MinInterval) && d <= int64(scheduler.MaxInterval)
		if (err == nil) != want {
			t.Fatalf("Add(Every(%v)) = %v, want accepted %v", time.Duration(d), err, want)
		}
		if err != nil && !errors.Is(err, leaseapi.ErrInvalidState) {
			t.Fatalf("Add(Every(%v)) = %v, want ErrInvalidState", time.Duration(d), err)
		}
	})
}
