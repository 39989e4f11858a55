package supervisor

import (
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// This file is the whole lease state machine of DESIGN §1 and §3: one pure
// function, step, from the actor's state and one event to the next state
// and the effects the loop (run.go) must carry out. step reads no clock,
// does no I/O and touches no channel; every rule is named (effects.rule)
// and has a row in core_test.go, and a test drives every state × event
// pair through it.

// request is what a caller asks of the actor.
type request uint8

const (
	reqRenew request = iota + 1
	reqValidate
	reqRelease
	reqStartManaged
	reqStopManaged
)

func (r request) String() string {
	switch r {
	case reqRenew:
		return "renew"
	case reqValidate:
		return "validate"
	case reqRelease:
		return "release"
	case reqStartManaged:
		return "start managed"
	case reqStopManaged:
		return "stop managed"
	}
	return "unknown"
}

// eventKind is what a step of the actor reacts to.
type eventKind uint8

const (
	evRequest eventKind = iota + 1 // a caller's request, taken from the inbox
	evOutcome                      // the backend call the last step started has returned
	evTimer                        // the timer fired (deadline or renewal due)
	evClose                        // the client is closing
)

// event is one input of step. at is the local clock reading the loop took
// when it received the event (for an outcome: after the reply arrived).
type event struct {
	kind eventKind
	at   time.Time
	req  request // evRequest
	// slot: for reqStartManaged, the loop took a managed-renewal slot from
	// the Gate before the step (step gives it back if it refuses).
	slot bool
	out  outcome // evOutcome
}

// op is a backend call.
type op uint8

const (
	opRenew op = iota + 1
	opValidate
	opRelease
)

func (o op) String() string {
	switch o {
	case opRenew:
		return "renew"
	case opValidate:
		return "validate"
	case opRelease:
		return "release"
	}
	return "unknown"
}

// outcome is the result of a backend call.
type outcome struct {
	sentAt time.Time       // local clock reading taken before the call was sent
	rec    leaseapi.Record // the renewed record (opRenew, success)
	err    error           // the classified backend error
}

// callSpec is a backend call for the loop to make.
type callSpec struct {
	op      op
	timeout time.Duration // the policy's OperationTimeout
	// trustUntil, when set, also bounds the call: the deadline, after
	// which a renew or validate reply could not restore admission anyway.
	trustUntil time.Time
	// onClose: bounded by the client's close context instead of its life.
	onClose bool
}

// reply is the answer to a caller.
type reply struct {
	err  error
	loss <-chan Loss // set by a successful reqStartManaged
}

// effects is what a step asks of the loop, carried out in this order:
// publish the view, report the state change, settle the loss channel
// (deliver/close), give the slot back, reply to the caller, then either
// make the call (and feed its outcome back), exit, or arm the timer.
type effects struct {
	rule      string // the rule that fired (never empty)
	publish   bool   // store a copy of core.view as the published View
	changed   bool   // the state changed from from (hook)
	from      leaseapi.State
	fromErr   error    // the view's Err before the change (hook)
	openLoss  bool     // make the loss channel; the reply carries it
	loss      bool     // send lossV on the loss channel, then close it
	lossV     Loss     //
	closeLoss bool     // close the loss channel without a value
	leaveGate bool     // give the managed-renewal slot back
	replies   bool     // answer the request being served with rep
	rep       reply    //
	call      callSpec // call.op != 0: make this call, then step its outcome
	exit      bool     // the lease is terminal: the actor exits
	arm       time.Time
	closeErr  error // the release on close failed or could not be confirmed
}

// core is the actor's whole state; only step changes it. Its one-byte
// fields sit together, after the others: a lease's Handle and Supervisor
// are one allocation, which must stay within 760 bytes
// (runtime's TestHandleSizeClass).
type core struct {
	view        View // what is published (a copy) after each change
	renewDue    time.Time
	calling     op      // the call in flight (0: none)
	caller      request // the request awaiting that call's outcome (0: none)
	closing     bool    // the call in flight is the release on close
	everManaged bool    // StartManaged succeeded once: a second is refused
}

// newCore is the state of a fresh grant.
func newCore(p *leaseapi.Policy, g Grant) core {
	return core{view: View{
		Record:     g.Record,
		AcquiredAt: g.Record.AcquiredAt,
		State:      leaseapi.StateActive,
		SentAt:     g.SentAt,
		RecvAt:     g.RecvAt,
		Deadline:   g.Record.LocalDeadline(g.SentAt, *p),
	}}
}

// Rule names, one per row of the table test.
const (
	ruleBusy              = "busy: only the call's outcome may arrive"
	ruleStrayOutcome      = "idle: an outcome without a call is ignored"
	ruleTerminal          = "terminal: answer from the final view and exit"
	ruleRenewCalls        = "renew before the deadline calls the backend"
	ruleValidateCalls     = "validate before the deadline calls the backend"
	ruleReleaseCalls      = "release ends renewal and calls the backend"
	ruleStartManaged      = "start managed turns renewal on"
	ruleStartUncertain    = "start managed on an uncertain lease renews at once"
	ruleStartTwice        = "start managed twice is invalid"
	ruleStartNoSlot       = "start managed without a slot is capacity"
	ruleStopManaged       = "stop managed turns renewal off"
	ruleStopUnmanaged     = "stop managed when unmanaged does nothing"
	ruleDeadline          = "at or past the deadline anything but a release expires without I/O"
	ruleRenewDue          = "timer at the renewal due calls the backend"
	ruleEarlyTimer        = "timer before anything is due re-arms"
	ruleClose             = "close releases under the close context"
	ruleRenewOK           = "renew ok extends from the send time"
	ruleRenewLate         = "renew ok past its own deadline expires"
	ruleRenewSkew         = "renew ok with a skewed backend clock is uncertain"
	ruleRenewRegression   = "renew ok for another grant is lost"
	ruleValidateOK        = "validate ok restores active without extending"
	ruleValidateLate      = "validate ok past the deadline expires"
	ruleCallStale         = "call stale owner is lost"
	ruleCallFailed        = "call failed is uncertain"
	ruleCallFailedLate    = "call failed past the deadline expires"
	ruleReleaseOK         = "release ok is released"
	ruleCloseReleased     = "close release ok is released"
	ruleCloseNotConfirmed = "close release not confirmed is lost"
)

// step applies event ev to c under policy p and returns the effects. It is
// the only function that changes a core.
func step(c *core, p *leaseapi.Policy, ev event) effects {
	var e effects
	stepInto(c, p, &ev, &e)
	return e
}

// stepInto is step writing into e (zero on entry), for the loop, which
// keeps one event and one effects for a whole service instead of copying
// them through every call.
func stepInto(c *core, p *leaseapi.Policy, ev *event, e *effects) {
	from, fromErr := c.view.State, c.view.Err
	switch {
	case c.calling != 0:
		if ev.kind != evOutcome {
			// The loop never does this (it receives nothing while a call
			// is in flight); refuse rather than act twice.
			e.rule = ruleBusy
			e.replies, e.rep = ev.kind == evRequest, reply{err: leaseapi.NewError(ev.req.String(), leaseapi.ErrInvalidState, "supervisor busy")}
			if ev.slot {
				e.leaveGate = true
			}
			return
		}
		c.onOutcome(p, ev, e)
	case c.view.State.Terminal():
		e.rule = ruleTerminal
		if ev.kind == evRequest {
			e.replies, e.rep = true, finalReply(c.view.State, ev.req)
		}
		e.leaveGate = ev.slot
	case !ev.at.Before(c.view.Deadline) && !releases(ev):
		// Whatever arrives at or past the deadline finds the lease
		// expired, as the timer would have; only a release still goes
		// out, since it hands the key over sooner than the backend's
		// expiry would.
		e.rule = ruleDeadline
		expire(&c.view)
		if ev.kind == evRequest {
			e.replies, e.rep = true, reply{err: errExpired(ev.req.String())}
			if ev.req == reqStopManaged {
				e.rep = reply{}
			}
		}
		e.leaveGate = ev.slot
	case ev.kind == evOutcome:
		e.rule = ruleStrayOutcome
	case ev.kind == evRequest:
		c.onRequest(p, ev, e)
	case ev.kind == evTimer:
		c.onTimer(p, ev, e)
	case ev.kind == evClose:
		e.rule = ruleClose
		c.startCall(p, opRelease, 0, e)
		c.closing, e.call.onClose = true, true
	}
	if c.view.State != from {
		e.publish, e.changed, e.from, e.fromErr = true, true, from, fromErr
	}
	if c.view.State.Terminal() && c.calling == 0 {
		c.finish(e, ev.at)
	}
	if !e.exit && e.call.op == 0 {
		e.arm = c.wakeAt()
	}
}

func (c *core) onRequest(p *leaseapi.Policy, ev *event, e *effects) {
	v := &c.view
	switch ev.req {
	case reqRenew:
		e.rule = ruleRenewCalls
		c.startCall(p, opRenew, ev.req, e)
	case reqValidate:
		e.rule = ruleValidateCalls
		c.startCall(p, opValidate, ev.req, e)
	case reqRelease:
		// A release ends managed renewal whatever its outcome: the holder
		// is giving the lease up, and renewing it after a release that
		// failed would keep the key from everyone until the client closes.
		// Releasing past the deadline still hands the key over sooner than
		// waiting for the backend's expiry.
		e.rule = ruleReleaseCalls
		c.stopManaged(e)
		c.startCall(p, opRelease, ev.req, e)
	case reqStartManaged:
		switch {
		case c.everManaged:
			e.rule = ruleStartTwice
			e.leaveGate = ev.slot
			e.replies, e.rep = true, reply{err: leaseapi.NewError("start managed", leaseapi.ErrInvalidState, "already managed")}
			return
		case !ev.slot:
			e.rule = ruleStartNoSlot
			e.replies, e.rep = true, reply{err: leaseapi.NewError("start managed", leaseapi.ErrCapacity, "max managed")}
			return
		}
		c.everManaged = true
		v.Managed = true
		e.publish, e.openLoss, e.replies = true, true, true
		e.rule = ruleStartManaged
		c.renewDue = v.SentAt.Add(p.RenewEvery())
		if v.State == leaseapi.StateUncertain {
			e.rule = ruleStartUncertain
			c.renewDue = ev.at // confirm at once rather than wait a full interval
		}
	case reqStopManaged:
		e.rule = ruleStopUnmanaged
		if v.Managed {
			e.rule = ruleStopManaged
			c.stopManaged(e)
		}
		e.replies = true
	}
}

func (c *core) onTimer(p *leaseapi.Policy, ev *event, e *effects) {
	switch {
	case c.view.Managed && !ev.at.Before(c.renewDue):
		e.rule = ruleRenewDue
		c.startCall(p, opRenew, 0, e)
	default: // a clock that fired early, or a renewal no longer due
		e.rule = ruleEarlyTimer
	}
}

// startCall asks the loop for backend call o on behalf of caller (0: the
// actor's own renewal or the release on close).
func (c *core) startCall(p *leaseapi.Policy, o op, caller request, e *effects) {
	c.calling, c.caller = o, caller
	e.call = callSpec{op: o, timeout: p.OperationTimeout()}
	if o != opRelease {
		e.call.trustUntil = c.view.Deadline
	}
}

// onOutcome applies the outcome of the call in flight.
func (c *core) onOutcome(p *leaseapi.Policy, ev *event, e *effects) {
	o, caller, closing := c.calling, c.caller, c.closing
	c.calling, c.caller, c.closing = 0, 0, false
	v, out, now := &c.view, &ev.out, ev.at
	var rep error
	switch {
	case closing:
		e.rule = ruleCloseReleased
		if out.err == nil {
			v.State, v.Err = leaseapi.StateReleased, nil
			break
		}
		e.rule = ruleCloseNotConfirmed
		v.State, v.Err = leaseapi.StateLost, errClientClosed
		if !isStale(out.err) { // a stale owner holds nothing of ours
			e.closeErr = out.err
		}
	case out.err != nil && isStale(out.err):
		e.rule = ruleCallStale
		v.State, v.Err = leaseapi.StateLost, out.err
		rep = out.err
	case out.err != nil && !now.Before(v.Deadline):
		e.rule = ruleCallFailedLate
		expire(v)
		rep = out.err
	case out.err != nil:
		e.rule = ruleCallFailed
		v.State, v.Err = leaseapi.StateUncertain, out.err
		rep = out.err
	case o == opRelease:
		e.rule = ruleReleaseOK
		v.State, v.Err = leaseapi.StateReleased, nil
	case o == opRenew:
		rep = c.renewed(p, out, now, e)
	case o == opValidate:
		e.rule = ruleValidateOK
		if !now.Before(v.Deadline) {
			e.rule = ruleValidateLate
			expire(v)
			rep = errExpired(o.String())
			break
		}
		v.State, v.Err = leaseapi.StateActive, nil
	}
	e.publish = true // the record, the send instants or the reason changed
	if o == opRenew && v.Managed {
		// Schedule the next managed renewal: RenewEvery after a success's
		// send time, Retry (or RenewEvery/4) after a failure.
		c.renewDue = v.SentAt.Add(p.RenewEvery())
		if out.err != nil || v.State != leaseapi.StateActive {
			c.renewDue = now.Add(p.RenewRetry())
		}
	}
	if caller != 0 {
		e.replies, e.rep = true, reply{err: rep}
	}
}

// renewed applies a successful renewal reply.
func (c *core) renewed(p *leaseapi.Policy, out *outcome, now time.Time, e *effects) error {
	v := &c.view
	if !sameGrant(&v.Record, &out.rec) {
		e.rule = ruleRenewRegression
		v.State, v.Err = leaseapi.StateLost, errRegression
		return v.Err
	}
	skew := skewed(v, out, now, p)
	v.Record, v.SentAt, v.RecvAt = out.rec, out.sentAt, now
	if skew {
		// The backend's clock moved unlike ours: keep the old deadline and
		// deny admission until a renewal agrees.
		e.rule = ruleRenewSkew
		v.State, v.Err = leaseapi.StateUncertain, errSkew
		return v.Err
	}
	v.Deadline = out.rec.LocalDeadline(out.sentAt, *p)
	if !now.Before(v.Deadline) {
		e.rule = ruleRenewLate
		expire(v)
		return errExpired("renew")
	}
	e.rule = ruleRenewOK
	v.State, v.Err = leaseapi.StateActive, nil
	return nil
}

// stopManaged turns managed renewal off: the loss channel closes without
// a value and the slot goes back.
func (c *core) stopManaged(e *effects) {
	if !c.view.Managed {
		return
	}
	c.view.Managed = false
	e.publish, e.closeLoss, e.leaveGate = true, true, true
}

// finish ends a terminal lease: a managed one delivers its Loss (none if
// it was released) and gives its slot back; the actor exits.
func (c *core) finish(e *effects, at time.Time) {
	e.exit = true
	if !c.view.Managed {
		return
	}
	c.view.Managed = false
	e.publish, e.leaveGate = true, true
	if c.view.State == leaseapi.StateReleased {
		e.closeLoss = true
		return
	}
	e.loss = true
	e.lossV = Loss{At: at, State: c.view.State, Err: c.view.Err}
}

// wakeAt is the next instant the actor must act: the deadline or, if
// earlier and managed, the next renewal.
func (c *core) wakeAt() time.Time {
	if c.view.Managed && c.renewDue.Before(c.view.Deadline) {
		return c.renewDue
	}
	return c.view.Deadline
}

// finalReply answers a request from a terminal state, without I/O.
func finalReply(s leaseapi.State, r request) reply {
	switch r {
	case reqStopManaged:
		return reply{}
	case reqStartManaged:
		if s == leaseapi.StateReleased {
			return reply{err: leaseapi.NewError("start managed", leaseapi.ErrInvalidState, "lease released")}
		}
		return reply{err: leaseapi.NewError("start managed", leaseapi.ErrLost, "")}
	case reqRelease:
		if s == leaseapi.StateReleased {
			return reply{} // Release is idempotent
		}
	}
	if s == leaseapi.StateReleased {
		return reply{err: leaseapi.NewError(r.String(), leaseapi.ErrInvalidState, "lease released")}
	}
	return reply{err: leaseapi.NewError(r.String(), leaseapi.ErrLost, "")}
}

func expire(v *View) {
	v.State = leaseapi.StateExpired
	v.Err = errDeadline
}

var (
	errDeadline     = leaseapi.NewError("deadline", leaseapi.ErrLost, "deadline passed")
	errClientClosed = leaseapi.NewError("close", leaseapi.ErrLost, "client closed")
	errRegression   = leaseapi.NewError("renew", leaseapi.ErrFencingRegression, "renewal changed the grant")
	// errSkew is the reply to a renewal whose backend timestamp is outside
	// what the local clock allows.
	errSkew = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "backend clock diverges beyond the safety margin")
)

func isStale(err error) bool { return leaseapi.Kind(err) == leaseapi.ErrStaleOwner }

func errExpired(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrLost, "deadline passed")
}

// releases reports whether ev gives the lease up: a release request or
// the client's close.
func releases(ev *event) bool {
	return ev.kind == evClose || ev.kind == evRequest && ev.req == reqRelease
}

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
