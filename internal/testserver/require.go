package testserver

import (
	"fmt"
	"os"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/testenv"
)

// SkipReason turns the outcome of Redis or Postgres in a TestMain into what
// the tests that need that server do. With a nil err it returns "": run
// them. Otherwise, when LEASE_REQUIRE_BACKENDS=1 (testenv.RequireBackends;
// the project's test command sets it) it prints the reason to stderr and
// exits the test binary with status 1, because a missing server must fail
// that run rather than pass it silently; else it returns a message for
// t.Skip that names name and envVar, e.g.
//
//	valkey not available (testserver: no valkey-server or redis-server on PATH: ...); set LEASE_TEST_VALKEY_ADDR to run these tests
//
// A private server that was already started when SkipReason exits dies with
// the test binary (parent-death signal).
func SkipReason(name, envVar string, err error) string {
	if err == nil {
		return ""
	}
	msg := fmt.Sprintf("%s not available (%v); set %s to run these tests", name, err, envVar)
	if testenv.RequireBackends() {
		fmt.Fprintf(os.Stderr, "testserver: LEASE_REQUIRE_BACKENDS=1 but %s\n", msg)
		os.Exit(1)
	}
	return msg
}

// StopAtExit is a goleak option for VerifyTestMain: after the tests and the
// leak check it calls each stop, in order, then exits with the tests' code.
// (VerifyTestMain exits itself, so a TestMain cannot stop its servers after
// it returns; the servers are processes, not goroutines, so stopping them
// after the leak check hides nothing from it.)
func StopAtExit(stops ...func()) goleak.Option {
	return goleak.Cleanup(func(code int) {
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
		os.Exit(code)
	})
}
