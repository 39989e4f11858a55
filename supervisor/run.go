package supervisor

import (
	"context"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
)

// run is the actor loop and the only writer of s.view. Each iteration
// handles one input: a request, the renewal timer, the deadline timer or
// Close. Disabled inputs are nil channels.
func (s *Supervisor) run() {
	defer s.exit()
	for !s.view.Load().State.Terminal() {
		var renewC <-chan time.Time
		if s.view.Load().Managed {
			renewC = s.renew.C
		}
		select {
		case c := <-s.inbox.Receive():
			if s.closeStarted() {
				c.Reply(s.finalReply(c.Req))
				return
			}
			c.Reply(s.handle(c.Req))
		case <-renewC:
			if s.closeStarted() {
				return
			}
			s.step(evRenew)
		case <-s.deadline.C:
			s.step(evDeadline)
		case ctx := <-s.closing:
			s.closeLease(ctx)
			return
		}
	}
}

// closeStarted reports whether the client has begun closing (it cancels
// Life first, then sends each supervisor its Close). If so, it waits for
// that Close and performs it, so that no request queued behind it reaches
// the backend with a canceled context: Close takes priority over queued
// work.
func (s *Supervisor) closeStarted() bool {
	if s.cfg.Life.Err() == nil {
		return false
	}
	s.closeLease(<-s.closing)
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
		return reply{err: s.step(evRelease)}
	case reqStartManaged:
		return s.startManaged()
	case reqStopManaged:
		s.stopManaged()
		return reply{}
	}
	return reply{err: leaseapi.NewError("supervisor", leaseapi.ErrInvalidState, "unknown request")}
}

// step performs at most one backend call for ev, applies the pure
// transition and publishes the result.
func (s *Supervisor) step(ev event) error {
	v := *s.view.Load()
	clk := s.cfg.Clock
	call, rep := plan(v, ev, clk.Now())
	out := outcome{}
	if call {
		out = s.callBackend(s.cfg.Life, ev, v)
	}
	now := clk.Now()
	next, rep2 := transition(v, ev, out, now, s.cfg.Policy)
	if call || rep == nil {
		rep = rep2
	}
	s.publish(next, ev, out, now)
	return rep
}

// callBackend makes the one backend call of a step, bounded by the policy's
// OperationTimeout and, for renew and validate, by the remaining trust: a
// reply after the deadline could not restore admission anyway.
func (s *Supervisor) callBackend(parent context.Context, ev event, v View) outcome {
	clk, p, b := s.cfg.Clock, s.cfg.Policy, s.cfg.Backend
	sentAt := clk.Now()
	timeout := p.OperationTimeout()
	if ev == evRenew || ev == evValidate {
		timeout = min(timeout, v.Deadline.Sub(sentAt))
	}
	ctx := parent
	if !s.cfg.Unbounded {
		var cancel context.CancelFunc
		ctx, cancel = clk.WithTimeout(parent, timeout)
		defer cancel()
	}
	out := outcome{called: true, sentAt: sentAt}
	switch ev {
	case evRenew:
		out.rec, out.err = s.cfg.Renewer.Renew(ctx, v.Record, p.TTL())
	case evValidate:
		out.err = b.Validate(ctx, v.Record)
	case evRelease, evClose:
		out.err = b.Release(ctx, v.Record)
	}
	if out.err != nil {
		out.err = leaseapi.Wrap(out.err, ev.String())
	}
	if mutant.On(mutant.DeadlineFromReply) {
		out.sentAt = clk.Now()
	}
	return out
}

// publish stores the next view, then re-arms the timers and delivers a loss
// for it. Side effects follow the store so that any reader woken by them
// sees the new view.
func (s *Supervisor) publish(next View, ev event, out outcome, now time.Time) {
	prev := s.view.Load()
	s.view.Store(&next)
	if next.State.Terminal() {
		return // exit stops the timers and settles the loss channel
	}
	// A deadline tick that found the deadline not yet reached (a clock that
	// fired early) re-arms too, so the actor never outlives its deadline.
	if ev == evDeadline || !next.Deadline.Equal(prev.Deadline) {
		s.deadline.Reset(max(next.Deadline.Sub(now), 0))
	}
	if next.Managed && ev == evRenew && out.called {
		due := next.SentAt.Add(s.cfg.Policy.RenewEvery())
		if out.err != nil {
			due = now.Add(s.cfg.Policy.RenewRetry())
		}
		s.armRenew(due, now)
	}
}

func (s *Supervisor) armRenew(due, now time.Time) {
	s.nextRenewDue = due
	s.renew.Reset(max(due.Sub(now), 0))
}

func (s *Supervisor) startManaged() reply {
	v := *s.view.Load()
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
	now := s.cfg.Clock.Now()
	due := v.SentAt.Add(s.cfg.Policy.RenewEvery())
	if v.State == leaseapi.StateUncertain {
		due = now // confirm at once rather than wait a full interval
	}
	s.renew = s.cfg.Clock.Timer(max(due.Sub(now), 0))
	s.nextRenewDue = due
	v.Managed = true
	s.view.Store(&v)
	return reply{loss: s.loss}
}

func (s *Supervisor) stopManaged() {
	v := *s.view.Load()
	if !v.Managed {
		return
	}
	v.Managed = false
	s.view.Store(&v)
	s.renew.Stop()
	close(s.loss)
	s.leaveGate()
}

func (s *Supervisor) leaveGate() {
	if s.cfg.Managed != nil {
		s.cfg.Managed.Leave()
	}
}

// closeLease handles Client.Close: release best effort within ctx and the
// OperationTimeout, then publish a terminal view (Released, or Lost).
func (s *Supervisor) closeLease(ctx context.Context) {
	v := *s.view.Load()
	if v.State.Terminal() {
		return
	}
	out := s.callBackend(ctx, evClose, v)
	next, _ := transition(v, evClose, out, s.cfg.Clock.Now(), s.cfg.Policy)
	s.view.Store(&next)
}

// exit runs when the loop ends: stop the timers, settle the loss channel
// (one Loss if the lease was managed and did not end by release), close
// done, answer queued requests from the final view, tell the owner.
func (s *Supervisor) exit() {
	v := s.view.Load()
	if !v.State.Terminal() { // defensive: never leave a live view behind
		nv := expire(*v)
		s.view.Store(&nv)
		v = &nv
	}
	s.deadline.Stop()
	if v.Managed {
		s.renew.Stop()
		if v.State != leaseapi.StateReleased {
			s.loss <- Loss{At: s.cfg.Clock.Now(), State: v.State, Err: v.Err}
		}
		close(s.loss)
		s.leaveGate()
	}
	s.inbox.Close()
	close(s.done)
	s.inbox.Drain(func(c call) { c.Reply(s.finalReply(c.Req)) })
	if s.cfg.OnExit != nil {
		s.cfg.OnExit(s)
	}
}

// Compile-time check that the real clock satisfies what we use.
var _ clock.Clock = clock.New()
