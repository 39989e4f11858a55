package supervisor

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
)

// run is the actor loop and the only writer of s.view. Each iteration
// handles one input: a request, the timer (armed at the earlier of the
// deadline and, when managed, the next renewal) or Close.
//
// Stack hygiene: a network backend's call chain does not fit in the
// minimum goroutine stack (an in-process one does: the frames beneath a
// backend call, from here to callBackend, are kept small, and the select
// is in await, off that path), and Go never shrinks the
// stack of a goroutine parked in select back to the minimum. So after a
// step that called the backend, the loop continues on a fresh goroutine
// and this one returns: an idle lease then costs a minimum-size stack, not
// the deepest call it ever made. The hand-off is the last thing the old
// goroutine does, and the go statement orders all its writes before the new
// goroutine runs, so there is still exactly one actor at any moment.
func (s *Supervisor) run() {
	for {
		if s.view.Load().State.Terminal() {
			s.exit()
			return
		}
		if s.cfg.Life.Err() != nil {
			s.closeLease()
			s.exit()
			return
		}
		if c, ok := s.await(); ok {
			if s.closeStarted() {
				c.Reply(s.finalReply(c.Req))
				s.exit()
				return
			}
			c.Reply(s.handle(c.Req))
		} else if s.tick() {
			s.exit()
			return
		}
		if s.view.Load().State.Terminal() {
			s.exit()
			return
		}
		s.rearm()
		if s.called {
			s.called = false
			go s.run()
			return
		}
	}
}

// await parks the actor until a request arrives (ok) or the timer fires.
// It is a function of its own so that the select's frame is not on the
// stack beneath the step that follows, which calls the backend (see
// callBackend).
//
// Two arms only: every select arm costs a parked goroutine a runtime
// sudog, and 100,000 idle leases park here. Close arrives as a reqClose
// message (or is seen at the top of the loop).
//
// The timer is created at the first park, not when the lease starts: a
// request already queued by then (a release right after the acquisition)
// is served without ever creating one.
//
//go:noinline
func (s *Supervisor) await() (c call, ok bool) {
	if !s.timer.created() {
		select {
		case c = <-s.inbox.Receive():
			return c, true
		default:
		}
		s.timer = newTimer(s.cfg.Clock, s.cfg.realClock, max(s.cfg.Clock.Until(s.wakeAt()), 0))
	}
	select {
	case c = <-s.inbox.Receive():
		return c, true
	case <-s.timer.C():
		return c, false
	}
}

// tick handles the timer: the deadline if it has come (no I/O: Expired),
// else the managed renewal if it is due. A tick that finds neither due (a
// clock that fired early) only re-arms. It reports whether the client's
// Close was performed instead (the loop must then exit).
func (s *Supervisor) tick() (closed bool) {
	v := s.view.Load()
	now := s.cfg.Clock.Now()
	switch {
	case !now.Before(v.Deadline):
		s.step(evDeadline)
	case s.managed.Load() && !now.Before(s.renewDue):
		if s.closeStarted() {
			return true
		}
		s.step(evRenew)
	}
	return false
}

// rearm points the timer, once there is one, at wakeAt (await creates it
// at the first park).
func (s *Supervisor) rearm() {
	if s.timer.created() {
		s.timer.Reset(max(s.cfg.Clock.Until(s.wakeAt()), 0))
	}
}

// wakeAt is the next instant the actor must act: the deadline or, if
// earlier and managed, the next renewal.
func (s *Supervisor) wakeAt() time.Time {
	next := s.view.Load().Deadline
	if s.managed.Load() && s.renewDue.Before(next) {
		next = s.renewDue
	}
	return next
}

// closeStarted reports whether the client has begun closing (canceled
// Life). If so it performs the close at once, so that no request queued
// behind it reaches the backend with a canceled context: Close takes
// priority over queued work.
func (s *Supervisor) closeStarted() bool {
	if s.cfg.Life.Err() == nil {
		return false
	}
	s.closeLease()
	return true
}

