package supervisor

import (
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// TestTimerOnBothClocks: a timer fires after its duration, Reset re-arms
// it and Stop disarms it, on the wall clock and on a mock.
func TestTimerOnBothClocks(t *testing.T) {
	t.Run("mock", func(t *testing.T) {
		mock := clock.NewMock()
		tm := newTimer(mock, false, time.Second)
		if tm.rt != nil {
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
		if tm.ct != nil {
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
