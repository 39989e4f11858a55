//go:build !leasemutant

package postgres

// mutated returns st unchanged: the normal build has no mutants (see
// mutant_on.go for the leasemutant build).
func (st statements) mutated() statements { return st }
