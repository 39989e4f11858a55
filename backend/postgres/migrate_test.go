package postgres_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	opts := postgres.Options{Schema: randomSchema(t, url), Table: "locks", FenceTable: "marks"}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	const n = 8
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
		gate = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-gate
			errs[i] = postgres.Migrate(ctx, pool, opts)
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: got %v, want nil", i, err)
		}
	}
	versions := func() []int {
		rows, err := pool.Query(ctx, "SELECT version FROM "+pgx.Identifier{opts.Schema, "lease_migrations"}.Sanitize()+" ORDER BY version")
		if err != nil {
			t.Fatalf("read versions: %v", err)
		}
		v, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatalf("read versions: %v", err)
		}
		out := make([]int, len(v))
		for i := range v {
			out[i] = int(v[i])
		}
		return out
	}
	files, err := fs.Glob(postgres.Migrations(), "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("Migrations(): got %v files, %v", files, err)
	}
	got := versions()
	if len(got) != len(files) {
		t.Fatalf("version rows: got %v, want one per file %v", got, files)
	}
	for i, v := range got {
		if v != i+1 {
			t.Fatalf("version rows: got %v, want 1..%d", got, len(files))
		}
	}
	var appliedBefore time.Time
	if err := pool.QueryRow(ctx, "SELECT max(applied_at) FROM "+pgx.Identifier{opts.Schema, "lease_migrations"}.Sanitize()).Scan(&appliedBefore); err != nil {
		t.Fatal(err)
	}

	// The tables work, and a re-run is a no-op that keeps the data.
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("migrate", "k")
	rec, err := s.TryAcquire(ctx, k, "owner-1", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after Migrate: %v", err)
	}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("re-run: got %v, want nil", err)
	}
	if got2 := versions(); len(got2) != len(got) {
		t.Fatalf("re-run changed version rows: got %v, want %v", got2, got)
	}
	var appliedAfter time.Time
	if err := pool.QueryRow(ctx, "SELECT max(applied_at) FROM "+pgx.Identifier{opts.Schema, "lease_migrations"}.Sanitize()).Scan(&appliedAfter); err != nil {
		t.Fatal(err)
	}
	if !appliedAfter.Equal(appliedBefore) {
		t.Fatalf("re-run applied something: applied_at %v, want %v", appliedAfter, appliedBefore)
	}
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatalf("grant after re-run: got %v, want nil", err)
	}
}

