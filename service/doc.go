// Package service runs a singleton service — work that must run on one
// candidate of a fleet at a time — by leader election on one lease, with
// the lifecycle shapes that frameworks expect, without importing them:
//
//   - Start(ctx) error / Stop(ctx) error are uber-go/fx OnStart/OnStop
//     hooks: Start returns at once, Stop ends the campaign and waits.
//
//   - Serve(ctx) error is a thejerf/suture Service: it blocks until ctx is
//     done.
//
// With client a lease.Client (import "github.com/leasekit/lease"):
//
//	s, err := service.New(client, service.Options{
//		Key: key, Policy: policy,
//		Run: func(ctx context.Context, h *lease.Handle) error {
//			<-ctx.Done() // lead until the lease is lost or we stop
//			return nil
//		},
//	})
//	lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
//
// A candidate campaigns with [runtime.Client.Run]: one Acquire bounded by
// Policy.Wait (waking early on a release notification when the backend
// sends them), repeated, at least Backoff apart, until it wins. While it
// leads, managed renewal keeps the lease and Run runs with a ctx that is
// canceled on loss. When the term ends — the lease is lost or expires,
// Run returns, or Stop is called — Run has returned, renewal is stopped
// and the release has returned before OnStoppedLeading is called (a failed
// release is reported through OnError, and by Stop when Stop ended the
// term); the candidate then pauses Backoff and campaigns again (unless
// stopped).
//
// # Guarantees
//
//   - At most one candidate's Run is admitted at a time while leases are
//     honoured: a term's ctx is canceled at the lease's local deadline
//     (send time of the last successful renewal + TTL - SafetyMargin), which
//     is before the backend can grant the key to anyone else, clock rate
//     differences within the margin included. A Run that ignores its ctx is
//     not stopped; fence its writes with h.Token(), which strictly increases
//     from term to term.
//   - Hand-off: after a leader crashes (stops talking to the backend and
//     never releases), another candidate leads within TTL + Policy.Retry
//     (+ Jitter) of the crash; after a clean Stop, which releases the lease,
//     within one Retry, and at once on a backend with release notification
//     for candidates waiting in a campaign.
//   - A panic in Run or a callback is recovered, reported as a
//     [PanicError] through OnError, and ends the term like a return.
//
// # Goroutines
//
// Start starts one campaign goroutine that exits when Stop is called,
// after the current term has ended. Serve runs the campaign on the
// caller's goroutine (plus a context.AfterFunc that lives only until
// Serve returns). Each term starts the watcher goroutine of
// runtime.Client.Run, which exits before the term ends. The callbacks run
// on the campaign goroutine.
//
// # Failure handling
//
// A campaign that fails for any reason other than contention (backend
// unavailable or misconfigured — a wrong password, a missing schema —,
// ambiguous, capacity, a closed client) is reported through OnError and
// retried after Backoff; the Singleton never gives up on its own, and
// never retries silently. Each campaign starts with one attempt (Wait
// zero) and waits for the key (Policy.Wait, waking on a release
// notification) only when that attempt found it held by another
// candidate: an exhausted Wait then means a healthy leader and is not
// reported, and a backend that fails every attempt is reported once per
// campaign. (The cost is one extra attempt per campaign for a follower.)
// A term that ends with an error (Run's error, a loss reported as ErrLost
// or ErrStaleOwner, a failed release) is reported the same way. Errors
// match exactly one leaseapi sentinel (a Run error is passed through as
// Run returned it) and never contain the key. The package never logs.
//
// # What this package does not do
//
//   - No fairness or preference: any candidate may win a campaign, the
//     previous leader included.
//   - No "leader changed" notifications about other candidates: a
//     candidate only knows whether it leads ([Singleton.Leading]).
//   - It does not import fx or suture, and does not restart a stopped
//     Singleton: build a new one.
package service
