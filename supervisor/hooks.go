package supervisor

import (
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// CallKind says which backend call a [Call] reports.
type CallKind uint8

// Backend calls a supervisor makes.
const (
	CallRenew CallKind = iota + 1
	CallValidate
	CallRelease // a Release request, or the release on close
)

// Call reports one backend call of a supervisor to Config.OnCall: sent at
// SentAt, answered by Done (local clock readings the loop takes anyway),
// with its classified error.
type Call struct {
	Kind         CallKind
	SentAt, Done time.Time
	Err          error
}

// reportCall tells Config.OnCall about the call just performed, before
// its outcome is stepped (so before any reply that depends on it).
func (s *Supervisor) reportCall(o op, out *outcome, done time.Time) {
	if s.cfg.OnCall == nil {
		return
	}
	k := CallRelease
	switch o {
	case opRenew:
		k = CallRenew
	case opValidate:
		k = CallValidate
	}
	s.cfg.OnCall(Call{Kind: k, SentAt: out.sentAt, Done: done, Err: out.err})
}

// stateChange builds the StateChange from state from (with error
// fromErr) to the view v for the hook.
func stateChange(from leaseapi.State, fromErr error, v *View, at time.Time) StateChange {
	return StateChange{At: at, From: from, To: v.State, Cause: v.Err, Prev: fromErr, Token: v.Record.Token, Key: v.Record.Key}
}
