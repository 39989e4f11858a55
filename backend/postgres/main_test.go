package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

var (
	serverURL  string // the database every test uses
	serverSkip string // why the tests that need it skip ("" = run)
)

// TestMain finds or starts the shared server (testserver.Postgres:
// LEASE_TEST_POSTGRES_URL, else a private cluster), checks that no goroutine
// outlives the tests, then stops the server.
func TestMain(m *testing.M) {
	url, stop, err := testserver.Postgres()
	serverURL = url
	serverSkip = testserver.SkipReason("postgres", testserver.EnvPostgresURL, err)
	opts := append(slices.Clone(testenv.IgnoredLeaks), testserver.StopAtExit(stop))
	goleak.VerifyTestMain(m, opts...)
}

// dbURL returns the test database URL or skips tb naming
// LEASE_TEST_POSTGRES_URL (TestMain already failed the run if
// LEASE_REQUIRE_BACKENDS=1).
func dbURL(tb testing.TB) string {
	tb.Helper()
	if serverSkip != "" {
		tb.Skip(serverSkip)
	}
	return serverURL
}

// newPool returns a pool on url, closed when tb ends.
func newPool(tb testing.TB, url string, tweak ...func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("parse url: %v", err)
	}
	for _, f := range tweak {
		f(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// randomSchema returns a fresh schema name and drops that schema when tb
// ends (whether or not anything created it).
func randomSchema(tb testing.TB, url string) string {
	tb.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "lt_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop schema: connect: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema: %v", err)
		}
	})
	return schema
}

// newStore migrates a fresh schema on pool and returns a Store on it,
// closed when tb ends.
func newStore(tb testing.TB, url string, pool *pgxpool.Pool) (*postgres.Store, postgres.Options) {
	tb.Helper()
	opts := postgres.Options{Schema: randomSchema(tb, url)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, opts
}

// freshStore returns a Store on a pool of its own and a fresh schema, both
// closed when tb ends.
func freshStore(tb testing.TB) *postgres.Store {
	tb.Helper()
	url := dbURL(tb)
	s, _ := newStore(tb, url, newPool(tb, url))
	return s
}
