//go:build !leasemutant

package memory

import "github.com/leasekit/lease/leaseapi"

// renewable reports whether e may be renewed by the holder of rec: same
// owner and token (renew_mutant.go replaces it in leasemutant builds).
func (e *entry) renewable(rec leaseapi.Record) bool { return e.matches(rec) }
