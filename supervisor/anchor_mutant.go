//go:build leasemutant

package supervisor

import (
	"time"

	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
)

// The mutant builds of anchor.go's rules: each behaves as the original
// unless its mutant is the one LEASE_MUTANT selects.

// anchor under deadline-from-reply anchors at the reply.
func anchor(sentAt, recvAt time.Time) time.Time {
	if mutant.On(mutant.DeadlineFromReply) {
		return recvAt
	}
	return sentAt
}

// stateAt under uncertain-admits lets an Uncertain lease read as Active.
func stateAt(v *View, now time.Time) leaseapi.State {
	if !v.State.Terminal() && !now.Before(v.Deadline) {
		return leaseapi.StateExpired
	}
	if mutant.On(mutant.UncertainAdmits) && v.State == leaseapi.StateUncertain {
		return leaseapi.StateActive
	}
	return v.State
}
