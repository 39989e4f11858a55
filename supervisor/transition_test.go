package supervisor

import (
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

func TestTransition(t *testing.T) {
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)
	k := leaseapi.MustKey("t", "k")
	rec := leaseapi.Record{Key: k, Owner: "o", Token: 7, AcquiredAt: t0, ExpiresAt: t0.Add(10 * time.Second)}
	active := View{Record: rec, State: leaseapi.StateActive, SentAt: t0, Deadline: t0.Add(9 * time.Second)}
	uncertain := active
	uncertain.State = leaseapi.StateUncertain
	sent := t0.Add(3 * time.Second)
	renewed := leaseapi.Record{Key: k, Owner: "o", Token: 7, AcquiredAt: sent.Add(time.Second), ExpiresAt: sent.Add(11 * time.Second)}
	short := renewed
	short.ExpiresAt = renewed.AcquiredAt.Add(4 * time.Second) // backend granted only 4s
	ok := func(r leaseapi.Record) outcome { return outcome{called: true, sentAt: sent, rec: r} }
	fail := func(kind error) outcome {
		return outcome{called: true, sentAt: sent, err: leaseapi.NewError("op", kind, "")}
	}
	before, after := t0.Add(4*time.Second), t0.Add(9*time.Second)

	for _, tt := range []struct {
		name         string
		view         View
		ev           event
		out          outcome
		now          time.Time
		wantState    leaseapi.State
		wantDeadline time.Time
		wantErr      error
	}{
		{"renew ok extends from send time", active, evRenew, ok(renewed), before, leaseapi.StateActive, sent.Add(9 * time.Second), nil},
		{"renew ok uses the shorter granted ttl", active, evRenew, ok(short), before, leaseapi.StateActive, sent.Add(3 * time.Second), nil},
		{"renew ok restores uncertain", uncertain, evRenew, ok(renewed), before, leaseapi.StateActive, sent.Add(9 * time.Second), nil},
		{"renew ok arriving after its own deadline expires", active, evRenew, ok(short), sent.Add(3 * time.Second), leaseapi.StateExpired, sent.Add(3 * time.Second), leaseapi.ErrLost},
		{"renew ambiguous is uncertain, deadline kept", active, evRenew, fail(leaseapi.ErrAmbiguousOutcome), before, leaseapi.StateUncertain, active.Deadline, leaseapi.ErrAmbiguousOutcome},
		{"renew unavailable is uncertain", active, evRenew, fail(leaseapi.ErrBackendUnavailable), before, leaseapi.StateUncertain, active.Deadline, leaseapi.ErrBackendUnavailable},
		{"renew timeout is uncertain", active, evRenew, fail(leaseapi.ErrTimeout), before, leaseapi.StateUncertain, active.Deadline, leaseapi.ErrTimeout},
		{"renew stale is lost", active, evRenew, fail(leaseapi.ErrStaleOwner), before, leaseapi.StateLost, active.Deadline, leaseapi.ErrStaleOwner},
		{"renew failure at the deadline expires", active, evRenew, fail(leaseapi.ErrAmbiguousOutcome), after, leaseapi.StateExpired, active.Deadline, leaseapi.ErrAmbiguousOutcome},
		{"renew not called past the deadline expires", active, evRenew, outcome{}, after, leaseapi.StateExpired, active.Deadline, leaseapi.ErrLost},
		{"validate ok restores uncertain without extending", uncertain, evValidate, outcome{called: true, sentAt: sent}, before, leaseapi.StateActive, active.Deadline, nil},
		{"validate ok after the deadline expires", uncertain, evValidate, outcome{called: true, sentAt: sent}, after, leaseapi.StateExpired, active.Deadline, leaseapi.ErrLost},
		{"validate stale is lost", uncertain, evValidate, fail(leaseapi.ErrStaleOwner), before, leaseapi.StateLost, active.Deadline, leaseapi.ErrStaleOwner},
		{"validate ambiguous stays uncertain", active, evValidate, fail(leaseapi.ErrBackendUnavailable), before, leaseapi.StateUncertain, active.Deadline, leaseapi.ErrBackendUnavailable},
		{"release ok", active, evRelease, outcome{called: true, sentAt: sent}, before, leaseapi.StateReleased, active.Deadline, nil},
		{"release ok from uncertain", uncertain, evRelease, outcome{called: true, sentAt: sent}, before, leaseapi.StateReleased, active.Deadline, nil},
		{"release ok past the deadline", active, evRelease, outcome{called: true, sentAt: sent}, after, leaseapi.StateReleased, active.Deadline, nil},
		{"release ambiguous is uncertain", active, evRelease, fail(leaseapi.ErrAmbiguousOutcome), before, leaseapi.StateUncertain, active.Deadline, leaseapi.ErrAmbiguousOutcome},
		{"release ambiguous past the deadline expires", active, evRelease, fail(leaseapi.ErrAmbiguousOutcome), after, leaseapi.StateExpired, active.Deadline, leaseapi.ErrAmbiguousOutcome},
		{"release stale is lost", active, evRelease, fail(leaseapi.ErrStaleOwner), before, leaseapi.StateLost, active.Deadline, leaseapi.ErrStaleOwner},
		{"deadline tick before the deadline is ignored", active, evDeadline, outcome{}, before, leaseapi.StateActive, active.Deadline, nil},
		{"deadline tick expires active", active, evDeadline, outcome{}, after, leaseapi.StateExpired, active.Deadline, nil},
		{"deadline tick expires uncertain", uncertain, evDeadline, outcome{}, after, leaseapi.StateExpired, active.Deadline, nil},
		{"close with release ok", active, evClose, outcome{called: true, sentAt: sent}, before, leaseapi.StateReleased, active.Deadline, nil},
		{"close with release failed is lost", active, evClose, fail(leaseapi.ErrTimeout), before, leaseapi.StateLost, active.Deadline, nil},
		{"terminal: renew on released", withState(active, leaseapi.StateReleased), evRenew, outcome{}, before, leaseapi.StateReleased, active.Deadline, leaseapi.ErrInvalidState},
		{"terminal: release on released is idempotent", withState(active, leaseapi.StateReleased), evRelease, outcome{}, before, leaseapi.StateReleased, active.Deadline, nil},
		{"terminal: renew on lost", withState(active, leaseapi.StateLost), evRenew, outcome{}, before, leaseapi.StateLost, active.Deadline, leaseapi.ErrLost},
		{"terminal: release on expired", withState(active, leaseapi.StateExpired), evRelease, outcome{}, before, leaseapi.StateExpired, active.Deadline, leaseapi.ErrLost},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.view
			err := transition(&got, tt.ev, &tt.out, tt.now, &p)
			if got.State != tt.wantState {
				t.Errorf("state: got %v, want %v", got.State, tt.wantState)
			}
			if !got.Deadline.Equal(tt.wantDeadline) {
				t.Errorf("deadline: got %v, want %v", got.Deadline, tt.wantDeadline)
			}
			if leaseapi.Kind(err) != tt.wantErr {
				t.Errorf("reply: got %v, want kind %v", err, tt.wantErr)
			}
			if !tt.view.State.Terminal() && got.State.Terminal() && got.State != leaseapi.StateReleased && got.Err == nil {
				t.Errorf("terminal view without a reason")
			}
			if got.Deadline.After(tt.view.Deadline) && got.Record.Token != tt.view.Record.Token {
				t.Errorf("deadline extended for another token")
			}
		})
	}
}

