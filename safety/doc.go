// Package safety holds lease's fault-scenario suite and nothing else: its
// tests prove that the library fails closed when the network, the server,
// the clocks or the holder misbehave. docs/safety.md states the model and
// maps each guarantee to the test that backs it.
//
// # The model
//
//   - Clocks. The backend's clock decides expiry; the client's local
//     monotonic clock decides admission: a handle is Active only before
//     the send time of the request that granted or last confirmed-renewed
//     it, plus the TTL, minus the safety margin. The margin must cover the
//     rate difference between the two clocks over one TTL (a backend clock
//     at most TTL/(TTL-margin) times as fast as the client's); offsets do
//     not matter. Latency only shortens the trust window.
//   - Faults. A call may fail before it is sent (nothing changed), be lost
//     after it was applied (ErrAmbiguousOutcome), hang until its timeout,
//     be executed later than its timeout, or be answered late. A holder may
//     stop acting for any length of time (a pause). A server may crash and
//     lose its latest writes when its persistence settings allow it.
//   - Fencing. A lease cannot stop a paused holder's in-flight write; the
//     resource must reject tokens lower than the highest it accepted.
//
// # Tiers
//
// The simulation tier (TestSim*) runs every scenario inside
// testing/synctest on the memory backend, with per-client fault wrappers
// (simtest.Faulty, simtest.Deferred), a skewed backend clock
// (simtest.SkewedClock), a two-sided operation ledger (simtest.Ledger:
// what each caller was told and what the backend really did) and the
// history checker (simtest.History). Each scenario runs many seeds;
// LEASE_SAFETY_SEED=n replays one seed, LEASE_SAFETY_SEEDS=n sets the
// seeds per scenario, LEASE_SAFETY_LONG=1 runs 10^5 seeds in all. A failure
// prints its seed and writes the history and the ledger as JSON under
// $LEASE_TEST_ARTIFACTS (or the test's temporary directory).
//
// TestMutantsAreCaught builds this package with the leasemutant tag and
// requires every mutant of internal/mutant to make the simulation tier
// fail.
//
// The real-server tier (TestReal*) runs the scenarios that need a real
// wire against private Valkey/Redis and PostgreSQL servers
// (internal/testserver) through an in-process fault proxy
// (internal/faultproxy), serially, with short TTLs and repetitions. Every
// mutation the scenario's stores are asked for is recorded as its caller
// saw it, and at the end of each repetition the server's own audit
// (internal/serveraudit: a row trigger on PostgreSQL, the append-only file
// on Valkey) is checked by itself (C1) and against those calls (C4: every
// acknowledged mutation committed, every ambiguous one settled as
// committed or not). A failure writes the audit and the matched calls as
// JSON next to the history.
//
// TestRealNemesisSoak is the randomised nemesis soak: contending clients
// while a seeded nemesis delays, partitions, cuts and resets their
// connections and freezes the server. It runs 10s per backend by default;
// LEASE_SAFETY_SOAK=30m makes it the long tier's soak, LEASE_SAFETY_SEED
// replays its schedule.
package safety
