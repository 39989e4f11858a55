// Package mutant names the deliberately broken variants of lease that the
// safety suite must catch ("a checker that cannot fail proves nothing").
//
// No production code path tests a mutant. Each mutant lives in a file
// built only with the tag leasemutant (named *_mutant.go or mutant_on.go)
// that replaces one whole function of the normal build's file (built with
// !leasemutant); [On], which exists only in that build, is true for the
// one mutant named by the environment variable LEASE_MUTANT, so a test can
// run the same scenarios against a broken library and expect them to fail:
//
//	LEASE_MUTANT=deadline-from-reply go test -tags leasemutant ./safety
package mutant

// The mutants. Each is a single, realistic bug.
const (
	// DeadlineFromReply anchors the local deadline at the reply instead of
	// the send (a slow reply then stretches the trust window).
	DeadlineFromReply = "deadline-from-reply"
	// AdoptAtResolveTime adopts a lost acquisition anchored at the
	// resolving read, as a blind retry of the acquisition would.
	AdoptAtResolveTime = "adopt-at-resolve-time"
	// UncertainAdmits lets an Uncertain handle report Active.
	UncertainAdmits = "uncertain-admits"
	// RenewWithoutOwnerCheck makes the memory backend renew any live grant
	// of the key whatever the owner and token.
	RenewWithoutOwnerCheck = "renew-without-owner-check"
	// NoFence makes simtest.Resource accept every token.
	NoFence = "no-fence"
	// NoWatermark disables the client's token high-water check, so a
	// grant at or below a token it already saw is handed out instead of
	// refused with ErrFencingRegression.
	NoWatermark = "no-watermark"
	// PostgresNow makes the PostgreSQL store's statements read now(), the
	// start of their transaction, instead of clock_timestamp(). The
	// simulation tier cannot see it: the postgres package's own
	// real-server tests must.
	PostgresNow = "pg-now"
	// PostgresAsyncGrant makes every acquisition of the PostgreSQL store
	// commit with synchronous_commit off, grants included, as moving the
	// setting out of its not-granted branch would: a grant is then
	// acknowledged before its WAL is flushed, and a crash can hand its
	// token out again.
	PostgresAsyncGrant = "pg-async-grant"
)

// All lists the mutants the simulation tier must catch, for test drivers.
var All = []string{DeadlineFromReply, AdoptAtResolveTime, UncertainAdmits, RenewWithoutOwnerCheck, NoFence, NoWatermark}

// Postgres lists the mutants the postgres package's tests must catch.
var Postgres = []string{PostgresNow, PostgresAsyncGrant}
