//go:build !leasemutant

package simtest

import "github.com/leasekit/lease/leaseapi"

// admits is the resource's fence: a token above the highest accepted one,
// or equal to it from the same owner (fence_mutant.go replaces it in
// leasemutant builds). Called with r.mu held.
func (r *Resource) admits(owner string, token leaseapi.Token) bool {
	return token > r.high || (token == r.high && (owner == r.highOwner || r.high == 0))
}
