// Package leaseapi is the model and the backend contract of lease: keys,
// fencing tokens, records, policies, states, the sentinel errors, the
// [Backend] interface and its optional capabilities, and observer events.
//
// It is the seam between the runtime and the backends, in the way
// database/sql/driver is for database/sql: the runtime consumes [Backend],
// backends implement it, and neither imports the other. It imports the
// standard library only.
//
// Programs import the root package, github.com/leasekit/lease, which
// re-exports this package's model, policies and errors under the same
// names; this package is for backend authors and the runtime.
//
// # Guarantees a Backend gives
//
// Every backend promises, and the conformance suite in package simtest
// checks:
//
//   - One atomic operation per call. TryAcquire, Renew, Validate and Release
//     each read and change the key's state in one step of the backend (one Lua
//     script, one SQL statement, one critical section).
//   - Backend time. Expiry is decided by the backend's clock; AcquiredAt and
//     ExpiresAt of a returned [Record] are backend times read once, so
//     ExpiresAt - AcquiredAt is the granted TTL.
//   - Fencing tokens strictly increase per key with every successful
//     acquisition, across release, expiry and restarts of the client. A token
//     is never reused and never reset; Renew keeps the token.
//   - Compare-and-act. Renew, Validate and Release compare the key, owner AND
//     token of the record; any mismatch is [ErrStaleOwner].
//
// # Errors
//
// Every error returned by this module matches exactly one of the sentinels
// below with errors.Is. Context errors map to [ErrCanceled] and [ErrTimeout]
// and still match the context error. Error strings carry only an operation
// name and the kind: never a key, an owner id, a DSN, a password or raw
// backend text. Use [Wrap] to build such errors.
//
// # Time
//
// Two clocks are involved and never mixed. The backend's clock decides
// expiry and stamps records. The client's local monotonic clock decides
// admission: a holder may act only before the instant at which the request
// that granted or renewed its lease was sent, plus the TTL, minus the
// safety margin ([Record.LocalDeadline]). The margin absorbs the rate
// difference between the two clocks over one TTL.
package leaseapi
