// Package callctx hands out the contexts that bound backend calls on the
// wall clock, shared between calls: every call whose bound ends in the
// same short slot of time gets one context, a child of a parent (the
// client's life, for the supervisors' calls) whose deadline is the start
// of that slot. A call is then bounded as before — by the parent's end
// and by its own bound, which the slot only shortens, by less than one
// slot and never below [Min] — but it makes no context, timer or Done
// channel of its own and no entry in the parent's list of children: under
// load one context serves every call of a slot, across all the leases of
// a client (a per-call context.WithTimeout is 4–5 allocations and a lock
// of the parent, shared by all of them).
//
// A shared context is never canceled by its users: it ends at its
// deadline (its timer then frees it) or when the parent ends, so at most
// one per slot of the longest bound in use is alive at any time.
package callctx

import (
	"context"
	"sync/atomic"
	"time"
)

// Shared makes the shared contexts of one parent. It is safe for
// concurrent use: a lost race makes one more context, no more.
type Shared struct {
	parent context.Context
	cur    atomic.Pointer[slotContext] // the slot made last
}

// slotContext is one slot's context.
type slotContext struct {
	slot   int64 // the slot's start, Unix nanoseconds
	ctx    context.Context
	cancel context.CancelFunc // kept for vet; the timer or the parent ends ctx
}

// Min is the shortest bound a shared context serves; a shorter one gets a
// context of its own, so that rounding never takes more than a small
// fraction of it.
const Min = 64 * time.Millisecond

// slotOf returns the slot length for a bound of d (at least Min): more
// than 1/128 and at most 1/64 of d, a power of two times a millisecond,
// so that bounds of similar length share slots.
func slotOf(d time.Duration) time.Duration {
	q := time.Millisecond
	for q*128 <= d {
		q *= 2
	}
	return q
}

// NewShared returns the shared contexts of parent: each ends when parent
// does, or at its slot's start.
func NewShared(parent context.Context) *Shared { return &Shared{parent: parent} }

// Context returns a context that ends when the parent ends or at the
// start of the slot that holds sentAt+d, whichever is first. d must be at
// least Min; sentAt is a reading of the wall clock (time.Now).
//
// The slots are aligned on wall time, so that calls sent at different
// instants find the same one, but the deadline is computed from sentAt by
// subtraction only, keeping its monotonic reading: it is not later than
// sentAt+d on the monotonic clock (to within the nanoseconds by which the
// wall and monotonic readings of two time.Now calls differ), whatever the
// wall clock does; a step of the wall clock only moves the slots.
func (ds *Shared) Context(sentAt time.Time, d time.Duration) context.Context {
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
	e := &slotContext{slot: slot}
	e.ctx, e.cancel = context.WithDeadline(ds.parent, at)
	ds.cur.Store(e)
	return e.ctx
}
