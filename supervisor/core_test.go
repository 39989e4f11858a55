package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// The fixture: TTL 10s, margin 1s, RenewEvery 3s (retry 750ms),
// OperationTimeout 2s; the grant was sent at t0, so the deadline is t0+9s
// and a managed lease's first renewal is due at t0+3s.
var (
	t0       = time.Unix(1_000_000, 0)
	deadline = t0.Add(9 * time.Second)
	due      = t0.Add(3 * time.Second)
	before   = t0.Add(4 * time.Second) // after due, before the deadline
	early    = t0.Add(time.Second)     // before anything is due
	sent     = t0.Add(3 * time.Second) // a call's send instant
	key      = leaseapi.MustKey("t", "k")
	grant    = leaseapi.Record{Key: key, Owner: "o", Token: 7, AcquiredAt: t0, ExpiresAt: t0.Add(10 * time.Second)}
)

func testPolicy(t *testing.T) *leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, RenewEvery: 3 * time.Second, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// renewedAt is the backend's reply to a renewal sent at sent, stamped
// advance after the grant on the backend's clock, granting ttl.
func renewedAt(advance, ttl time.Duration) leaseapi.Record {
	r := grant
	r.AcquiredAt = t0.Add(advance)
	r.ExpiresAt = r.AcquiredAt.Add(ttl)
	return r
}

// States.
func fresh(t *testing.T) core {
	return newCore(testPolicy(t), Grant{Record: grant, SentAt: t0, RecvAt: t0.Add(10 * time.Millisecond)})
}

func with(c core, f func(*core)) core { f(&c); return c }

func stateOf(t *testing.T, s leaseapi.State) core {
	return with(fresh(t), func(c *core) {
		c.view.State = s
		if s == leaseapi.StateUncertain {
			c.view.Err = leaseapi.NewError("renew", leaseapi.ErrAmbiguousOutcome, "")
		}
		if s.Terminal() && s != leaseapi.StateReleased {
			c.view.Err = errDeadline
		}
	})
}

func managed(c core) core {
	return with(c, func(c *core) { c.view.Managed, c.everManaged, c.renewDue = true, true, due })
}

func calling(c core, o op, caller request) core {
	return with(c, func(c *core) { c.calling, c.caller = o, caller })
}

func closingCall(c core) core {
	return with(c, func(c *core) { c.calling, c.closing = opRelease, true })
}

// Events.
func req(r request, at time.Time) event { return event{kind: evRequest, req: r, at: at} }
func start(at time.Time, slot bool) event {
	return event{kind: evRequest, req: reqStartManaged, at: at, slot: slot}
}
func tick(at time.Time) event    { return event{kind: evTimer, at: at} }
func closeAt(at time.Time) event { return event{kind: evClose, at: at} }
func okOut(at time.Time) event   { return event{kind: evOutcome, at: at, out: outcome{sentAt: sent}} }
func renewOut(r leaseapi.Record, at time.Time) event {
	return event{kind: evOutcome, at: at, out: outcome{sentAt: sent, rec: r}}
}
func failOut(kind error, at time.Time) event {
	return event{kind: evOutcome, at: at, out: outcome{sentAt: sent, err: leaseapi.NewError("op", kind, "")}}
}

// summary is what a row checks: the state after the step and its effects.
type summary struct {
	State     leaseapi.State
	Deadline  time.Time
	Managed   bool
	Call      op
	Reply     string // "none", "ok" or the sentinel's text
	Loss      leaseapi.State
	CloseLoss bool
	OpenLoss  bool
	LeaveGate bool
	Exit      bool
	CloseErr  string
	Arm       time.Time
}

func kindText(replies bool, err error) string {
	switch {
	case !replies:
		return "none"
	case err == nil:
		return "ok"
	}
	return leaseapi.Kind(err).Error()
}

func summarise(c *core, e *effects) summary {
	s := summary{
		State: c.view.State, Deadline: c.view.Deadline, Managed: c.view.Managed, Call: e.call.op,
		Reply: kindText(e.replies, e.rep.err), CloseLoss: e.closeLoss, OpenLoss: e.openLoss,
		LeaveGate: e.leaveGate, Exit: e.exit, Arm: e.arm, CloseErr: "none",
	}
	if e.loss {
		s.Loss = e.lossV.State
	}
	if e.closeErr != nil {
		s.CloseErr = leaseapi.Kind(e.closeErr).Error()
	}
	return s
}

