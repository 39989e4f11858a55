//go:build leasemutant

package simtest

import (
	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
)

// admits under no-fence accepts every token.
func (r *Resource) admits(owner string, token leaseapi.Token) bool {
	return token > r.high || (token == r.high && (owner == r.highOwner || r.high == 0)) || mutant.On(mutant.NoFence)
}
