package supervisor

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// TestIsRealClock: only the wall clock gets the time package's timers.
func TestIsRealClock(t *testing.T) {
	if !isRealClock(clock.New()) {
		t.Fatal("clock.New() is not recognised as the wall clock")
	}
	type wrapped struct{ clock.Clock } // a test's own clock over the wall clock
	for name, c := range map[string]clock.Clock{"mock": clock.NewMock(), "wrapped": wrapped{clock.New()}, "nil": nil} {
		if isRealClock(c) {
			t.Fatalf("%s clock taken for the wall clock", name)
		}
	}
}

// TestTimerOnBothClocks: a timer fires after its duration, Reset re-arms
// it and Stop disarms it, on the wall clock and on a mock.
func TestTimerOnBothClocks(t *testing.T) {
	var zero timer
	if zero.created() {
		t.Fatal("zero timer reports created")
	}
	t.Run("mock", func(t *testing.T) {
		mock := clock.NewMock()
		tm := newTimer(mock, false, time.Second)
		if tm.rt != nil || !tm.created() {
			t.Fatal("mock clock: want the clock's timer")
		}
		mock.Add(time.Second)
		<-tm.C()
		tm.Reset(time.Second)
		tm.Stop()
		mock.Add(2 * time.Second)
		select {
		case <-tm.C():
			t.Fatal("stopped timer fired")
		default:
		}
	})
	t.Run("real", func(t *testing.T) {
		tm := newTimer(clock.New(), true, time.Millisecond)
		if tm.ct != nil || !tm.created() {
			t.Fatal("wall clock: want a time.Timer")
		}
		<-tm.C()
		tm.Reset(time.Hour)
		tm.Stop()
		select {
		case <-tm.C():
			t.Fatal("stopped timer fired")
		default:
		}
	})
}
