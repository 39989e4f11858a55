package valkey

// Script sources for the raw baseline benchmarks, which run the same
// scripts through valkey-go directly.
var (
	SrcAcquire = srcAcquire
	SrcRelease = srcRelease
	SrcRenew   = srcRenew
)
