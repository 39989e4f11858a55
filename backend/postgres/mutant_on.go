//go:build leasemutant

package postgres

import (
	"strings"

	"github.com/leasekit/lease/internal/mutant"
)

// mutated applies the postgres mutants of internal/mutant when
// LEASE_MUTANT selects one: pg-now (every statement reads now(), the start
// of its transaction, instead of clock_timestamp()) or pg-async-grant
// (the row every acquisition offers for insertion sets synchronous_commit
// off, so grants too commit without waiting for the flush). This file is
// built only with the leasemutant tag; mutant_off.go is the normal
// build's.
func (st statements) mutated() statements {
	if mutant.On(mutant.PostgresAsyncGrant) {
		r := strings.NewReplacer("SELECT $1::text, $2::text, 1,", "SELECT $1::text, $2::text, 1 + 0 * length(set_config('synchronous_commit', 'off', true)),")
		st.acquire, st.acquireMark = r.Replace(st.acquire), r.Replace(st.acquireMark)
		return st
	}
	if !mutant.On(mutant.PostgresNow) {
		return st
	}
	r := strings.NewReplacer("clock_timestamp()", "now()")
	for _, q := range []*string{&st.acquire, &st.acquireMark, &st.renew, &st.validate, &st.release, &st.released, &st.inspect, &st.renewBatch, &st.fence, &st.advance, &st.sweep} {
		*q = r.Replace(*q)
	}
	return st
}
