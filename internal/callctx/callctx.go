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
//
// The slots of [NewShared] end at the start of their slot: a call is ended
// up to one slot early, never late. [NewCeil]'s end at the slot's end, and
// [Exact] pairs one with the call's exact bound: a call that must run for
// its full bound (an acquisition, see runtime) is ended less than one slot
// late, never early, while every backend that reads the context's deadline
// (for the not-after bound it sends to the server, or a socket deadline)
// still reads the exact one.
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
	up     bool                        // slots end at their end (NewCeil), not their start
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

// NewCeil returns the shared contexts of parent that end when parent does,
// or at the end of their slot: never before the bound they serve, and less
// than one slot (at most 1/64 of it) after it. Use them through [Exact].
func NewCeil(parent context.Context) *Shared { return &Shared{parent: parent, up: true} }

// Context returns a context that ends when the parent ends or at the
// start of the slot that holds sentAt+d (at its end for [NewCeil]: the
// start of the next slot, or sentAt+d itself when it is a slot boundary),
// whichever is first. d must be at
// least Min; sentAt is a reading of the wall clock (time.Now).
//
// The slots are aligned on wall time, so that calls sent at different
// instants find the same one, but the deadline is computed from sentAt by
// subtraction only, keeping its monotonic reading: it is not later than
// sentAt+d on the monotonic clock (to within the nanoseconds by which the
// wall and monotonic readings of two time.Now calls differ), whatever the
// wall clock does; a step of the wall clock only moves the slots.
func (ds *Shared) Context(sentAt time.Time, d time.Duration) context.Context {
	// The slot is found in integer wall nanoseconds (the monotonic part
	// of two readings jitters); only a slot not cached yet costs the
	// time.Time arithmetic of its deadline.
	q := slotOf(d)
	end := sentAt.UnixNano() + int64(d)
	r := time.Duration(end % int64(q))
	if r < 0 {
		r += q
	}
	off := d - r // from sentAt to the slot's end of the call
	if ds.up && r != 0 {
		off += q
	}
	slot := end - int64(d-off)
	if e := ds.cur.Load(); e != nil && e.slot == slot {
		return e.ctx
	}
	e := &slotContext{slot: slot}
	e.ctx, e.cancel = context.WithDeadline(ds.parent, sentAt.Add(off))
	ds.cur.Store(e)
	return e.ctx
}

// Exact returns the context of a call sent at sentAt (a reading of the
// wall clock) with its own bound d (at least Min) on behalf of a caller
// whose ctx never ends (its Done is nil; the caller checks): its Deadline
// is exactly sentAt+d, its values are ctx's, and it ends (Done, Err) with
// ds's shared context of that bound, so ds must come from [NewCeil]: never
// before sentAt+d, less than one slot after it, and at once when ds's
// parent ends. Between sentAt+d and that end Err is still nil: a backend
// that bounds its own wait by the deadline ends the call exactly, one that
// waits for Done less than a slot later. It costs one small allocation:
// no timer, Done channel or entry in the parent's list of children.
func (ds *Shared) Exact(ctx context.Context, sentAt time.Time, d time.Duration) context.Context {
	return &exact{shared: ds.Context(sentAt, d), values: ctx, deadline: sentAt.Add(d)}
}

// exact is a call's context from [Shared.Exact]. Values the caller's
// context does not hold are looked up in the shared one, so that a
// context derived from an exact (context.WithTimeout, AfterFunc) finds the
// shared context's cancelation and registers with it as with any child,
// instead of starting a goroutine to watch Done.
type exact struct {
	shared   context.Context
	values   context.Context
	deadline time.Time
}

func (c *exact) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *exact) Done() <-chan struct{}       { return c.shared.Done() }
func (c *exact) Err() error                  { return c.shared.Err() }

func (c *exact) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.shared.Value(key)
}

// String names the context as the context package's own do.
func (c *exact) String() string { return "callctx.Exact" }