// handle serves one request.
func (s *Supervisor) handle(r request) reply {
	switch r {
	case reqRenew:
		return reply{err: s.step(evRenew)}
	case reqValidate:
		return reply{err: s.step(evValidate)}
	case reqRelease:
		// A release ends managed renewal whatever its outcome: the holder
		// is giving the lease up, and renewing it after a release that
		// failed would keep the key from everyone until the client closes.
		// A failed release leaves the handle Uncertain, to be released
		// again or to expire at its deadline.
		s.stopManaged()
		return reply{err: s.step(evRelease)}
	case reqStartManaged:
		return s.startManaged()
	case reqStopManaged:
		s.stopManaged()
		return reply{}
	case reqClose: // Life is not canceled: only the client sends it after canceling
		return reply{}
	}
	return reply{err: leaseapi.NewError("supervisor", leaseapi.ErrInvalidState, "unknown request")}
}

// step performs at most one backend call for ev, applies the pure
// transition and publishes the result.
func (s *Supervisor) step(ev event) error {
	v := s.view.Load()
	now := s.cfg.Clock.Now()
	call, rep := plan(v, ev, now)
	out := newOutcome()
	if call {
		out.sentAt = now // read before the call is sent, as it must be
		s.callBackend(s.cfg.Life, ev, v, out)
	}
	rep = s.settle(v, ev, out, call, rep)
	freeOutcome(out)
	return rep
}

// settle applies the pure transition to the step's outcome and publishes
// the result. It is kept out of line, like callBackend, so that the large
// View values it handles never sit on the stack beneath a backend call:
// the stack of an idle supervisor then stays at the 2 KiB minimum instead
// of growing once and never shrinking.
//
//go:noinline
func (s *Supervisor) settle(v *View, ev event, out *outcome, call bool, rep error) error {
	now := s.cfg.Clock.Now()
	next := new(View) // published below: it lives on the heap anyway
	*next = *v
	rep2 := transition(next, ev, out, now, &s.policy)
	if call || rep == nil {
		rep = rep2
	}
	s.publish(next, ev, out, now)
	return rep
}

// callBackend makes the one backend call of a step into out (whose sentAt
// the caller has set to a local clock reading taken before it), bounded by
// the policy's OperationTimeout and, for renew and validate, by the
// remaining trust: a reply after the deadline could not restore admission
// anyway. Its frame is kept small (the timeout and the error wrapping are
// out of line, the outcome is off the stack) because it sits under the
// backend's call chain on the actor's stack, which should not need to grow
// for an in-process backend: BenchmarkTryAcquireRelease's CPU profile shows
// no runtime.newstack when it does not.
func (s *Supervisor) callBackend(parent context.Context, ev event, v *View, out *outcome) {
	s.called = true
	out.called = true
	ctx, cancel := parent, context.CancelFunc(nil)
	if !s.cfg.Unbounded {
		ctx, cancel = s.opContext(parent, ev, v.Deadline, out.sentAt)
	}
	switch ev {
	case evRenew:
		s.renewInto(ctx, &v.Record, out)
	case evValidate:
		s.validateInto(ctx, &v.Record, out)
	default: // evRelease, evClose
		s.releaseInto(ctx, &v.Record, out)
	}
	if cancel != nil {
		cancel()
	}
	if out.err != nil || mutant.On(mutant.DeadlineFromReply) {
		s.finishCall(ev, out)
	}
}

// renewInto, validateInto and releaseInto are the three backend calls, each
// in its own small frame.
//
//go:noinline
func (s *Supervisor) renewInto(ctx context.Context, rec *leaseapi.Record, out *outcome) {
	out.rec, out.err = s.cfg.Renewer.Renew(ctx, *rec, s.policy.TTL())
}

//go:noinline
func (s *Supervisor) validateInto(ctx context.Context, rec *leaseapi.Record, out *outcome) {
	// The record Validate returns is the backend's; it never moves the
	// local deadline, so only the error is kept.
	_, out.err = s.cfg.Backend.Validate(ctx, *rec)
}

//go:noinline
func (s *Supervisor) releaseInto(ctx context.Context, rec *leaseapi.Record, out *outcome) {
	out.err = s.cfg.Backend.Release(ctx, *rec)
}

