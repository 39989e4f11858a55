//go:build leasemutant

package postgres

import (
	"strings"

	"github.com/leasekit/lease/internal/mutant"
)

// mutated applies the pg-now mutant of internal/mutant when LEASE_MUTANT
// selects it: every statement reads now(), the start of its transaction,
// instead of clock_timestamp(). This file is built only with the
// leasemutant tag; mutant_off.go is the normal build's.
func (st statements) mutated() statements {
	if !mutant.On(mutant.PostgresNow) {
		return st
	}
	r := strings.NewReplacer("clock_timestamp()", "now()")
	for _, q := range []*string{&st.acquire, &st.acquireMark, &st.renew, &st.validate, &st.release, &st.released, &st.inspect, &st.renewBatch, &st.fence, &st.advance, &st.sweep} {
		*q = r.Replace(*q)
	}
	return st
}
