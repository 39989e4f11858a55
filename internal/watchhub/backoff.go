package watchhub

import (
	"context"
	"time"
)

// Backoff is a listener's delay between attempts to (re)establish its
// subscription: the first Wait lasts Min, each later one twice the one
// before, up to Max, until Reset. Set Min and Max (0 < Min <= Max) before
// the first Wait. It is not safe for concurrent use: it belongs to the one
// listener goroutine.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration // 0: Min
}

// Reset makes the next Wait last Min again, after a subscription that
// worked.
func (b *Backoff) Reset() { b.next = 0 }

// Wait blocks for the current delay and then doubles it (up to Max),
// returning true; it returns false as soon as ctx ends, without changing
// the delay. It starts no goroutine.
func (b *Backoff) Wait(ctx context.Context) bool {
	if b.next == 0 {
		b.next = b.Min
	}
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	b.next = min(2*b.next, b.Max)
	return true
}
