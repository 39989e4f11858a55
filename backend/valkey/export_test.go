package valkey

// Script sources for the raw baseline benchmarks, which run the same
// scripts through valkey-go directly.
var (
	SrcAcquire = srcAcquire
	SrcRelease = srcRelease
	SrcRenew   = srcRenew
)

// Classify exposes classify to the table test of real driver errors.
var Classify = classify
