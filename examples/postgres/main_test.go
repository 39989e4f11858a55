package main

import (
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

var (
	dbURL  string
	dbSkip string
)

func TestMain(m *testing.M) {
	url, stop, err := testserver.Postgres()
	dbURL = url
	dbSkip = testserver.SkipReason("postgres", testserver.EnvPostgresURL, err)
	goleak.VerifyTestMain(m, append(slices.Clone(testenv.IgnoredLeaks), testserver.StopAtExit(stop))...)
}

// TestRun runs the example end to end against the test server.
func TestRun(t *testing.T) {
	if dbSkip != "" {
		t.Skip(dbSkip)
	}
	t.Setenv("DATABASE_URL", dbURL)
	if err := run(); err != nil {
		t.Fatalf("run: %v", err)
	}
}
