package supervisor

import (
	"context"
	"time"

	"github.com/leasekit/lease/internal/callctx"
	"github.com/leasekit/lease/leaseapi"
)

// run is the actor loop: wait for one input (next), serve it (serve), and
// exit when the lease is over. It is the only writer of s.view. A backend
// call runs on the actor (see doc.go for why): while it runs nothing else
// is received, and its outcome is the next event.
//
// The wait and the service are separate functions so that an idle actor,
// parked in next, has only small frames on its stack: the events and
// effects live in serve's frame, which is not on the stack while parked,
// and the runtime can then shrink the stack of an idle lease back down.
func (s *Supervisor) run() {
	defer s.exit()
	s.armed = s.st.wakeAt()
	for {
		in := s.next()
		if in.withdrawn {
			continue // withdrawn by its caller: never acted on
		}
		if s.serve(in) {
			return
		}
	}
}

// input is what next received: which arm fired and, for a request, the
// call it came with.
type input struct {
	kind      eventKind // evRequest, evTimer or evClose
	cur       call      // the request's call (evRequest)
	slot      bool      // a StartManaged took its Gate slot
	withdrawn bool      // the request was withdrawn: nothing to do
}

// serve steps the event of in and carries out the effects, including the
// backend calls they ask for, each call's outcome being the next event.
// It reports whether the actor must exit.
func (s *Supervisor) serve(in input) (exit bool) {
	ev := event{kind: in.kind, req: in.cur.Req, slot: in.slot, at: s.cfg.Clock.Now()}
	var e effects
	for {
		e = effects{}
		stepInto(&s.st, &s.policy, &ev, &e)
		s.apply(&e, in.cur, ev.at)
		if e.exit {
			return true
		}
		if e.call.op == 0 {
			s.arm(e.arm, ev.at)
			return false
		}
		ev = event{kind: evOutcome}
		ev.at = s.perform(&e.call, &ev.out)
		s.reportCall(e.call.op, &ev.out, ev.at)
	}
}

// next waits for the next input.
//
// Close takes priority over queued work, so that no request queued behind
// it reaches the backend with a canceled context: a non-blocking look at
// the close arm comes first. The timer is made at the first wait rather
// than when the lease starts, so that a request already queued by then (a
// release right after the acquisition) is served without ever making one.
func (s *Supervisor) next() input {
	closing := s.cfg.Life.Done()
	select {
	case <-closing:
		return input{kind: evClose}
	default:
	}
	if s.due {
		// The step asked to be woken at an instant already past (a managed
		// renewal due as soon as the last one was answered): the timer event
		// is stepped at once, after a look at the inbox, without the timer.
		s.due = false
		select {
		case c := <-s.inbox.Receive():
			return s.request(c)
		default:
		}
		return input{kind: evTimer}
	}
	if s.timer == (timer{}) {
		select {
		case c := <-s.inbox.Receive():
			return s.request(c)
		default:
		}
		s.timer = newTimer(s.cfg.Clock, s.cfg.WallClock, max(s.cfg.Clock.Until(s.armed), 0))
	}
	select {
	case c := <-s.inbox.Receive():
		return s.request(c)
	case <-s.timer.C():
		return input{kind: evTimer}
	case <-closing:
		return input{kind: evClose}
	}
}

// request claims c; a StartManaged takes its Gate slot here, before the
// step (which gives it back if it refuses).
func (s *Supervisor) request(c call) input {
	if !c.Take() {
		return input{withdrawn: true}
	}
	in := input{kind: evRequest, cur: c}
	if c.Req == reqStartManaged {
		in.slot = s.cfg.Managed == nil || s.cfg.Managed.Enter()
	}
	return in
}

// apply carries out a step's effects other than the call, the exit and
// the timer, in the order effects documents.
func (s *Supervisor) apply(e *effects, cur call, at time.Time) {
	if e.publish {
		s.publish()
	}
	if e.changed && s.cfg.OnStateChange != nil {
		v := &s.st.view
		s.cfg.OnStateChange(stateChange(e.from, e.fromErr, v, at))
	}
	if e.openLoss {
		s.loss = make(chan Loss, 1)
		e.rep.loss = s.loss
	}
	if e.loss {
		s.loss <- e.lossV // buffer 1, sent once: never blocks
	}
	if e.loss || e.closeLoss {
		close(s.loss)
	}
	if e.leaveGate && s.cfg.Managed != nil {
		s.cfg.Managed.Leave()
	}
	if e.closeErr != nil {
		s.closeErr = e.closeErr
	}
	if e.replies {
		cur.Reply(e.rep)
	}
}

