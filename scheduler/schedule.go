package scheduler

import (
	"math"
	"time"
)

// Schedule yields the slots of a job: Next returns the first slot strictly
// after t, or the zero time when there is none (the job is then done).
// Every server of a fleet must compute the same slots from the same
// instant, so a Schedule must be a pure function of t (no state, no clock
// reads of its own, no time.Local); a cron parser fits. The scheduler
// passes t in the job's Location (UTC unless Job.Location names one), so
// a schedule that reads wall-clock fields from t (t.Hour(), time.Date(...,
// t.Location())) agrees across servers in different time zones.
// Successive slots closer than [MinInterval] are skipped. A panic in Next
// is recovered and ends the job. Implementations must be safe for
// concurrent use.
type Schedule interface {
	Next(t time.Time) time.Time
}

// MaxInterval is the longest interval [Every] accepts.
const MaxInterval = 10 * 366 * 24 * time.Hour

// MinInterval is the shortest interval [Scheduler.Add] accepts from
// [Every], and the least time between two slots of any schedule that the
// scheduler runs (closer slots are skipped). A slot costs one or two backend round trips to claim and
// one or two to release (NonOverlap: both leases), a few milliseconds on a
// LAN with a PostgreSQL commit; below 10 ms a server would spend the slot
// claiming it, and each claimed slot leaves one entry on the backend for
// good (see the package doc): at MinInterval, 100 a second.
const MinInterval = 10 * time.Millisecond

// The instants whose Unix nanoseconds fit an int64 (1677-09-21 to
// 2262-04-11): slots are multiples of the interval in that range.
var (
	minSlotTime = time.Unix(0, math.MinInt64)
	maxSlotTime = time.Unix(0, math.MaxInt64)
)

// Interval is the fixed-interval [Schedule] built by [Every]. It is a
// value, safe for concurrent use.
type Interval struct{ d time.Duration }

// Every returns the schedule whose slots are the multiples of d since the
// Unix epoch (every d, aligned to the epoch rather than to the start of
// the program), so every server computes the same slots from its own
// clock, in any time zone. A d <= 0 or above [MaxInterval] yields no slot;
// [Scheduler.Add] rejects it, and a d below [MinInterval], with
// ErrInvalidState.
func Every(d time.Duration) Interval { return Interval{d: d} }

// Duration returns the interval.
func (iv Interval) Duration() time.Duration { return iv.d }

// Next returns the first multiple of the interval since the Unix epoch
// strictly after t (wall clock), or the zero time (no further slot) for an
// invalid interval or when that slot lies beyond what UnixNano can hold
// (t at or after 2262-04-11, or the slot after it): never a wrapped-around
// instant before t. For t before 1677-09-21 it returns the first slot in
// the representable range, which is after t.
func (iv Interval) Next(t time.Time) time.Time {
	if iv.d <= 0 || iv.d > MaxInterval {
		return time.Time{}
	}
	d := int64(iv.d)
	if !t.Before(maxSlotTime) {
		return time.Time{} // t.UnixNano would wrap around
	}
	if t.Before(minSlotTime) {
		// The first multiple of d at or after MinInt64 (Go's division
		// truncates toward zero: a ceiling for negative numbers).
		return time.Unix(0, (math.MinInt64/d)*d)
	}
	n := t.UnixNano()
	q := n / d
	if n < 0 && n%d != 0 {
		q-- // floor for instants before the epoch
	}
	if q >= math.MaxInt64/d {
		return time.Time{} // (q+1)*d would overflow
	}
	return time.Unix(0, (q+1)*d)
}