// opContext bounds one backend call.
//
//go:noinline
func (s *Supervisor) opContext(parent context.Context, ev event, deadline, sentAt time.Time) (context.Context, context.CancelFunc) {
	timeout := s.policy.OperationTimeout()
	if ev == evRenew || ev == evValidate {
		timeout = min(timeout, deadline.Sub(sentAt))
	}
	return s.cfg.Clock.WithTimeout(parent, timeout)
}

// finishCall redacts a failed call's error (and applies a mutant).
//
//go:noinline
func (s *Supervisor) finishCall(ev event, out *outcome) {
	if out.err != nil {
		out.err = leaseapi.Wrap(out.err, ev.String())
	}
	if mutant.On(mutant.DeadlineFromReply) {
		out.sentAt = s.cfg.Clock.Now()
	}
}

// publish stores the next view and schedules the next managed renewal
// after a renewal attempt: RenewEvery after a success's send time, Retry
// (or RenewEvery/4) after a failure. The loop re-arms the timer after.
func (s *Supervisor) publish(next *View, ev event, out *outcome, now time.Time) {
	s.view.Store(next)
	if s.managed.Load() && ev == evRenew && out.called {
		s.renewDue = next.SentAt.Add(s.policy.RenewEvery())
		if out.err != nil || next.State != leaseapi.StateActive {
			s.renewDue = now.Add(s.policy.RenewRetry())
		}
	}
}

func (s *Supervisor) startManaged() reply {
	v := s.view.Load()
	switch {
	case v.State.Terminal():
		return reply{err: terminalReply(v.State, evRenew)}
	case s.everManaged:
		return reply{err: leaseapi.NewError("start managed", leaseapi.ErrInvalidState, "already managed")}
	case s.cfg.Managed != nil && !s.cfg.Managed.Enter():
		return reply{err: leaseapi.NewError("start managed", leaseapi.ErrCapacity, "max managed")}
	}
	s.everManaged = true
	s.loss = make(chan Loss, 1)
	s.renewDue = v.SentAt.Add(s.policy.RenewEvery())
	if v.State == leaseapi.StateUncertain {
		s.renewDue = s.cfg.Clock.Now() // confirm at once rather than wait a full interval
	}
	s.managed.Store(true)
	return reply{loss: s.loss}
}

func (s *Supervisor) stopManaged() {
	if !s.managed.Load() {
		return
	}
	s.managed.Store(false)
	close(s.loss)
	s.leaveGate()
}

func (s *Supervisor) leaveGate() {
	if s.cfg.Managed != nil {
		s.cfg.Managed.Leave()
	}
}

// closeLease handles the client's close: release best effort within the
// close context and the OperationTimeout, then publish a terminal view
// (Released, or Lost).
func (s *Supervisor) closeLease() {
	v := s.view.Load()
	if v.State.Terminal() {
		return
	}
	ctx := context.Background()
	if s.cfg.CloseContext != nil {
		ctx = s.cfg.CloseContext()
	}
	out := newOutcome()
	out.sentAt = s.cfg.Clock.Now()
	s.callBackend(ctx, evClose, v, out)
	next := new(View)
	*next = *v
	transition(next, evClose, out, s.cfg.Clock.Now(), &s.policy)
	freeOutcome(out)
	s.view.Store(next)
}

// exit runs when the loop ends: stop the timers, settle the loss channel
// (one Loss if the lease was managed and did not end by release), close
// done, answer queued requests from the final view, tell the owner.
func (s *Supervisor) exit() {
	v := s.view.Load()
	if !v.State.Terminal() { // defensive: never leave a live view behind
		nv := new(View)
		*nv = *v
		expire(nv)
		s.view.Store(nv)
		v = nv
	}
	if s.timer.created() {
		s.timer.Stop()
	}
	if s.managed.Load() {
		if v.State != leaseapi.StateReleased {
			s.loss <- Loss{At: s.cfg.Clock.Now(), State: v.State, Err: v.Err}
		}
		close(s.loss)
		s.leaveGate()
	}
	s.inbox.Close() // closes done: Done() is the inbox's closed channel
	s.inbox.Drain(func(c call) { c.Reply(s.finalReply(c.Req)) })
	if s.cfg.OnExit != nil {
		s.cfg.OnExit(s)
	}
}

// Compile-time check that the real clock satisfies what we use.
var _ clock.Clock = clock.New()
