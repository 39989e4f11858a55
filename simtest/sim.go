package simtest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// Simulate runs fn in simulated time: inside a testing/synctest bubble the
// time package's clock (and so clock.New() from benbjohnson/clock, the
// runtime's default) advances only when every goroutine of the bubble is
// blocked, so timer-driven behaviour is deterministic and costs no real
// time. Every goroutine started inside must have exited when fn returns
// (close every Client), or the test fails.
func Simulate(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, fn)
}

// Advance lets d of simulated time pass, firing every timer due on the way
// in order, and returns when every goroutine of the bubble has finished
// reacting (is durably blocked again). Call it only inside Simulate.
func Advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// Settle returns when every other goroutine of the bubble is durably
// blocked, without letting time pass. Call it only inside Simulate.
func Settle() { synctest.Wait() }

// SkewedClock is a clock that runs at Rate times the speed of Base (from
// the moment it was made) and is offset by Offset: a backend or server
// whose clock differs from the client's. It implements leaseapi.Clock (pass
// it as memory.Options.Clock). It is safe for concurrent use.
type SkewedClock struct {
	base   leaseapi.Clock
	origin time.Time
	offset time.Duration
	rate   float64
}

// NewSkewedClock returns a clock reading base.Now() + offset now and
// advancing rate seconds per second of base afterwards. A nil base is the
// time package's clock.
func NewSkewedClock(base leaseapi.Clock, offset time.Duration, rate float64) *SkewedClock {
	if base == nil {
		base = timeClock{}
	}
	return &SkewedClock{base: base, origin: base.Now(), offset: offset, rate: rate}
}

// Now returns the skewed time.
func (c *SkewedClock) Now() time.Time {
	elapsed := c.base.Now().Sub(c.origin)
	return c.origin.Add(c.offset + time.Duration(float64(elapsed)*c.rate))
}

type timeClock struct{}

func (timeClock) Now() time.Time { return time.Now() }