func TestMigrateTwoTargetsOneSchema(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	schema := randomSchema(t, url)
	ctx := t.Context()
	for _, o := range []postgres.Options{{Schema: schema}, {Schema: schema, Table: "other", FenceTable: "other_fences"}} {
		if err := postgres.Migrate(ctx, pool, o); err != nil {
			t.Fatalf("Migrate %s: %v", o.Table, err)
		}
		s, err := postgres.New(pool, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.TryAcquire(ctx, leaseapi.MustKey("m", "k"), "owner", time.Minute); err != nil {
			t.Fatalf("TryAcquire on %q: %v", o.Table, err)
		}
	}
}

func TestMissingSchema(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	s, err := postgres.New(pool, postgres.Options{Schema: randomSchema(t, url)}) // never migrated
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("m", "k")
	_, err = s.TryAcquire(t.Context(), k, "owner", time.Minute)
	wantKind(t, "TryAcquire without Migrate", err, leaseapi.ErrBackendUnavailable)
	wantConfig(t, "TryAcquire without Migrate", err, "configuration: schema missing: run postgres.Migrate", "42P01")
	_, _, err = s.Inspect(t.Context(), k)
	wantConfig(t, "Inspect without Migrate", err, "configuration: schema missing: run postgres.Migrate", "42P01")
	// A schema that exists without the table.
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{postgres.SchemaOf(s)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(t.Context(), k, "owner", time.Minute)
	wantConfig(t, "TryAcquire without the table", err, "configuration: schema missing: run postgres.Migrate", "42P01")
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	// No server needed: New does no I/O.
	pool := newPool(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	for _, tc := range []struct {
		name string
		o    postgres.Options
		ok   bool
	}{
		{"zero", postgres.Options{}, true},
		{"custom", postgres.Options{Schema: "s_1", Table: "_t", FenceTable: "f"}, true},
		{"63 bytes", postgres.Options{Table: strings.Repeat("a", 63)}, true},
		{"64 bytes", postgres.Options{Table: strings.Repeat("a", 64)}, false},
		{"upper case", postgres.Options{Schema: "Lease"}, false},
		{"quote", postgres.Options{Table: `x"; DROP TABLE y; --`}, false},
		{"dot", postgres.Options{Table: "a.b"}, false},
		{"leading digit", postgres.Options{FenceTable: "1f"}, false},
		{"unicode", postgres.Options{Schema: "lé"}, false},
		{"same tables", postgres.Options{Table: "x", FenceTable: "x"}, false},
		{"version table", postgres.Options{Table: "lease_migrations"}, false},
	} {
		s, err := postgres.New(pool, tc.o)
		if tc.ok != (err == nil) || (err == nil) != (s != nil) {
			t.Fatalf("New(%s): got (%v, %v), want ok=%v", tc.name, s != nil, err, tc.ok)
		}
		if !tc.ok {
			wantKind(t, "New("+tc.name+")", err, leaseapi.ErrInvalidState)
			wantKind(t, "Migrate("+tc.name+")", postgres.Migrate(t.Context(), pool, tc.o), leaseapi.ErrInvalidState)
		}
	}
	_, err := postgres.New(nil, postgres.Options{})
	wantKind(t, "New(nil pool)", err, leaseapi.ErrInvalidState)
	wantKind(t, "Migrate(nil pool)", postgres.Migrate(t.Context(), nil, postgres.Options{}), leaseapi.ErrInvalidState)
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	pool := newPool(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	s, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		t.Fatalf("New on an unreachable pool: got %v, want nil", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	k := leaseapi.MustKey("u", "k")
	_, err = s.TryAcquire(ctx, k, "owner", time.Second)
	wantKind(t, "TryAcquire unreachable", err, leaseapi.ErrBackendUnavailable)
	rec := leaseapi.Record{Key: k, Owner: "owner", Token: 1}
	_, err = s.Renew(ctx, rec, time.Second)
	wantKind(t, "Renew unreachable", err, leaseapi.ErrBackendUnavailable)
	wantKind(t, "Release unreachable", s.Release(ctx, rec), leaseapi.ErrBackendUnavailable)
	wantKind(t, "Migrate unreachable", postgres.Migrate(ctx, pool, postgres.Options{}), leaseapi.ErrBackendUnavailable)
	// A watch on an unreachable server starts the listener, which keeps
	// retrying until Close; Close must still return promptly.
	_, stop := s.WatchRelease(k)
	stop()
}

func wantKind(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) || leaseapi.Kind(err) != want {
		t.Fatalf("%s: got %v, want an error of kind %v", what, err, want)
	}
}

// TestMigrateUpToDateNeedsNoCreate: once migrated, Migrate only reads, so an
// application role with no CREATE privilege can run it at every start, and
// the Store works with plain DML grants.
func TestMigrateUpToDateNeedsNoCreate(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	admin := newPool(t, url)
	opts := postgres.Options{Schema: randomSchema(t, url)}
	ctx := t.Context()
	if err := postgres.Migrate(ctx, admin, opts); err != nil {
		t.Fatal(err)
	}
	role := opts.Schema + "_app"
	q := pgx.Identifier{role}.Sanitize()
	sch := pgx.Identifier{opts.Schema}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + q + " LOGIN",
		"GRANT USAGE ON SCHEMA " + sch + " TO " + q,
		"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA " + sch + " TO " + q,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+q)
		_, _ = admin.Exec(ctx, "DROP ROLE IF EXISTS "+q)
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.Ping(ctx); err != nil {
		t.Skipf("cannot log in as a new role on this server (authentication): %v", err)
	}
	if err := postgres.Migrate(ctx, app, opts); err != nil {
		t.Fatalf("Migrate of an up-to-date schema without CREATE: got %v, want nil", err)
	}
	s, err := postgres.New(app, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.TryAcquire(ctx, leaseapi.MustKey("ro", "k"), "owner", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire as the application role: %v", err)
	}
	if err := s.Release(ctx, rec); err != nil {
		t.Fatalf("Release as the application role: %v", err)
	}
}