func TestTransitionDetects(t *testing.T) {
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second})
	t0 := time.Unix(1_000_000, 0)
	server0 := time.Unix(5_000_000, 0) // the backend clock is offset: only its advance matters
	k := leaseapi.MustKey("t", "k")
	rec := leaseapi.Record{Key: k, Owner: "o", Token: 7, AcquiredAt: server0, ExpiresAt: server0.Add(10 * time.Second)}
	v := View{Record: rec, State: leaseapi.StateActive, SentAt: t0, RecvAt: t0.Add(10 * time.Millisecond), Deadline: t0.Add(9 * time.Second)}
	sent := t0.Add(3 * time.Second)
	now := sent.Add(20 * time.Millisecond)
	renewAt := func(serverAdvance time.Duration) leaseapi.Record {
		r := rec
		r.AcquiredAt = server0.Add(serverAdvance)
		r.ExpiresAt = r.AcquiredAt.Add(10 * time.Second)
		return r
	}
	for _, tt := range []struct {
		name      string
		rec       leaseapi.Record
		wantState leaseapi.State
		wantErr   error
		extended  bool
	}{
		{"in step", renewAt(3 * time.Second), leaseapi.StateActive, nil, true},
		{"within the latency bracket", renewAt(3*time.Second + 15*time.Millisecond), leaseapi.StateActive, nil, true},
		{"within the margin's drift", renewAt(3*time.Second + 250*time.Millisecond), leaseapi.StateActive, nil, true},
		{"backend clock jumped ahead", renewAt(5 * time.Second), leaseapi.StateUncertain, leaseapi.ErrAmbiguousOutcome, false},
		{"backend clock stalled", renewAt(time.Second), leaseapi.StateUncertain, leaseapi.ErrAmbiguousOutcome, false},
		{"token changed on renewal", func() leaseapi.Record { r := renewAt(3 * time.Second); r.Token = 6; return r }(), leaseapi.StateLost, leaseapi.ErrFencingRegression, false},
		{"owner changed on renewal", func() leaseapi.Record { r := renewAt(3 * time.Second); r.Owner = "x"; return r }(), leaseapi.StateLost, leaseapi.ErrFencingRegression, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := v
			err := transition(&got, evRenew, &outcome{called: true, sentAt: sent, rec: tt.rec}, now, &p)
			if got.State != tt.wantState || leaseapi.Kind(err) != tt.wantErr {
				t.Fatalf("got (%v, %v), want (%v, %v)", got.State, err, tt.wantState, tt.wantErr)
			}
			if extended := got.Deadline.After(v.Deadline); extended != tt.extended {
				t.Fatalf("deadline extended: got %v, want %v", extended, tt.extended)
			}
		})
	}
}

func withState(v View, s leaseapi.State) View {
	v.State = s
	return v
}

func TestPlan(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	v := View{State: leaseapi.StateActive, Deadline: t0}
	for _, tt := range []struct {
		name     string
		view     View
		ev       event
		now      time.Time
		wantCall bool
		wantErr  error
	}{
		{"renew before the deadline calls", v, evRenew, t0.Add(-1), true, nil},
		{"renew at the deadline does not call", v, evRenew, t0, false, leaseapi.ErrLost},
		{"validate at the deadline does not call", v, evValidate, t0, false, leaseapi.ErrLost},
		{"release past the deadline still calls", v, evRelease, t0.Add(time.Second), true, nil},
		{"deadline never calls", v, evDeadline, t0, false, nil},
		{"terminal never calls", withState(v, leaseapi.StateLost), evRelease, t0.Add(-1), false, leaseapi.ErrLost},
	} {
		t.Run(tt.name, func(t *testing.T) {
			call, err := plan(&tt.view, tt.ev, tt.now)
			if call != tt.wantCall || leaseapi.Kind(err) != tt.wantErr {
				t.Fatalf("got (%v, %v), want (%v, %v)", call, err, tt.wantCall, tt.wantErr)
			}
		})
	}
}
