package scheduler_test

import (
	"math"
	"testing"
	"time"

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
