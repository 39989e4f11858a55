// Package supervisor is the per-lease actor of lease: one goroutine owns
// one held lease, performs its backend calls one at a time, runs its
// deadline and renewal timers, and is the only writer of its state. Callers
// (the runtime's Handle and Managed) only send it messages and read the
// immutable View it publishes through an atomic pointer.
//
// Users do not import this package; package runtime wraps it.
//
// # Guarantees
//
//   - Single writer. Only the actor goroutine changes a lease's View; every
//     View, once published, is never modified. Readers never block.
//   - Trust window. The deadline is the local instant the granting or
//     renewing request was sent, plus the smaller of the requested and the
//     granted TTL, minus the safety margin. It moves only on a confirmed
//     renewal; a slow reply shortens the window, never stretches it. Each
//     renew or validate call is bounded by the policy's OperationTimeout
//     and by the remaining trust; none is sent at or after the deadline.
//   - Fail closed. Any outcome other than success or proof of loss
//     (ambiguous, unavailable, timed out) makes the lease Uncertain: no
//     admission until a Renew or Validate succeeds before the deadline.
//     State reports Expired from the deadline on even before the actor has
//     processed its timer, so admission ends on time without any I/O.
//   - Loss once. Managed renewal publishes at most one Loss on its channel
//     and then closes it; a clean StopManaged or a release closes it with
//     no value.
//
// # State model
//
// The rules live in two pure functions, plan (does this event need a
// backend call?) and transition (the next View and the reply), which read
// no clock, do no I/O and touch no channel; transition_test.go holds one
// table row per rule. See leaseapi.State for the diagram.
//
// # Failure handling
//
// A request that arrives while the actor is busy waits in a bounded
// mailbox; its caller's ctx bounds only that wait, never the backend call,
// whose outcome is applied even if the caller has left (replies are
// buffered, so a departed caller cannot stall the actor). After the actor
// exits, requests are answered from the final View without blocking. Once
// the client has begun closing, Close takes priority over queued work.
//
// # What this package does not do
//
// It never retries a mutation on its own except managed renewal, which is
// a fresh compare-and-renew each time; it never releases on StopManaged;
// and it does not decide capacity (the runtime passes a Gate).
package supervisor
