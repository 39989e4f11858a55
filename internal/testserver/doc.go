// Package testserver finds or starts the real servers the backend tests run
// against: an address from the environment when set, otherwise a private
// server started from a binary on PATH in a temporary directory on a
// loopback port. Only tests import it.
//
// # Finding a server
//
// Redis and Postgres return an address or URL, a stop function and an
// error. They honour LEASE_TEST_VALKEY_ADDR and LEASE_TEST_POSTGRES_URL
// (EnvValkeyAddr, EnvPostgresURL); otherwise they start a private throwaway
// server: valkey-server or redis-server from PATH; initdb and postgres from
// PATH or /usr/lib/postgresql/*/bin, run as the OS user "postgres" when the
// tests run as root (initdb refuses root). Every wait is bounded.
//
// # Using it from TestMain
//
// One server per test binary, started in TestMain, stopped after the leak
// check; tests that need it skip, or the binary fails when the project's test
// command demands real backends (LEASE_REQUIRE_BACKENDS=1):
//
//	var valkeyAddr, valkeySkip string
//
//	func TestMain(m *testing.M) {
//		addr, stop, err := testserver.Redis()
//		valkeyAddr = addr
//		valkeySkip = testserver.SkipReason("valkey", testserver.EnvValkeyAddr, err)
//		opts := append(slices.Clone(testenv.IgnoredLeaks), testserver.StopAtExit(stop))
//		goleak.VerifyTestMain(m, opts...)
//	}
//
//	func TestSomething(t *testing.T) {
//		if valkeySkip != "" {
//			t.Skip(valkeySkip)
//		}
//		// dial valkeyAddr; use keys (or a schema, for PostgreSQL) of your
//		// own: with the environment variable set, the server is shared.
//	}
//
// # Controlling a server
//
// StartRedis, StartPostgres and StartRedisCluster start private servers a
// test can hurt: Kill (SIGKILL: a crash; the data directory is kept),
// Restart (same port, same directory, so persistence is exercised),
// Pause/Resume (SIGSTOP/SIGCONT: a stalled machine), Stop (for good; the
// directory is removed). Fault tests must use these, never the shared server
// from the environment.
//
// # Processes
//
// Every server is a direct child of the test binary, in its own process
// group, with a parent-death signal: Stop and Kill reap it, and it dies with
// the test binary even when that binary panics or times out (its temporary
// directory is then left behind). The package starts no goroutine that
// outlives a call.
package testserver
