//go:build leasemutant

package memory

import (
	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
)

// renewable under renew-without-owner-check renews any live grant of the
// key, whatever the owner and token.
func (e *entry) renewable(rec leaseapi.Record) bool {
	return e.matches(rec) || mutant.On(mutant.RenewWithoutOwnerCheck)
}
