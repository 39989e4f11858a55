package supervisor

import (
	"context"
	"sync/atomic"
	"time"
)

// deadlines hands out the contexts that bound the supervisors' backend
// calls on the wall clock, shared between calls: every call whose bound
// ends in the same short slot of time gets one context, a child of the
// client's life whose deadline is the start of that slot. A call is then
// bounded as before — by the client's close (the context is life's child)
// and by its own bound, which the slot only shortens, by less than one
// slot and never below minShared — but it makes no context, timer or
// Done channel of its own and no entry in life's list of children: under
// load one context serves every call of a slot, across all the leases of
// the client (a per-call context.WithTimeout on life is 4–5 allocations
// and a lock of life shared by all of them).
//
// A shared context is never canceled by its users: it ends at its
// deadline (its timer then frees it) or when life ends, so at most
// one per slot of the longest bound in use is alive at any time.
//
// Safe for concurrent use: a lost race makes one more context, no more.
type deadlines struct {
	life context.Context
	cur  atomic.Pointer[sharedDeadline] // the slot made last
}

// sharedDeadline is one slot's context.
type sharedDeadline struct {
	slot   int64 // the slot's start, Unix nanoseconds
	ctx    context.Context
	cancel context.CancelFunc // kept for vet; the timer or life ends ctx
}

// minShared is the shortest bound a shared context serves; a shorter one
// gets a context of its own, so that rounding never takes more than a
// small fraction of it.
const minShared = 64 * time.Millisecond

// slotOf returns the slot length for a bound of d (at least minShared):
// more than 1/128 and at most 1/64 of d, a power of two times a
// millisecond, so that bounds of similar length share slots.
func slotOf(d time.Duration) time.Duration {
	q := time.Millisecond
	for q*128 <= d {
		q *= 2
	}
	return q
}

func newDeadlines(life context.Context) *deadlines { return &deadlines{life: life} }

// context returns a context that ends when life ends or at the start of
// the slot that holds sentAt+d, whichever is first. d must be at least
// minShared; sentAt is a reading of the wall clock (time.Now).
//
// The slots are aligned on wall time, so that calls sent at different
// instants find the same one, but the deadline is computed from sentAt by
// subtraction only, keeping its monotonic reading: it is not later than
// sentAt+d on the monotonic clock (to within the nanoseconds by which the
// wall and monotonic readings of two time.Now calls differ), whatever the
// wall clock does; a step of the wall clock only moves the slots.
func (ds *deadlines) context(sentAt time.Time, d time.Duration) context.Context {
	q := slotOf(d)
	end := sentAt.Add(d)
	r := time.Duration(end.UnixNano() % int64(q))
	if r < 0 {
		r += q
	}
	at := end.Add(-r)
	slot := at.UnixNano() // wall: the monotonic part of two readings jitters
	if e := ds.cur.Load(); e != nil && e.slot == slot {
		return e.ctx
	}
	e := &sharedDeadline{slot: slot}
	e.ctx, e.cancel = context.WithDeadline(ds.life, at)
	ds.cur.Store(e)
	return e.ctx
}
