// Package lease provides fenced, time-bounded leases: explicit owners,
// backend-anchored expiry, renewal, validation, compare-and-release, and a
// fencing token that strictly increases with every acquisition of a key. It
// is the one import most programs need: the model, policies and errors, and
// the client that acquires leases on a backend.
//
// A lease does not stop expired work. A holder that pauses (GC, a stopped
// VM, a slow network) can wake after its lease expired and another process
// took over. Pass [Handle.Token] into every protected write and let the
// resource reject tokens lower than the highest it has accepted.
//
// # Five-minute start
//
// Make a backend (backend/memory in one process, backend/valkey or
// backend/postgres across processes), a [Client] on it, and a [Policy]:
//
//	client, err := lease.NewClient(store, lease.ClientOptions{})
//	if err != nil { return err }
//	defer client.Close(ctx)
//
//	policy, err := lease.NewPolicy(lease.PolicyOptions{
//		TTL: 30 * time.Second, RenewEvery: 10 * time.Second,
//		SafetyMargin: 5 * time.Second, Retry: 100 * time.Millisecond,
//		Wait: 2 * time.Second, MaxAttempts: 20,
//		OperationTimeout: 2 * time.Second,
//	})
//	if err != nil { return err }
//	key, err := lease.NewKey("jobs", "nightly-report")
//	if err != nil { return err }
//
//	handle, err := client.Acquire(ctx, key, policy)
//	if err != nil { return err }
//	managed, err := handle.StartManaged(ctx)
//	if err != nil { return err }
//	defer managed.Stop(context.WithoutCancel(ctx))
//	defer handle.Release(context.WithoutCancel(ctx))
//
//	if err := protectedWrite(ctx, handle.Token()); err != nil { return err }
//
// [Client.Run] does the same in one call, with a context canceled when the
// lease is lost. Never infer a successful release from cancellation or
// shutdown: inspect the errors Release, Run and Client.Close return. No
// acquisition order or freedom from starvation is promised.
//
// # Guarantees
//
//   - Backend time decides expiry; the local monotonic clock decides
//     admission. A handle is [StateActive] only before the send time of
//     the request that granted or last renewed it, plus the TTL, minus the
//     safety margin ([Handle.Deadline]). A slow reply shortens that window,
//     never stretches it, and no I/O is needed to stop being Active.
//   - Fail closed. An operation without a reliable outcome leaves the
//     handle [StateUncertain] (no admission) until a later Renew or
//     Validate succeeds before the deadline; a lost acquisition reply is
//     resolved by reading the key, never retried blind.
//   - Compare-and-act. Renew, Validate and Release compare owner and token
//     atomically on the backend; a mismatch is [ErrStaleOwner].
//   - Bounded. Every backend call is bounded by the policy's
//     OperationTimeout; a client bounds acquisitions in flight and managed
//     handles and fails fast with [ErrCapacity] past them.
//   - Redacted. Every error the library builds matches exactly one
//     sentinel (errors.Is) and carries no key, owner id, DSN or backend
//     text. A call that reports several failures at once (Client.Close,
//     one error per class of unconfirmed release; Client.Run, fn's error
//     with the release's; the integrations' Stop) joins such errors with
//     errors.Join, and Run returns fn's own error as it is.
//
// # Packages
//
// This package re-exports, as type aliases and thin forwarders, the model
// of package leaseapi and the client of package runtime. leaseapi stays
// the contract for backend authors (as database/sql/driver is for
// database/sql: the Backend interface, its optional capabilities and the
// argument checks); runtime, supervisor and mailbox are the implementation.
// The backends are backend/memory, backend/valkey and backend/postgres;
// scheduler, queue and service integrate leases with scheduled jobs, queue
// workers and leader election; simtest is the deterministic test harness
// and the conformance suite every backend runs.
//
// Where this package differs from the reference API it implements, and
// why, is listed in docs/reference-api.md.
package lease
