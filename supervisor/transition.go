package supervisor

import (
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// event is what a step of the actor reacts to.
type event uint8

const (
	evRenew    event = iota + 1 // a Renew request or a managed renewal tick
	evValidate                  // a Validate request
	evRelease                   // a Release request
	evDeadline                  // the deadline timer fired
	evClose                     // the client is closing (after its best-effort release)
)

func (e event) String() string {
	switch e {
	case evRenew:
		return "renew"
	case evValidate:
		return "validate"
	case evRelease:
		return "release"
	case evDeadline:
		return "deadline"
	case evClose:
		return "close"
	}
	return "unknown"
}

// outcome is the result of the step's backend call, if any.
type outcome struct {
	called bool            // a backend call was made
	sentAt time.Time       // local clock read before the call was sent
	rec    leaseapi.Record // the renewed record (evRenew, success)
	err    error           // the classified backend error
}

// outcomes recycles step outcomes. An outcome sits beneath the backend
// call, and on the actor's stack its 160 bytes would push an in-process
// backend's call chain past the 2 KiB minimum goroutine stack: every call
// would then pay for a stack copy (a quarter of a TryAcquire+Release pair
// on the memory backend, BenchmarkTryAcquireRelease).
var outcomes = sync.Pool{New: func() any { return new(outcome) }}

func newOutcome() *outcome { return outcomes.Get().(*outcome) }

// freeOutcome clears o (it holds a record and an error) and recycles it.
func freeOutcome(o *outcome) {
	*o = outcome{}
	outcomes.Put(o)
}

// plan decides, without I/O, whether event ev on view v needs a backend
// call at local time now. When it does not, reply is the answer to give.
func plan(v *View, ev event, now time.Time) (call bool, reply error) {
	if v.State.Terminal() {
		return false, terminalReply(v.State, ev)
	}
	switch ev {
	case evRenew, evValidate:
		if !now.Before(v.Deadline) {
			return false, errExpired(ev)
		}
		return true, nil
	case evRelease, evClose:
		// Releasing past the deadline still hands the key over sooner than
		// waiting for the backend's expiry.
		return true, nil
	}
	return false, nil
}

// transition is the whole lease state machine of DESIGN §1. next holds a
// copy of the current view on entry and the next view on return; ev is the
// event, out the backend outcome, now the local time after the call, p the
// policy. It returns the reply for the requester. It reads no clock, does
// no I/O and touches no channel. It works through pointers so that no View
// is copied on the supervisor's stack.
func transition(next *View, ev event, out *outcome, now time.Time, p *leaseapi.Policy) error {
	if next.State.Terminal() {
		return terminalReply(next.State, ev)
	}
	switch ev {
	case evDeadline:
		if !now.Before(next.Deadline) {
			expire(next)
		}
		return nil

	case evRenew, evValidate:
		if !out.called {
			if !now.Before(next.Deadline) {
				expire(next)
				return errExpired(ev)
			}
			return nil
		}
		if out.err != nil {
			return failed(next, out.err, now)
		}
		if ev == evRenew {
			if !sameGrant(&next.Record, &out.rec) {
				next.State = leaseapi.StateLost
				next.Err = errRegression
				return next.Err
			}
			skew := skewed(next, out, now, p)
			next.Record, next.SentAt, next.RecvAt = out.rec, out.sentAt, now
			if skew {
				// The backend's clock moved unlike ours: keep the old
				// deadline and deny admission until a renewal agrees.
				next.State = leaseapi.StateUncertain
				next.Err = errSkew
				return next.Err
			}
			next.Deadline = out.rec.LocalDeadline(out.sentAt, *p)
		}
		if !now.Before(next.Deadline) {
			expire(next)
			return errExpired(ev)
		}
		next.State = leaseapi.StateActive
		next.Err = nil
		return nil

	case evRelease:
		switch {
		case out.err == nil:
			next.State = leaseapi.StateReleased
			next.Err = nil
			return nil
		case !now.Before(next.Deadline) && !isStale(out.err):
			expire(next)
			return out.err
		}
		return failed(next, out.err, now)

	case evClose:
		if out.called && out.err == nil {
			next.State = leaseapi.StateReleased
			next.Err = nil
			return nil
		}
		next.State = leaseapi.StateLost
		next.Err = errClientClosed
		return nil
	}
	return nil
}

// failed applies an operation failure: a stale owner is proof of loss;
// anything else is fail-closed uncertainty until the deadline.
func failed(next *View, err error, now time.Time) error {
	switch {
	case isStale(err):
		next.State = leaseapi.StateLost
		next.Err = err
	case !now.Before(next.Deadline):
		expire(next)
	default:
		next.State = leaseapi.StateUncertain
		next.Err = err
	}
	return err
}

func expire(v *View) {
	v.State = leaseapi.StateExpired
	v.Err = errDeadline
}

var (
	errDeadline     = leaseapi.NewError("deadline", leaseapi.ErrLost, "deadline passed")
	errClientClosed = leaseapi.NewError("close", leaseapi.ErrLost, "client closed")
	errRegression   = leaseapi.NewError("renew", leaseapi.ErrFencingRegression, "renewal changed the grant")
)

func isStale(err error) bool { return leaseapi.Kind(err) == leaseapi.ErrStaleOwner }

func errExpired(ev event) error {
	return leaseapi.NewError(ev.String(), leaseapi.ErrLost, "deadline passed")
}

// errSkew is the reply to a renewal whose backend timestamp is outside what
// the local clock allows.
var errSkew = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "backend clock diverges beyond the safety margin")

func sameGrant(a, b *leaseapi.Record) bool {
	return a.Key == b.Key && a.Owner == b.Owner && a.Token == b.Token
}

// skewed is the clock-skew detector. Two successive grants were stamped by
// the backend at v.Record.AcquiredAt and out.rec.AcquiredAt; on the local
// clock the first happened within [v.SentAt, v.RecvAt] and the second
// within [out.sentAt, now], so the backend's advance between them must lie
// in [out.sentAt - v.RecvAt, now - v.SentAt], give or take the rate drift
// the safety margin is sized for (margin/TTL of the elapsed time) and the
// backend's millisecond resolution. Outside that, the backend clock jumped
// or runs at another rate than the model allows.
func skewed(v *View, out *outcome, now time.Time, p *leaseapi.Policy) bool {
	if v.RecvAt.IsZero() || v.Record.AcquiredAt.IsZero() {
		return false
	}
	lo := out.sentAt.Sub(v.RecvAt)
	hi := now.Sub(v.SentAt)
	tol := time.Duration(float64(hi)*float64(p.SafetyMargin())/float64(p.TTL())) + 2*time.Millisecond
	adv := out.rec.AcquiredAt.Sub(v.Record.AcquiredAt)
	return adv < lo-tol || adv > hi+tol
}

// terminalReply answers an event on a handle in terminal state s.
func terminalReply(s leaseapi.State, ev event) error {
	switch {
	case ev == evDeadline || ev == evClose:
		return nil
	case s == leaseapi.StateReleased && ev == evRelease:
		return nil // Release is idempotent
	case s == leaseapi.StateReleased:
		return leaseapi.NewError(ev.String(), leaseapi.ErrInvalidState, "lease released")
	}
	return leaseapi.NewError(ev.String(), leaseapi.ErrLost, "")
}
