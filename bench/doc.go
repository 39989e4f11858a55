// Package bench is the project's side-by-side benchmark: in one process,
// interleaved, the floor (the minimal fenced script or statement per
// operation, sent bare through valkey-go or pgx), the library's Store
// called directly, and the public API (package lease: Client and Handle,
// which are runtime's), on Valkey, PostgreSQL and the memory backend.
// Performance is read as ratios measured in the same minute, never as
// absolute times: the machine's cores are shared by clients, servers and
// other tenants.
//
// The package holds only benchmarks (and a smoke test that runs every
// workload once at a tiny size); it exports nothing. Run it with
//
//	go test -run '^$' -bench . -count 6 -timeout 60m ./bench | tee /tmp/b.txt
//	benchstat /tmp/b.txt
//
// It needs the servers the test command uses: LEASE_TEST_VALKEY_ADDR and
// LEASE_TEST_POSTGRES_URL when set, else private Redis/Valkey and
// PostgreSQL servers it starts itself (PostgreSQL with fsync on, the
// durability the floor's harness measures with).
//
// # Workloads
//
// As the peers harness (../shared/peersbench) defines them:
//
//   - seq: one goroutine, acquire+release pairs on distinct keys; pairs/s,
//     p50 and mean pair latency.
//   - par: 64 goroutines, distinct keys, acquire+release pairs; pairs/s.
//   - renew: 10,000 held leases (TTL 30s) renewed once each by 64
//     goroutines; renewals/s. For the API also "managed": the same 10,000
//     leases under managed (batched) renewal with RenewEvery 1ms, so that a
//     renewal is always due and the rate is the runtime's renewal capacity
//     (a Client of its own per round, closed after the window). A lost or
//     expired lease fails the benchmark; leases left uncertain at the end of
//     a window (a renewal without a reply within OperationTimeout, which
//     this overload can cause) are reported as managed-uncertain.
//   - handoff: 8 contenders on one key, each with its own connections (as
//     separate processes), holding it 1ms; after a release a contender
//     stands aside until another has acquired (at most 1s), then waits
//     U(0, 10ms). floor, store and api poll TryAcquire every 1ms; "acquire"
//     is the API's waiting Client.Acquire (release notification, Retry 10ms).
//     acquisitions/s, p50 hand-off latency (release returned → next holder's
//     acquire returned), longest wait (including waits the slice cut short).
//     Fencing tokens must strictly increase and no two holders may overlap;
//     a violation fails the benchmark.
//
// # Interleaving: one benchmark per backend and workload, a ratio per run
//
// Each benchmark (e.g. BenchmarkValkey/par) measures all its variants.
// One b.N iteration is one round: every variant runs one slice of the
// workload (a fixed number of pairs, a fixed duration, or one renewal of
// every held lease), in an order that rotates from round to round (and from
// run to run), so that no variant always runs first or right after another.
// The figures of a run are the totals over its rounds, and each run reports
// its own ratios (api/floor, store/floor, api/store, and acquire/floor or
// managed/floor where they apply). Separate sub-benchmarks per variant would
// not do: with -count, the testing package runs each leaf benchmark count
// times in a row, so the floor and the library would be measured minutes
// apart; and a ratio of medians from different minutes is not the ratio in
// one minute. With one benchmark per workload, -count 6 gives six ratios
// measured side by side, and benchstat shows their median and spread.
//
// ns/op is the time of one round and is suppressed; B/op and allocs/op
// (b.ReportAllocs) are per round, of all layers together. Read the named
// metrics, where OP is pair, renewal, release or acq (an acquisition):
//
//   - LAYER-pairs/s, -renewals/s, -acq/s: the layer's rate over its slices.
//   - LAYER-client-us/OP: this process's user+system CPU (getrusage) per
//     operation, over exactly the layer's slices.
//   - LAYER-server-us/OP: the server's CPU per operation. Redis: INFO
//     used_cpu_sys+used_cpu_user, minus the INFO commands' own usec.
//     PostgreSQL: the postmaster and its children from /proc, only when the
//     server is private (with LEASE_TEST_POSTGRES_URL it is not reported).
//   - LAYER-script-us/OP (Redis): INFO commandstats usec of EVAL+EVALSHA+FCALL per
//     operation. It is the server's wall time inside the scripts, so it
//     includes time the server was descheduled, and can exceed server-us.
//   - LAYER-allocs/OP: runtime.MemStats mallocs per operation, every
//     goroutine of this process (the driver's too). They include the
//     harness's own: none in seq and renew (key names are built before the
//     slice), one key name per pair in par.
//   - seq: LAYER-p50-us, LAYER-mean-us (pair latency); handoff:
//     LAYER-handoff-p50-us, LAYER-wait-max-ms; managed:
//     managed-renewals/call (renewals per backend call: the batch size).
//   - LAYER-failed-OPS (failed-pairs, failed-renewals, ...): operations
//     that failed (reported only when some did; the first is logged). A failed operation is counted and the workload
//     goes on, as in the peers harness: on a loaded machine a call can run
//     out of its OperationTimeout. A layer with more failures than
//     successes, a fencing violation or two holders at once fail the run.
//   - A/B: A's rate over B's, in the same run.
//   - renew also measures its teardown, the 10,000 releases from 64
//     goroutines: LAYER-releases/s, LAYER-client-us/release, ... and
//     A/B-releases.
//   - runtime-client-us/OP, runtime-allocs/OP, runtime-p50-us (seq): what
//     the runtime adds to a Store call, api minus store (seq, par, renew).
//
// In seq, par and renew the layers share one connection set (one
// valkey-go client with DisableCache, as the floor's; one pgx pool of 64
// connections, the peers harness's -pg-conns), so they run on the same
// warmed connections; each layer has keys (and, on Valkey, a Store prefix)
// of its own. In handoff every contender of every layer has connections of
// its own, as separate processes would.
//
// The floor's script and statement texts must stay identical to those of
// the peers harness (adapter_rawredis.go, adapter_rawpg.go) so that the two
// harnesses measure the same floor. The Store variant uses one owner id per
// locker, as the floor does; the API draws a fresh one per acquisition, as
// it always does.
package bench
