// Package supervisor is the per-lease actor of lease: one goroutine owns
// one held lease, performs its backend calls one at a time, runs its
// deadline and renewal timer, and is the only writer of its state. Callers
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
//   - A request either happens or says so. A ctx already done sends
//     nothing; a ctx that ends while the request is queued withdraws it
//     (the actor skips it); a request the actor has taken is answered with
//     its real outcome, whatever the caller's ctx did meanwhile.
//   - Loss once. Managed renewal publishes at most one Loss on its channel
//     and then closes it; a clean StopManaged or a release closes it with
//     no value.
//
// # State model
//
// Every rule lives in one pure function, step (core.go): the actor's state
// and one event — a request (renew, validate, release, start or stop
// managed), the outcome of the backend call the previous step started
// (with its send instant), the timer (deadline or renewal due), the
// client's close — give the next state and the effects for the loop:
// publish the view, report the state change, deliver or close the loss
// channel, give the managed slot back, reply, make a backend call, arm the
// timer, exit. step reads no clock, does no I/O and touches no channel.
// Managed renewal, loss publication and close are rows like the rest:
// core_test.go has a named row per rule and drives every state × event
// pair through step. See leaseapi.State for the state diagram.
//
// The loop (run.go) is one select with an inbox arm, a timer arm and a
// close arm (the client's life context), preceded by a non-blocking look
// at the close arm so that Close takes priority over queued work; one
// deferred exit does all the cleanup. A step that asks to be woken at an
// instant already past — a managed renewal due as soon as the previous
// one is answered, when the backend takes longer than RenewEvery or has
// more renewals to serve than it can — gets its timer event at once,
// after a non-blocking look at the close and inbox arms, and the timer is
// left as it was (TestDueRenewalSkipsTheTimer): re-arming it for the past
// and selecting on it cost, interleaved in one process on Valkey (10,000
// managed leases, RenewEvery 1 ms, five windows each), a median 7.70 µs
// of client CPU per batched renewal against 7.32 µs without, and
// 29.2k renewals/s against 38.9k.
//
// A backend call runs on the actor goroutine itself: the loop receives
// nothing while it runs, and feeds its outcome to step as the next event.
// The alternative, a short-lived goroutine per call whose result comes
// back on a channel with the inbox arm disabled meanwhile, would change
// nothing of what the actor may do during a call (it must not start
// another, and Close and the deadline still bound the call through its
// context, which carries the client's life and the trust bound), and it
// measured worse on this shared 2-core machine (one or two short runs
// each, so only the larger differences count): a TryAcquire+Release pair
// on the memory backend took 4.9–6.4 µs and 15 allocations on the actor
// against 7.5–7.7 µs and 19 with a goroutine per call; on Valkey (the
// bench package, 64 goroutines) the runtime's share of a pair was 22
// allocations and 9.5–10.2 µs of client CPU on the actor against 26 and
// 11.4–12.5 µs; 100,000 managed leases on the memory backend cost 4.3 µs
// of CPU per renewal against 5.2 µs. The price is memory: a call grows
// the actor's stack, which the runtime shrinks again only at garbage
// collection, and only while the actor is parked with small frames (next,
// not serve, holds the select for that reason). BenchmarkManaged100k
// measured 6.4 KiB per managed lease (4 KiB of stack; 6.6 KiB since the
// first view is part of the Supervisor's allocation) against 6.7 KiB
// with a goroutine per call and 3.98 KiB for the earlier loop, which moved
// to a fresh goroutine after every backend call and kept its frames under
// the minimum stack with noinline pragmas and pooled outcomes. The 4 KiB
// of stack is the floor for any plain loop, wherever the call runs: a
// goroutine starts with 2 KiB of which about 1.1 KiB is usable before it
// grows, a step with its effects needs more, and the Go runtime shrinks a
// parked goroutine's 4 KiB stack back to 2 KiB only if less than about
// 224 bytes of it are in use (used + 800 < a quarter of the stack), which
// no select loop achieves.
//
// Sequentially (one caller, one pair after another) the design's two
// hand-offs cost more than their CPU work. A pair starts the actor (the
// go statement, or the pool's hand-off) and gets its release reply from
// it; Go's scheduler wakes an idle P's thread (wakep) on every goroutine
// start and every wake-up while a P is idle, and that thread finds
// nothing to run: the actor and the caller run on the caller's P, the
// actor readied into its run-next slot (203 of 204 pairs in a
// runtime/trace of 200 pairs on Valkey). Measured on the shared 2-core
// machine, 3,000 pairs on Valkey: 4.2 futex calls per pair through the
// runtime against 0.24 for the Store called directly, 2.3 more nanosleeps
// (the scheduler's pause before stealing a run-next goroutine), the
// release's network wait 33-41 µs at the median against 20 µs (the woken
// threads compete with the server for the two cores), and the pair's p50
// gap to the Store +20-55 µs with GOMAXPROCS=2 against +10-15 µs with
// GOMAXPROCS=1. No user-level API starts or wakes a goroutine without
// that wake-up; fewer hand-offs would mean a lease without its own
// goroutine or callers running the actor's steps, which this package
// does not do.
//
// On the wall clock an actor's goroutine is not always a new one: an
// actor that has exited parks its goroutine (pool.go) while another actor
// of the same Config is running, and the next lease to start runs on it.
// A new goroutine starts on a 2 KiB stack that the lease's first backend
// call grows again, and that copy (it walks every frame) was a third of a
// TryAcquire+Release pair: on the memory backend behind a wrapper that
// claims no capability, while the client holds another lease, callgrind
// counted 28,904 instructions and 9 allocations per pair with a new
// goroutine per lease against 19,174 and 8 on a parked one
// (BenchmarkTryAcquireReleaseHeld and ...Bounded in runtime; since then,
// with GOMAXPROCS=1 for steadier counts, 15,400-15,800 on a parked one,
// whose goroutine waits for the next lease on the hand-off channel
// alone, and 23,600-25,600 on a new one). A goroutine
// still serves one lease at a time, from its start to its exit; once no
// actor of the Config is running the parked goroutines are dismissed, so
// that a client's goroutines still end with its leases (or with its life)
// and at most 256 stay parked.
//
// On the wall clock (Config.WallClock) the context that bounds a call is
// not made per call: calls whose bounds end in the same short slot of
// time, across all the leases of a client, share one child of the
// client's life whose deadline is the slot's start (internal/callctx). A call
// is still bounded by OperationTimeout and the remaining trust — ended up
// to 1/64 of its bound early, never late — and canceled at once by the
// client's close; a bound under 64 ms, the release on close and any other
// clock get a context of their own. A per-call context.WithTimeout on the
// client's life cost 4–5 allocations and a lock of life, shared by every
// lease of the client, per call: on Valkey (bench, par, 64 goroutines)
// the runtime's share of a pair went from 22 to 17 allocations.
//
// # Failure handling
//
// A request that arrives while the actor is busy waits in a bounded
// mailbox; its caller's ctx bounds that wait (ending it withdraws the
// request), and once taken the request's backend call is bounded by the
// policy's OperationTimeout. Replies are buffered, so a departed caller
// cannot stall the actor. After the actor exits, requests are answered
// from the final View without blocking. When the client closes, the actor
// releases its lease under the close context and exits; a release that
// failed or could not be confirmed is kept for CloseErr, so that the
// client can report it.
//
// # What this package does not do
//
// It never retries a mutation on its own except managed renewal, which is
// a fresh compare-and-renew each time; it never releases on StopManaged;
// it does not decide capacity (the runtime passes a Gate); and it reports
// state changes and backend calls to hooks (Config.OnStateChange,
// Config.OnCall, with clock readings it takes anyway) without keeping or
// counting them: the runtime counts them.
package supervisor
