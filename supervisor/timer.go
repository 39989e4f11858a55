package supervisor

import (
	"reflect"
	"time"

	"github.com/benbjohnson/clock"
)

// timer is the actor's one timer. On the real clock it is a time.Timer:
// benbjohnson/clock's Timer would wrap the same time.Timer in 80 more
// bytes per lease, which count at 100,000 managed leases
// (BenchmarkManaged100k in runtime). Any other clock (clock.Mock, a test's
// own Clock) gets the clock's Timer. The zero timer is "not created yet".
type timer struct {
	rt *time.Timer
	ct *clock.Timer
}

// realClock is the dynamic type of clock.New(): the wall clock.
var realClock = reflect.TypeOf(clock.New())

// isRealClock reports whether c is the wall clock, whose timers are the
// time package's.
func isRealClock(c clock.Clock) bool { return reflect.TypeOf(c) == realClock }

// newTimer returns a timer on c (real: c is the wall clock) that fires
// after d.
func newTimer(c clock.Clock, real bool, d time.Duration) timer {
	if real {
		return timer{rt: time.NewTimer(d)}
	}
	return timer{ct: c.Timer(d)}
}

func (t timer) created() bool { return t.rt != nil || t.ct != nil }

// C is the channel the timer fires on.
func (t timer) C() <-chan time.Time {
	if t.rt != nil {
		return t.rt.C
	}
	return t.ct.C
}

func (t timer) Reset(d time.Duration) {
	if t.rt != nil {
		t.rt.Reset(d)
		return
	}
	t.ct.Reset(d)
}

func (t timer) Stop() {
	if t.rt != nil {
		t.rt.Stop()
		return
	}
	t.ct.Stop()
}
