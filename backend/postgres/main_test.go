package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/testenv"
)

const envURL = "LEASE_TEST_POSTGRES_URL"

var (
	serverURL  string // the database every test uses; "" when none
	serverErr  error
	serverStop = func() {}
)

func TestMain(m *testing.M) {
	serverURL = os.Getenv(envURL)
	code := func() int {
		defer serverStop()
		goleak.VerifyTestMain(wrapM{m}, testenv.IgnoredLeaks...)
		return 0
	}()
	os.Exit(code)
}

// wrapM lets TestMain stop the server after goleak's check.
type wrapM struct{ m *testing.M }

func (w wrapM) Run() int { return w.m.Run() }

// dbURL returns the test database URL or skips (fails when
// LEASE_REQUIRE_BACKENDS=1) naming the variable.
func dbURL(tb testing.TB) string {
	tb.Helper()
	if serverURL == "" {
		if testenv.RequireBackends() {
			tb.Fatalf("no PostgreSQL server: set %s (LEASE_REQUIRE_BACKENDS=1)", envURL)
		}
		tb.Skipf("no PostgreSQL server: set %s", envURL)
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

var adminOnce struct {
	sync.Mutex
	pool *pgxpool.Pool
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
