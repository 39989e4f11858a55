package leaseapi

import (
	"context"
	"time"
)

// Backend stores leases. It is the contract every backend implements and
// the runtime consumes; implementations must be safe for concurrent use.
//
// Each method is one atomic operation on the backend, timed by the
// backend's clock, and honours ctx (a call whose ctx ends returns an error
// matching [ErrCanceled] or [ErrTimeout] if nothing was sent, or
// [ErrAmbiguousOutcome] if a mutation may have been applied). Every error
// matches exactly one sentinel; backends classify driver errors once:
// failed before sending is [ErrBackendUnavailable], a mutation whose reply
// was lost is [ErrAmbiguousOutcome]. Backends never retry a mutation on
// their own.
//
// Not after the deadline: a TryAcquire, Renew or RenewBatch
// ([BatchRenewer]) that the backend executes after its caller's ctx
// deadline changes nothing. A request can wait inside the backend (for a
// row lock, a paused server, a mutex) until after its caller gave up with
// [ErrAmbiguousOutcome]; were it to apply then, it would grant or extend a
// lease nobody holds. So a backend bounds every such mutation by the time
// its ctx had left when it was sent, measured on the backend's own clock
// from the moment it received the request (so no clock synchronisation is
// involved), and checks the bound where the mutation takes effect, with
// everything it waited for already held. A request past its bound writes
// nothing: no token, no expiry, no mark; a caller that still waits gets a
// definite error ([LateError]: [ErrBackendUnavailable] "not applied", or
// the context's error), never a grant. A call without a ctx deadline carries no bound.
// The bound covers waiting inside the backend only, not the network before
// it. simtest.Conformance checks the rule when its harness can hold a
// request back (simtest.LateRig).
type Backend interface {
	// TryAcquire grants key to owner for ttl if no live grant exists (the
	// previous one expired by the backend's clock or was released), with a
	// token one higher than the key's last token. It returns the new record,
	// or [ErrContended] if a live grant exists (even one of the same owner:
	// an acquisition is never idempotent), or [ErrInvalidState] for a zero
	// key, an invalid owner id or a TTL outside [CheckTTL].
	TryAcquire(ctx context.Context, key Key, owner string, ttl time.Duration) (Record, error)

	// Renew extends rec's grant to backend-now + ttl if rec (key, owner and
	// token) is the key's live grant, and returns the renewed record (same
	// token, AcquiredAt = the renewal's backend time). An expired, released
	// or replaced grant is [ErrStaleOwner].
	Renew(ctx context.Context, rec Record, ttl time.Duration) (Record, error)

	// Validate returns the backend's current record of rec's grant if rec
	// (key, owner and token) is the key's live grant, and [ErrStaleOwner]
	// otherwise. It changes nothing: the returned record has rec's key,
	// owner and token, and the AcquiredAt and ExpiresAt the backend holds
	// (those of the latest renewal it applied). The runtime never extends a
	// handle's local deadline from a validation.
	Validate(ctx context.Context, rec Record) (Record, error)

	// Release ends rec's grant if rec is the key's latest grant, and returns
	// nil. It is idempotent: releasing a grant that is already released or
	// expired, with no later grant, also returns nil. If a later grant exists
	// (a higher token), or another owner holds the key, it changes nothing
	// and returns [ErrStaleOwner]. Release never deletes the key's token
	// history.
	Release(ctx context.Context, rec Record) error
}

// Inspector is an optional [Backend] capability (claimed with
// [Capabilities.Inspect], see [CapabilitiesOf]): read a key's state without
// changing it. The runtime uses it to resolve an acquisition whose reply
// was lost (adopting the grant if it carries the acquirer's owner id and
// the backend also claims [Capabilities.Adopt]);
// operators use it for tooling. Inspect returns the key's latest token in
// rec.Token even when the key is not held; held reports whether a live grant
// exists, in which case rec is that grant.
type Inspector interface {
	Inspect(ctx context.Context, key Key) (rec Record, held bool, err error)
}

// ReleaseWatcher is an optional [Backend] capability (claimed with
// [Capabilities.WatchRelease]) for fast hand-off:
// waiters in Acquire wake as soon as a holder releases instead of sleeping
// a retry interval. Notifications are best effort (a missed one costs one
// retry interval, never safety); expiry is not notified.
type ReleaseWatcher interface {
	// WatchRelease returns a channel that receives a value (buffer 1,
	// coalescing) after key is released, and a stop function that must be
	// called exactly once to free the watch. It does no I/O on the caller's
	// goroutine beyond registering the watch; a backend that needs a
	// connection for notifications opens it lazily and owns it until Close.
	WatchRelease(key Key) (released <-chan struct{}, stop func())
}

// RenewRequest is one element of a batched renewal.
type RenewRequest struct {
	Record Record
	TTL    time.Duration
}

// RenewResult is the outcome of one element of a batched renewal.
type RenewResult struct {
	Record Record
	Err    error
}

// BatchRenewer is an optional [Backend] capability (claimed with
// [Capabilities.RenewBatch]): renew many grants in one round trip. Each
// element has exactly the semantics of [Backend.Renew]; results are in
// request order. A failure of the whole batch gives every
// element the same classified error ([ErrAmbiguousOutcome] once anything
// was sent).
type BatchRenewer interface {
	RenewBatch(ctx context.Context, reqs []RenewRequest) []RenewResult
}

// Clock is the one clock method a backend that keeps its own time needs
// (the memory backend). github.com/benbjohnson/clock's Clock satisfies it.
type Clock interface {
	Now() time.Time
}

// OwnerSource makes owner ids. The default draws 128 bits from crypto/rand.
// Implementations must be safe for concurrent use and must never return the
// same id twice.
type OwnerSource interface {
	NewOwner() (string, error)
}

// Sleeper pauses an acquisition between attempts. Sleep returns nil after d,
// or early with ctx's error, or with a nil error as soon as wake receives
// (a release notification; wake may be nil).
type Sleeper interface {
	Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error
}

// RetrySource draws retry jitter. Jitter returns a duration in [0, max)
// (zero when max <= 0). Implementations must be safe for concurrent use.
type RetrySource interface {
	Jitter(max time.Duration) time.Duration
}
