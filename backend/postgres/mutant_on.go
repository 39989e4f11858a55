package postgres

import (
	"strings"

	"github.com/leasekit/lease/internal/mutant"
)

// mutated applies the pg-now mutant of internal/mutant: every statement
// reads now(), the start of its transaction, instead of clock_timestamp().
// In a normal build it returns st unchanged.
func (st statements) mutated() statements {
	if !mutant.On(mutant.PostgresNow) {
		return st
	}
	r := strings.NewReplacer("clock_timestamp()", "now()")
	for _, q := range []*string{&st.acquire, &st.renew, &st.validate, &st.release, &st.inspect, &st.renewBatch, &st.fence, &st.advance, &st.sweep} {
		*q = r.Replace(*q)
	}
	return st
}
