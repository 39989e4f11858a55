// Package runtime is the API most programs use: a [Client] acquires fenced,
// time-bounded leases on a backend and owns one supervisor goroutine per
// held lease; a [Handle] is a message handle to that supervisor; [Managed]
// is its automatic renewal; [Client.Run] is the one-call form.
// Programs import it through the root package, github.com/leasekit/lease,
// which re-exports it under the reference API's names (lease.NewClient,
// lease.Handle, ...) and avoids the clash with the standard library's
// runtime.
//
//	c, _ := runtime.NewClient(store, runtime.ClientOptions{})
//	defer c.Close(ctx)
//	err := c.Run(ctx, key, policy, func(ctx context.Context, h *runtime.Handle) error {
//		return resource.Write(ctx, h.Token(), data) // fenced by the token
//	})
//
// # Guarantees
//
//   - A handle admits work (State() == StateActive) only before its
//     deadline: the local instant the granting or renewing request was
//     sent, plus the TTL, minus the safety margin. The backend's clock
//     decides expiry; the local monotonic clock decides admission; the
//     margin covers their drift.
//
//   - Every operation that lacks a reliable outcome leaves the handle
//     Uncertain (no admission) until a renew or validate succeeds in time.
//     A lost acquisition reply is resolved by reading the key, only if the
//     backend claims that such a read proves a durable grant
//     (leaseapi.Capabilities.Adopt), and adopting the grant only if it
//     carries this acquisition's owner id, anchored at the original send
//     time; otherwise the call fails with ErrAmbiguousOutcome and the grant,
//     if any, expires at its TTL. It is never retried blind.
//
//   - Optional capabilities are read once, in NewClient, through
//     leaseapi.CapabilitiesOf and nothing else: an unclaimed capability is
//     not used, so a wrapper that forwards only the four Backend methods is
//     never less safe than the store it wraps (no adoption, no batching,
//     every call bounded by OperationTimeout).
//
//   - Tokens come from the backend and strictly increase per key. A lease
//     cannot stop a paused process: pass Handle.Token to the resource and
//     let it reject lower tokens (see simtest.Resource, postgres.Store's
//     fencing helpers, valkey.Store.Guard).
//
//   - Bounds: MaxWaiters acquisitions in flight and MaxManaged managed
//     handles per client; one more fails fast with ErrCapacity and changes
//     nothing. Every backend call is bounded by the policy's
//     OperationTimeout. On the wall clock the bounds share their timers
//     (internal/callctx): a supervisor's call may end up to 1/64 of the
//     timeout early; an acquisition's call, when the caller's context
//     can never be canceled, never ends early and may end up to 1/64 of
//     it late, while the deadline its backend reads (and derives the
//     not-after bound it sends from) is exact.
//
//   - Close releases every held lease, stops every supervisor and waits;
//     afterwards no handle reports Active and no goroutine started by the
//     client is alive.
//
//   - Detectors. A client remembers the highest token it was granted per
//     key (bounded; per process) and refuses a grant that is not above it
//     with ErrFencingRegression: the backend lost acknowledged writes. A
//     renewal that changes the grant's token or owner is the same error and
//     ends the handle (Lost). Each renewal's backend timestamp is checked
//     against the local clock: the backend's advance since the previous
//     grant must lie within the local send/receive bracket, give or take
//     the drift the safety margin allows (margin/TTL); otherwise the
//     renewal is distrusted (ErrAmbiguousOutcome, Uncertain, deadline not
//     extended). The first TTL after acquisition relies on the margin
//     alone: detection needs two backend readings.
//
// # Goroutines
//
// One supervisor goroutine per held lease, started by a successful
// acquisition; it exits when the lease becomes Released, Lost or Expired
// (so a forgotten unmanaged handle ends at its deadline) or when the
// client closes. On the real clock, while other leases of the client are
// held, an exited supervisor's goroutine waits (at most 256 of them) for
// the next acquisition's supervisor instead of exiting, and exits once
// the client holds no lease or closes (Close waits for it). Run starts one watcher goroutine that exits before Run
// returns. With ClientOptions.OnStateChange set, one delivery goroutine
// runs while state changes wait for the hook; it exits when none is left
// (Close waits for it). On a backend that claims RenewBatch (unless
// ClientOptions.NoBatching), four batching goroutines, started by the
// first renewal, send the coalesced renewals (up to four batches in
// flight); they exit when the client closes (Close waits for them). An [ObservedBackend] starts one goroutine
// per event it hands to an idle observer, which exits when Observe
// returns. Nothing else runs in the background.
//
// # Failure handling
//
// Errors match exactly one leaseapi sentinel and never contain keys, owner
// ids or backend text; Client.Close and Client.Run, which can report
// several failures, join such errors with errors.Join (Run also returns
// fn's own error as it is). Acquire retries contention and unavailability
// within the policy's Wait and MaxAttempts, waking early on a release
// notification when the backend offers one. Managed renewal retries a
// failed renewal every Retry (or RenewEvery/4) until the deadline, then
// reports a Loss. A Release ends managed renewal whatever its outcome: a
// lease whose release failed is not renewed again, and expires at its
// deadline unless a later Release succeeds. Observers
// ([NewObservedBackend]) see every backend call as an event carrying a
// keyed hash of the key.
//
// # Telemetry
//
// A Client counts what it does exactly, in atomics, where the work
// happens (never from the best-effort events): [Client.Metrics] returns
// the snapshot. Every handle transition is a [StateChange], delivered best
// effort to ClientOptions.OnStateChange (never blocking a lease; dropped
// events are counted); ClientOptions.Tracer wraps each public operation
// with the caller's context ([Tracer]). None of them carries a key, an
// owner id or backend text: keys appear as a [KeyHasher]'s keyed hash.
// The leaseslog package logs them; the OpenTelemetry adapter is the
// module github.com/leasekit/lease/otel.
//
// # What this package does not do
//
// It does not guarantee acquisition order or freedom from starvation, it
// does not persist anything (the backend does), and it never logs.
//
// This package's name shadows the standard library's runtime; import it
// under another name where both are needed.
package runtime
