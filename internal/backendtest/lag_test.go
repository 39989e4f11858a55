package backendtest

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestLagProbeOnTime: timers that fire exactly on time (the bubble's clock)
// show no lateness, however long the probe runs, and the probe's goroutine
// exits at cleanup (TestMain's leak check).
func TestLagProbeOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := StartLagProbe(t)
		time.Sleep(time.Second)
		if w := l.Worst(); w != 0 {
			t.Errorf("Worst after on-time timers = %v; want 0", w)
		}
		l.Reset()
		if w := l.Worst(); w != 0 {
			t.Errorf("Worst after Reset = %v; want 0", w)
		}
	})
}