var (
	ok           = "ok"
	none         = "none"
	lost         = leaseapi.ErrLost.Error()
	stale        = leaseapi.ErrStaleOwner.Error()
	ambiguous    = leaseapi.ErrAmbiguousOutcome.Error()
	unavailable  = leaseapi.ErrBackendUnavailable.Error()
	invalidState = leaseapi.ErrInvalidState.Error()
	capacity     = leaseapi.ErrCapacity.Error()
	regression   = leaseapi.ErrFencingRegression.Error()
	timeout      = leaseapi.ErrTimeout.Error()
)

type row struct {
	rule   string // the rule the step must report
	detail string // what this row shows beyond the rule's name
	c      core
	ev     event
	want   summary
}

func (r row) name() string {
	if r.detail == "" {
		return r.rule
	}
	return r.rule + "/" + r.detail
}

// rows is the transition table: one or more named rows per rule.
func rows(t *testing.T) []row {
	p := testPolicy(t)
	active, uncertain := stateOf(t, leaseapi.StateActive), stateOf(t, leaseapi.StateUncertain)
	mActive := managed(active)
	renewed := renewedAt(3*time.Second, 10*time.Second)
	newDeadline := sent.Add(9 * time.Second)
	retryAt := func(at time.Time) time.Time { return at.Add(p.RenewRetry()) }
	after := deadline.Add(time.Millisecond)
	A, U, E, L, R := leaseapi.StateActive, leaseapi.StateUncertain, leaseapi.StateExpired, leaseapi.StateLost, leaseapi.StateReleased
	return []row{
		// Requests.
		{ruleRenewCalls, "", active, req(reqRenew, before), summary{State: A, Deadline: deadline, Call: opRenew, Reply: none, CloseErr: none}},
		{ruleRenewCalls, "from uncertain", uncertain, req(reqRenew, before), summary{State: U, Deadline: deadline, Call: opRenew, Reply: none, CloseErr: none}},
		{ruleDeadline, "renew", active, req(reqRenew, deadline), summary{State: E, Deadline: deadline, Reply: lost, Exit: true, CloseErr: none}},
		{ruleDeadline, "renew, managed: the loss is delivered", mActive, req(reqRenew, deadline), summary{State: E, Deadline: deadline, Reply: lost, Loss: E, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleValidateCalls, "", uncertain, req(reqValidate, before), summary{State: U, Deadline: deadline, Call: opValidate, Reply: none, CloseErr: none}},
		{ruleDeadline, "validate", uncertain, req(reqValidate, after), summary{State: E, Deadline: deadline, Reply: lost, Exit: true, CloseErr: none}},
		{ruleReleaseCalls, "", active, req(reqRelease, before), summary{State: A, Deadline: deadline, Call: opRelease, Reply: none, CloseErr: none}},
		{ruleReleaseCalls, "managed: renewal ends first", mActive, req(reqRelease, before), summary{State: A, Deadline: deadline, Call: opRelease, Reply: none, CloseLoss: true, LeaveGate: true, CloseErr: none}},
		{ruleReleaseCalls, "past the deadline still calls", active, req(reqRelease, after), summary{State: A, Deadline: deadline, Call: opRelease, Reply: none, CloseErr: none}},
		{ruleStartManaged, "", active, start(early, true), summary{State: A, Deadline: deadline, Managed: true, Reply: ok, OpenLoss: true, Arm: due, CloseErr: none}},
		{ruleStartUncertain, "", uncertain, start(before, true), summary{State: U, Deadline: deadline, Managed: true, Reply: ok, OpenLoss: true, Arm: before, CloseErr: none}},
		{ruleStartTwice, "", mActive, start(early, true), summary{State: A, Deadline: deadline, Managed: true, Reply: invalidState, LeaveGate: true, Arm: due, CloseErr: none}},
		{ruleStartTwice, "after stop", with(active, func(c *core) { c.everManaged = true }), start(early, true), summary{State: A, Deadline: deadline, Reply: invalidState, LeaveGate: true, Arm: deadline, CloseErr: none}},
		{ruleDeadline, "start managed gives the slot back", active, start(deadline, true), summary{State: leaseapi.StateExpired, Deadline: deadline, Reply: lost, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleDeadline, "stop managed delivers the loss", mActive, req(reqStopManaged, after), summary{State: leaseapi.StateExpired, Deadline: deadline, Reply: ok, Loss: leaseapi.StateExpired, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleStartNoSlot, "", active, start(early, false), summary{State: A, Deadline: deadline, Reply: capacity, Arm: deadline, CloseErr: none}},
		{ruleStopManaged, "", mActive, req(reqStopManaged, early), summary{State: A, Deadline: deadline, Reply: ok, CloseLoss: true, LeaveGate: true, Arm: deadline, CloseErr: none}},
		{ruleStopUnmanaged, "", active, req(reqStopManaged, early), summary{State: A, Deadline: deadline, Reply: ok, Arm: deadline, CloseErr: none}},
		// The timer.
		{ruleDeadline, "timer", uncertain, tick(deadline), summary{State: E, Deadline: deadline, Reply: none, Exit: true, CloseErr: none}},
		{ruleDeadline, "timer, managed: the loss is delivered", managed(uncertain), tick(deadline), summary{State: E, Deadline: deadline, Reply: none, Loss: E, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleRenewDue, "", mActive, tick(due), summary{State: A, Deadline: deadline, Managed: true, Call: opRenew, Reply: none, CloseErr: none}},
		{ruleEarlyTimer, "", mActive, tick(early), summary{State: A, Deadline: deadline, Managed: true, Reply: none, Arm: due, CloseErr: none}},
		{ruleEarlyTimer, "unmanaged: renewal is never due", active, tick(before), summary{State: A, Deadline: deadline, Reply: none, Arm: deadline, CloseErr: none}},
		// Close.
		{ruleClose, "", mActive, closeAt(early), summary{State: A, Deadline: deadline, Managed: true, Call: opRelease, Reply: none, CloseErr: none}},
		{ruleCloseReleased, "", closingCall(active), okOut(early), summary{State: R, Deadline: deadline, Reply: none, Exit: true, CloseErr: none}},
		{ruleCloseReleased, "managed: the loss closes without a value", closingCall(mActive), okOut(early), summary{State: R, Deadline: deadline, Reply: none, CloseLoss: true, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleCloseNotConfirmed, "ambiguous", closingCall(mActive), failOut(leaseapi.ErrAmbiguousOutcome, early), summary{State: L, Deadline: deadline, Reply: none, Loss: L, LeaveGate: true, Exit: true, CloseErr: ambiguous}},
		{ruleCloseNotConfirmed, "unavailable", closingCall(active), failOut(leaseapi.ErrBackendUnavailable, early), summary{State: L, Deadline: deadline, Reply: none, Exit: true, CloseErr: unavailable}},
		{ruleCloseNotConfirmed, "timed out", closingCall(active), failOut(leaseapi.ErrTimeout, early), summary{State: L, Deadline: deadline, Reply: none, Exit: true, CloseErr: timeout}},
		{ruleCloseNotConfirmed, "stale: nothing of ours is held", closingCall(active), failOut(leaseapi.ErrStaleOwner, early), summary{State: L, Deadline: deadline, Reply: none, Exit: true, CloseErr: none}},
		// Outcomes.
		{ruleRenewOK, "extends from the send time", calling(active, opRenew, reqRenew), renewOut(renewed, sent.Add(20*time.Millisecond)), summary{State: A, Deadline: newDeadline, Reply: ok, Arm: newDeadline, CloseErr: none}},
		{ruleRenewOK, "uses the shorter granted ttl", calling(active, opRenew, reqRenew), renewOut(renewedAt(3*time.Second, 4*time.Second), sent.Add(20*time.Millisecond)), summary{State: A, Deadline: sent.Add(3 * time.Second), Reply: ok, Arm: sent.Add(3 * time.Second), CloseErr: none}},
		{ruleRenewOK, "restores uncertain", calling(uncertain, opRenew, reqRenew), renewOut(renewed, sent.Add(20*time.Millisecond)), summary{State: A, Deadline: newDeadline, Reply: ok, Arm: newDeadline, CloseErr: none}},
		{ruleRenewOK, "managed: next renewal RenewEvery after the send", calling(mActive, opRenew, 0), renewOut(renewed, sent.Add(20*time.Millisecond)), summary{State: A, Deadline: newDeadline, Managed: true, Reply: none, Arm: sent.Add(3 * time.Second), CloseErr: none}},
		{ruleRenewLate, "", calling(active, opRenew, reqRenew), renewOut(renewedAt(3*time.Second, 4*time.Second), sent.Add(3*time.Second)), summary{State: E, Deadline: sent.Add(3 * time.Second), Reply: lost, Exit: true, CloseErr: none}},
		{ruleRenewSkew, "backend clock jumped ahead", calling(active, opRenew, reqRenew), renewOut(renewedAt(5*time.Second, 10*time.Second), sent.Add(20*time.Millisecond)), summary{State: U, Deadline: deadline, Reply: ambiguous, Arm: deadline, CloseErr: none}},
		{ruleRenewSkew, "backend clock stalled", calling(active, opRenew, reqRenew), renewOut(renewedAt(time.Second, 10*time.Second), sent.Add(20*time.Millisecond)), summary{State: U, Deadline: deadline, Reply: ambiguous, Arm: deadline, CloseErr: none}},
		{ruleRenewOK, "within the margin's drift", calling(active, opRenew, reqRenew), renewOut(renewedAt(3*time.Second+250*time.Millisecond, 10*time.Second), sent.Add(20*time.Millisecond)), summary{State: A, Deadline: newDeadline, Reply: ok, Arm: newDeadline, CloseErr: none}},
		{ruleRenewRegression, "token changed", calling(active, opRenew, reqRenew), renewOut(with(core{view: View{Record: renewed}}, func(c *core) { c.view.Record.Token = 6 }).view.Record, sent.Add(20*time.Millisecond)), summary{State: L, Deadline: deadline, Reply: regression, Exit: true, CloseErr: none}},
		{ruleRenewRegression, "owner changed, managed", calling(mActive, opRenew, 0), renewOut(with(core{view: View{Record: renewed}}, func(c *core) { c.view.Record.Owner = "x" }).view.Record, sent.Add(20*time.Millisecond)), summary{State: L, Deadline: deadline, Reply: none, Loss: L, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleValidateOK, "", calling(uncertain, opValidate, reqValidate), okOut(before), summary{State: A, Deadline: deadline, Reply: ok, Arm: deadline, CloseErr: none}},
		{ruleValidateLate, "", calling(uncertain, opValidate, reqValidate), okOut(deadline), summary{State: E, Deadline: deadline, Reply: lost, Exit: true, CloseErr: none}},
		{ruleCallStale, "renew", calling(active, opRenew, reqRenew), failOut(leaseapi.ErrStaleOwner, before), summary{State: L, Deadline: deadline, Reply: stale, Exit: true, CloseErr: none}},
		{ruleCallStale, "managed renewal: the loss is delivered", calling(mActive, opRenew, 0), failOut(leaseapi.ErrStaleOwner, before), summary{State: L, Deadline: deadline, Reply: none, Loss: L, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleCallStale, "validate", calling(uncertain, opValidate, reqValidate), failOut(leaseapi.ErrStaleOwner, before), summary{State: L, Deadline: deadline, Reply: stale, Exit: true, CloseErr: none}},
		{ruleCallStale, "release", calling(active, opRelease, reqRelease), failOut(leaseapi.ErrStaleOwner, before), summary{State: L, Deadline: deadline, Reply: stale, Exit: true, CloseErr: none}},
		{ruleCallFailed, "renew ambiguous, deadline kept", calling(active, opRenew, reqRenew), failOut(leaseapi.ErrAmbiguousOutcome, before), summary{State: U, Deadline: deadline, Reply: ambiguous, Arm: deadline, CloseErr: none}},
		{ruleCallFailed, "renew unavailable", calling(active, opRenew, reqRenew), failOut(leaseapi.ErrBackendUnavailable, before), summary{State: U, Deadline: deadline, Reply: unavailable, Arm: deadline, CloseErr: none}},
		{ruleCallFailed, "renew timed out", calling(active, opRenew, reqRenew), failOut(leaseapi.ErrTimeout, before), summary{State: U, Deadline: deadline, Reply: timeout, Arm: deadline, CloseErr: none}},
		{ruleCallFailed, "managed renewal retries after RenewRetry", calling(mActive, opRenew, 0), failOut(leaseapi.ErrAmbiguousOutcome, before), summary{State: U, Deadline: deadline, Managed: true, Reply: none, Arm: retryAt(before), CloseErr: none}},
		{ruleCallFailed, "validate", calling(active, opValidate, reqValidate), failOut(leaseapi.ErrBackendUnavailable, before), summary{State: U, Deadline: deadline, Reply: unavailable, Arm: deadline, CloseErr: none}},
		{ruleCallFailed, "release ambiguous", calling(active, opRelease, reqRelease), failOut(leaseapi.ErrAmbiguousOutcome, before), summary{State: U, Deadline: deadline, Reply: ambiguous, Arm: deadline, CloseErr: none}},
		{ruleCallFailedLate, "renew", calling(active, opRenew, reqRenew), failOut(leaseapi.ErrAmbiguousOutcome, deadline), summary{State: E, Deadline: deadline, Reply: ambiguous, Exit: true, CloseErr: none}},
		{ruleCallFailedLate, "release", calling(active, opRelease, reqRelease), failOut(leaseapi.ErrAmbiguousOutcome, after), summary{State: E, Deadline: deadline, Reply: ambiguous, Exit: true, CloseErr: none}},
		{ruleReleaseOK, "", calling(active, opRelease, reqRelease), okOut(before), summary{State: R, Deadline: deadline, Reply: ok, Exit: true, CloseErr: none}},
		{ruleReleaseOK, "from uncertain, past the deadline", calling(uncertain, opRelease, reqRelease), okOut(after), summary{State: R, Deadline: deadline, Reply: ok, Exit: true, CloseErr: none}},
		// Terminal, busy, stray.
		{ruleTerminal, "renew on released", stateOf(t, R), req(reqRenew, early), summary{State: R, Deadline: deadline, Reply: invalidState, Exit: true, CloseErr: none}},
		{ruleTerminal, "release on released is idempotent", stateOf(t, R), req(reqRelease, early), summary{State: R, Deadline: deadline, Reply: ok, Exit: true, CloseErr: none}},
		{ruleTerminal, "release on expired", stateOf(t, E), req(reqRelease, early), summary{State: E, Deadline: deadline, Reply: lost, Exit: true, CloseErr: none}},
		{ruleTerminal, "start managed on lost gives the slot back", stateOf(t, L), start(early, true), summary{State: L, Deadline: deadline, Reply: lost, LeaveGate: true, Exit: true, CloseErr: none}},
		{ruleTerminal, "close", stateOf(t, L), closeAt(early), summary{State: L, Deadline: deadline, Reply: none, Exit: true, CloseErr: none}},
		{ruleBusy, "request", calling(active, opRenew, reqRenew), req(reqValidate, before), summary{State: A, Deadline: deadline, Reply: invalidState, CloseErr: none}},
		{ruleBusy, "timer", calling(active, opRenew, reqRenew), tick(deadline), summary{State: A, Deadline: deadline, Reply: none, CloseErr: none}},
		{ruleStrayOutcome, "", active, okOut(before), summary{State: A, Deadline: deadline, Reply: none, Arm: deadline, CloseErr: none}},
	}
}

// TestStep is the transition table: every row names the rule it shows and
// the whole outcome of one step.
func TestStep(t *testing.T) {
	p := testPolicy(t)
	for _, r := range rows(t) {
		t.Run(r.name(), func(t *testing.T) {
			c := r.c
			e := step(&c, p, r.ev)
			if e.rule != r.rule {
				t.Errorf("rule: got %q, want %q", e.rule, r.rule)
			}
			want := r.want
			if want.Arm.IsZero() {
				want.Arm = e.arm // rows that exit or call check that no timer is armed below
			}
			if got := summarise(&c, &e); got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if (e.exit || e.call.op != 0) && !e.arm.IsZero() {
				t.Errorf("arm: got %v, want none when exiting or calling", e.arm)
			}
		})
	}
}

// TestEveryPair drives every state × event pair through step: each must
// fire a rule that has a row in the table (a missing pair is a failure,
// never a silent default), and the safety invariants hold for all of them.
func TestEveryPair(t *testing.T) {
	p := testPolicy(t)
	named := map[string]bool{}
	for _, r := range rows(t) {
		named[r.rule] = true
	}
	A, U := leaseapi.StateActive, leaseapi.StateUncertain
	states := map[string]core{}
	for _, s := range []leaseapi.State{A, U, leaseapi.StateExpired, leaseapi.StateLost, leaseapi.StateReleased} {
		states[s.String()] = stateOf(t, s)
		states[s.String()+", managed"] = managed(stateOf(t, s))
		states[s.String()+", stopped"] = with(stateOf(t, s), func(c *core) { c.everManaged = true })
	}
	for _, s := range []leaseapi.State{A, U} {
		for _, o := range []op{opRenew, opValidate, opRelease} {
			for _, m := range []bool{false, true} {
				c := stateOf(t, s)
				if m {
					c = managed(c)
				}
				states[fmt.Sprintf("%v, managed %v, calling %v for a caller", s, m, o)] = calling(c, o, reqRenew)
				if o == opRenew && m {
					states[fmt.Sprintf("%v, calling a managed renewal", s)] = calling(c, o, 0)
				}
			}
		}
		states[s.String()+", releasing on close"] = closingCall(stateOf(t, s))
		states[s.String()+", managed, releasing on close"] = closingCall(managed(stateOf(t, s)))
	}
	at := map[string]time.Time{"early": early, "renewal due": due, "at the deadline": deadline, "past the deadline": deadline.Add(time.Hour)}
	events := map[string]event{}
	for an, a := range at {
		for _, r := range []request{reqRenew, reqValidate, reqRelease, reqStopManaged} {
			events[r.String()+" "+an] = req(r, a)
		}
		events["start managed with a slot "+an] = start(a, true)
		events["start managed without a slot "+an] = start(a, false)
		events["timer "+an] = tick(a)
		events["close "+an] = closeAt(a)
		events["outcome ok "+an] = renewOut(renewedAt(3*time.Second, 10*time.Second), a)
		events["outcome stale "+an] = failOut(leaseapi.ErrStaleOwner, a)
		events["outcome ambiguous "+an] = failOut(leaseapi.ErrAmbiguousOutcome, a)
		events["outcome unavailable "+an] = failOut(leaseapi.ErrBackendUnavailable, a)
	}
	pairs := 0
	for sn, s := range states {
		for en, ev := range events {
			pairs++
			c := s
			e := step(&c, p, ev)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Errorf("%s × %s: "+format, append([]any{sn, en}, args...)...)
			}
			switch {
			case e.rule == "":
				fail("no rule fired")
			case !named[e.rule]:
				fail("rule %q has no row in the table", e.rule)
			}
			if e.exit && (!c.view.State.Terminal() || c.view.Managed || e.call.op != 0) {
				fail("exit with state %v, managed %v, call %v", c.view.State, c.view.Managed, e.call.op)
			}
			if c.view.State.Terminal() && c.calling == 0 && !e.exit {
				fail("terminal %v without exit", c.view.State)
			}
			if !e.exit && c.calling == 0 && e.arm.IsZero() {
				fail("idle without a timer")
			}
			if e.call.op != 0 && c.calling != e.call.op {
				fail("call %v started, core says calling %v", e.call.op, c.calling)
			}
			if c.view.State == A && c.calling == 0 && !ev.at.Before(c.view.Deadline) {
				fail("active at or past the deadline")
			}
			if c.view.Deadline.After(s.view.Deadline) && (ev.kind != evOutcome || ev.out.err != nil || c.view.Record.Token != s.view.Record.Token) {
				fail("deadline extended from %v to %v", s.view.Deadline, c.view.Deadline)
			}
			waiting := ev.kind == evRequest && e.call.op != 0
			if ev.kind == evRequest && !e.replies && !waiting && s.calling == 0 {
				fail("request neither answered nor acted on")
			}
			if ev.kind == evOutcome && s.calling != 0 && s.caller != 0 && !e.replies {
				fail("the caller of the call is never answered")
			}
			if ev.slot && !(c.view.Managed && !s.view.Managed) && !e.leaveGate {
				fail("slot taken but neither used nor given back")
			}
			if (e.loss || e.closeLoss) && !s.view.Managed {
				fail("loss channel settled on an unmanaged lease")
			}
			if e.loss && e.lossV.State == leaseapi.StateReleased {
				fail("a released lease delivered a Loss")
			}
			if s.view.Managed && !c.view.Managed && !e.loss && !e.closeLoss {
				fail("renewal ended without settling the loss channel")
			}
			if e.changed != (c.view.State != s.view.State) || e.changed && e.from != s.view.State {
				fail("state change reported %v from %v, state went %v → %v", e.changed, e.from, s.view.State, c.view.State)
			}
		}
	}
	if pairs < 1000 {
		t.Fatalf("only %d pairs enumerated", pairs)
	}
}
