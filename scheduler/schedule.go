package scheduler

import (
	"math"
	"time"
)

// Schedule yields the slots of a job: Next returns the first slot strictly
// after t, or the zero time when there is none (the job is then done).
// Every server of a fleet must compute the same slots from the same
// instant, so a Schedule must be a pure function of t (no state, no clock
// reads of its own); a cron parser fits. Implementations must be safe for
// concurrent use.
type Schedule interface {
	Next(t time.Time) time.Time
}

// MaxInterval is the longest interval [Every] accepts.
const MaxInterval = 10 * 366 * 24 * time.Hour

// Interval is the fixed-interval [Schedule] built by [Every]. It is a
// value, safe for concurrent use.
type Interval struct{ d time.Duration }

// Every returns the schedule whose slots are the multiples of d since the
// Unix epoch (every d, aligned to the epoch rather than to the start of
// the program), so every server computes the same slots from its own
// clock. A d <= 0 or above [MaxInterval] yields no slot; [Scheduler.Add]
// rejects it with ErrInvalidState.
func Every(d time.Duration) Interval { return Interval{d: d} }

// Duration returns the interval.
func (iv Interval) Duration() time.Duration { return iv.d }

// Next returns the first multiple of the interval since the Unix epoch
// strictly after t (wall clock), or the zero time (no further slot) for an
// invalid interval or when that slot lies beyond what UnixNano can hold
// (after 2262-04-11): never a wrapped-around instant before t.
func (iv Interval) Next(t time.Time) time.Time {
	if iv.d <= 0 || iv.d > MaxInterval {
		return time.Time{}
	}
	d := int64(iv.d)
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
