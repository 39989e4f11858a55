package backendtest

import (
	"sync"
	"testing"
	"time"
)

// LagProbe measures how late this process's timers fire: the machine's
// load as a real-time test sees it. A goroutine waits 5ms at a time and
// keeps the worst overshoot. A real-time scenario compares its timing
// claims with what the probe saw, so that a stalled process (a loaded
// 2-core machine can leave it off-CPU for hundreds of milliseconds) widens
// a bound by exactly what it delayed this process, and an idle machine
// keeps the bound tight. It is safe for concurrent use.
type LagProbe struct {
	mu  sync.Mutex    // guards max
	max time.Duration // the worst overshoot seen
}

// StartLagProbe starts a probe; its goroutine exits at t's cleanup.
func StartLagProbe(t testing.TB) *LagProbe {
	l := &LagProbe{}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() { // exits at cleanup
		defer close(done)
		const step = 5 * time.Millisecond
		tm := time.NewTimer(step)
		defer tm.Stop()
		for at := time.Now(); ; {
			select {
			case <-quit:
				return
			case <-tm.C:
			}
			if over := time.Since(at) - step; over > 0 {
				l.mu.Lock()
				l.max = max(l.max, over)
				l.mu.Unlock()
			}
			at = time.Now()
			tm.Reset(step)
		}
	}()
	t.Cleanup(func() { close(quit); <-done })
	return l
}

// Worst returns the worst timer lateness seen so far.
func (l *LagProbe) Worst() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// Reset forgets what was seen, so that Worst covers what follows.
func (l *LagProbe) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = 0
}
