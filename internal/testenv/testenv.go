// Package testenv holds what every test package of lease shares: the list
// of goroutines goleak must ignore and the backend-requirement switch. Only
// tests import it.
package testenv

import (
	"os"

	"go.uber.org/goleak"
)

// IgnoredLeaks are goroutines that outlive their owner by design of a
// dependency. pgxpool's health-check goroutines exit shortly after
// Pool.Close returns, not before (the same list River keeps).
var IgnoredLeaks = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
	// valkey-go's cluster client closes replaced connections 5s later from
	// a goroutine that outlives Client.Close.
	goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
}

// RequireBackends reports whether LEASE_REQUIRE_BACKENDS=1: the project's
// test command sets it so that a missing server fails the run instead of
// skipping the real-backend tests.
func RequireBackends() bool { return os.Getenv("LEASE_REQUIRE_BACKENDS") == "1" }