// arm points the timer at instant at, unless it already is (before the
// timer is made, next makes it at s.armed). now is the step's clock
// reading, taken before: the timer, set to fire at - now after this
// later instant, fires at or after at, never before, without a clock
// reading of its own. An instant not after now is not armed at all:
// next steps the timer event at once (s.due), and the timer keeps the
// instant it had, so that it still is armed at s.armed (if it fires
// later, the core finds nothing due and re-arms, or acts on what is due).
func (s *Supervisor) arm(at, now time.Time) {
	if !at.After(now) {
		s.due = true // next steps the timer event without the timer
		return
	}
	if at.Equal(s.armed) {
		return
	}
	s.armed = at
	if s.timer != (timer{}) {
		s.timer.Reset(max(at.Sub(now), 0))
	}
}

// perform makes backend call c for the lease, writes its outcome to out
// (zero on entry) and returns the clock's reading once it has returned
// (the instant of the outcome event: one reading serves both). The call is bounded by the client's life (or, for the
// release on close, by the close context), by the policy's
// OperationTimeout and, for renew and validate, by the remaining trust: a
// reply after the deadline could not restore admission anyway, so none is
// sent at or after it. On the wall clock the bound is a context shared
// with the calls of other leases that end in the same slot of time
// (internal/callctx), which may end it up to 1/64 of it early.
func (s *Supervisor) perform(c *callSpec, out *outcome) time.Time {
	parent := s.cfg.Life
	if c.onClose {
		parent = context.Background()
		if s.cfg.CloseContext != nil {
			parent = s.cfg.CloseContext()
		}
	}
	sentAt := s.cfg.Clock.Now() // read before the call is sent, as it must be
	timeout := c.timeout
	if !c.trustUntil.IsZero() {
		timeout = min(timeout, c.trustUntil.Sub(sentAt))
		if timeout <= 0 {
			out.sentAt, out.err = sentAt, leaseapi.NewError(c.op.String(), leaseapi.ErrTimeout, "deadline passed before send")
			return sentAt
		}
	}
	ctx, cancel := parent, context.CancelFunc(nil)
	switch {
	case s.cfg.Unbounded:
	case s.cfg.shared != nil && !c.onClose && timeout >= callctx.Min:
		ctx = s.cfg.shared.Context(sentAt, timeout) // shared: never canceled here
	default:
		ctx, cancel = s.cfg.Clock.WithTimeout(parent, timeout)
	}
	switch c.op {
	case opRenew:
		out.rec, out.err = s.cfg.Renewer.Renew(ctx, s.st.view.Record, s.policy.TTL())
	case opValidate:
		// The record Validate returns is the backend's; it never moves the
		// local deadline, so only the error is kept.
		_, out.err = s.cfg.Backend.Validate(ctx, s.st.view.Record)
	case opRelease:
		out.err = s.cfg.Backend.Release(ctx, s.st.view.Record)
	}
	if cancel != nil {
		cancel()
	}
	doneAt := s.cfg.Clock.Now()
	out.sentAt = anchor(sentAt, doneAt)
	if out.err != nil {
		out.err = leaseapi.Wrap(out.err, c.op.String())
	}
	return doneAt
}

// exit runs once, deferred, as the loop ends: stop the timer, close done,
// answer the requests still queued from the final view, tell the owner.
// The core guarantees a terminal view by then; if the loop ended any
// other way (a backend panicked or called runtime.Goexit), the view is
// made Expired first, with its state change reported, so that no live
// view is left behind.
func (s *Supervisor) exit() {
	if !s.st.view.State.Terminal() {
		from, fromErr, at := s.st.view.State, s.st.view.Err, s.cfg.Clock.Now()
		expire(&s.st.view)
		if s.cfg.OnStateChange != nil {
			s.cfg.OnStateChange(stateChange(from, fromErr, &s.st.view, at))
		}
		if s.st.view.Managed {
			s.st.view.Managed = false
			s.loss <- Loss{At: at, State: s.st.view.State, Err: s.st.view.Err}
			close(s.loss)
			if s.cfg.Managed != nil {
				s.cfg.Managed.Leave()
			}
		}
		s.publish()
	}
	if s.timer != (timer{}) {
		s.timer.Stop()
	}
	if s.cfg.Held != nil {
		s.cfg.Held.Leave()
	}
	s.inbox.Close() // closes done: Done() is the inbox's closed channel
	final := s.st.view.State
	s.inbox.Drain(func(c call) {
		if c.Take() {
			c.Reply(finalReply(final, c.Req))
		}
	})
	if s.cfg.OnExit != nil {
		s.cfg.OnExit(s)
	}
}
