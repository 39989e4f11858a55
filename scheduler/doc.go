// Package scheduler runs jobs on schedules across a fleet of servers, each
// slot on one server, coordinated only through leases on a shared backend
// (through [runtime.Client]; no other channel between servers).
//
//	s, _ := scheduler.New(client, scheduler.Options{})
//	_ = s.Add(scheduler.Job{
//		Name: "report", Schedule: scheduler.Every(time.Hour),
//		Mode: scheduler.OnOneServer, Policy: policy,
//		Run: func(ctx context.Context, token lease.Token) error { ... },
//	})
//	_ = s.Start(ctx)
//	defer s.Stop(ctx)
//
// Every server adds the same jobs (name, schedule, mode) and computes the
// same slots from its own clock: [Every] aligns slots to the Unix epoch, so
// no coordination is needed to agree on them.
//
// # Time zones
//
// Slots are instants, and the scheduler hands every Schedule its instant
// in UTC (or in Job.Location when the job names one), never in the
// server's local time zone: a "daily at 09:00" schedule that reads t's
// wall clock means 09:00Z on every server, whether its time.Local is UTC or
// New York, so the fleet agrees on one slot instead of running the job at
// 09:00Z and again at 14:00Z. Name a Location (the same on every server)
// to mean 09:00 there, daylight saving time included.
//
// # Minimum interval
//
// [Every] rejects intervals below [MinInterval] (10 ms) at Add, and slots of
// any schedule closer than MinInterval to the previous one are skipped:
// each slot costs backend round trips to claim and release and leaves a
// key on the backend, so a 1 ns interval would claim slots as fast as the
// backend answers and fill it with keys.
//
// # How a slot is claimed, and why it runs once
//
// Each slot has its own lease key, "<namespace>/<job>/slot/<slot unix
// nanos>". When a slot is due by its clock, a server makes one acquisition
// attempt on that key (TryAcquire). The backend contract
// (leaseapi.Backend.TryAcquire, checked by simtest.Conformance) says
// tokens of a key start at 1, strictly increase with every grant, are never
// reused and survive release and expiry. So exactly one grant of a slot key
// ever carries token 1, and the rule is:
//
//	a server runs a slot if and only if its claim of the slot key got token 1.
//
// A server whose claim is contended (the key is held) or gets a token above
// 1 (somebody claimed it before and released it, or let it expire) skips the
// slot. This rule reads no clock: it holds for any clock skew, any pause, any
// lateness. A server that wakes an hour late, or whose clock is behind by
// more than the TTL, gets token 2 (or is contended) and does not run the
// slot again; a server whose clock is ahead merely claims first. Releasing a
// slot's lease after the run is therefore safe (and done), and the slot's
// TTL need not cover clock skew. The alternatives were rejected: a per-slot
// lease that is simply "not released" is re-acquirable once it expires, so
// its safety would depend on the TTL exceeding every server's lateness (an
// unbounded quantity under pauses); a per-job key with a "last slot done"
// marker needs a value store that the lease contract does not offer.
//
// Clocks matter only for liveness: a slot is attempted when it is due by a
// server's clock, so with clocks differing by less than a slot interval every
// slot is attempted by every live server within that difference, and the
// earliest one runs it.
//
// # Modes and tokens
//
//   - [OnOneServer]: the run holds the slot's lease under managed renewal
//     (a run may outlast the TTL and the interval); the token passed to Run
//     is the slot lease's token, which is always 1. It fences nothing
//     across slots: key protected writes by the slot ([Slot]) if needed.
//     Runs of different slots may overlap on different servers.
//   - [NonOverlap]: the server first takes the job's lease
//     ("<namespace>/<job>/run"; contended: the slot is skipped as [Busy]),
//     then claims the slot key as above (token 1 or skip), releases the slot
//     lease at once and runs under the job's lease with managed renewal. At
//     most one run of the job exists in the fleet at a time, and the token
//     passed to Run is the job lease's token, which strictly increases over
//     all runs of the job: a fenced resource rejects a run that lost its
//     lease once a later run has written. A slot that comes due while a run
//     holds the job's lease is skipped by every server ([Busy] elsewhere,
//     [Missed] on the server that ran), never queued.
//
// # Guarantees
//
//   - At most one run per slot per job in the fleet, with any clock skew
//     and any pause, as long as the backend keeps each key's token history
//     (see below). Exactly one when at least one server is up, reaches the
//     backend and is not busy with the job when the slot is due.
//   - NonOverlap: runs of a job never overlap in the fleet while leases are
//     honoured: a run's ctx is canceled when its lease is lost, expires or
//     the scheduler stops; a run that ignores ctx is not stopped (a lease
//     cannot stop a paused process), which is what the token is for.
//   - A job's panic is recovered and reported ([PanicError]); it never
//     crashes the scheduler and the run's lease is released.
//   - One server runs at most one run of a job at a time: while a run
//     lasts, that job's goroutine claims nothing; slots that pass during
//     the run are [Missed] here (others may claim them in OnOneServer mode).
//
// # Goroutines
//
// Start starts one goroutine per job, which exits when Stop is called
// (after its run, if any, returned and its lease was released) or when the
// job's schedule has no further slot, and one goroutine that waits for
// them and exits right after. Each run starts one watcher goroutine that
// exits before the run's lease is released. Nothing else runs in the
// background.
//
// # Failure handling
//
// A claim without a reliable outcome (backend unavailable, ambiguous, or a
// misconfigured backend: a wrong password, a missing schema) is reported
// as [Retrying] with its error at each attempt, retried every Policy.Retry
// until Policy.Wait after the slot's time, then reported as [Failed]:
// nothing is retried silently; a claim that did get token 1 but could not be used
// (its reply was lost and could not be resolved, or it arrived after its
// deadline) leaves the slot unrun: at most once wins over exactly once.
// A run whose lease is lost has its ctx canceled with the loss as cause,
// and a job that returns nil after a loss is reported with an ErrLost
// error. A lease whose release failed after its slot is reported in
// Event.ReleaseErr (and by Stop when Stop ended the run); it ends at its
// TTL. A panic in the job, in Schedule.Next (which ends the job: a schedule
// that broke is not trusted for another slot) or in Options.OnEvent is
// recovered and reported as a [PanicError]. Every outcome is reported
// through Options.OnEvent; the package never logs.
//
// # What this package does not do
//
//   - It does not garbage-collect slot keys. Backends keep each key's token
//     history forever (that is what makes the rule above safe), so each
//     claimed slot leaves one small entry on the backend: about 525,600 a
//     year for a job every minute. Choose intervals accordingly, or remove
//     old slot keys with backend tooling well after their slot (a deleted
//     slot key could be claimed again by a server that is that late).
//   - The guarantee is as durable as the backend's token history: a memory
//     store that is recreated, a Valkey server that loses its dataset or
//     evicts keys, or a PostgreSQL table that is truncated restarts tokens at
//     1 and can let a late server run a past slot again.
//   - It does not queue or catch up: passed slots are missed, not run late,
//     except the latest one at a late wake-up, which is claimed as usual.
//   - It does not persist schedules or run history, and it does not support
//     adding jobs after Start.
package scheduler
