package simtest

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"
)

// OffsetClock is a clock.Clock that reads Offset ahead of (or, negative,
// behind) its base clock: a server whose wall clock is off by a constant.
// Durations (timers, tickers, timeouts, sleeps) are unaffected, as for a
// real clock that is merely set wrong. It is safe for concurrent use.
type OffsetClock struct {
	clock.Clock
	Offset time.Duration
}

// NewOffsetClock returns base (nil: clock.New(), simulated inside
// Simulate) shifted by offset.
func NewOffsetClock(base clock.Clock, offset time.Duration) *OffsetClock {
	if base == nil {
		base = clock.New()
	}
	return &OffsetClock{Clock: base, Offset: offset}
}

// Now returns the base time plus the offset.
func (c *OffsetClock) Now() time.Time { return c.Clock.Now().Add(c.Offset) }

// Since returns the time elapsed since t on this clock.
func (c *OffsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Until returns the duration until t on this clock.
func (c *OffsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// WithDeadline returns a context that ends at deadline d on this clock.
func (c *OffsetClock) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return c.Clock.WithTimeout(parent, c.Until(d))
}
