//go:build !leasemutant

package supervisor

import (
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// This file holds the two rules the safety suite's mutants replace (see
// anchor_mutant.go, built only with the leasemutant tag): the instant a
// reply is anchored at, and the state a reader is told.

// anchor returns the instant a backend call's outcome is trusted from: the
// local clock reading taken before the request was sent, never the reply's
// arrival (a slow reply then shortens the trust window, never stretches it).
func anchor(sentAt, _ time.Time) time.Time { return sentAt }

// stateAt is v's state at the local instant now: Active and Uncertain read
// as Expired from the deadline on, before the actor has processed its timer.
func stateAt(v *View, now time.Time) leaseapi.State {
	if !v.State.Terminal() && !now.Before(v.Deadline) {
		return leaseapi.StateExpired
	}
	return v.State
}
