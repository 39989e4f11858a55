package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

// toolSchema is a scratch schema for a migration tool's run: its name, the
// options naming it, and the tables the tool keeps its own bookkeeping in
// (in the public schema, so that version 1's CREATE SCHEMA is exercised;
// dropped when t ends).
func toolSchema(t *testing.T, url, tool string) (postgres.Options, string) {
	t.Helper()
	opts := postgres.Options{Schema: randomSchema(t, url), Table: "locks", FenceTable: "marks"}
	table := tool + "_" + opts.Schema
	t.Cleanup(func() {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			return
		}
		defer conn.Close(t.Context())
		_, _ = conn.Exec(t.Context(), "DROP TABLE IF EXISTS "+pgx.Identifier{"public", table}.Sanitize())
	})
	return opts, table
}

// conformanceOn runs the conformance suite on Stores of opts's tables,
// already migrated by a tool, each subtest on its own key namespace's
// rows (the suite's keys are per subtest name).
func conformanceOn(t *testing.T, url string, opts postgres.Options, apply func(t *testing.T, pool *pgxpool.Pool, o postgres.Options)) {
	t.Helper()
	pool := newPool(t, url)
	simtest.Conformance(t, simtest.Harness{
		TTL:   time.Second,
		Slack: 200 * time.Millisecond,
		New: func(t *testing.T) leaseapi.Backend {
			// A fresh schema per subtest, migrated by the same rendering.
			o := opts
			o.Schema = randomSchema(t, url)
			apply(t, pool, o)
			s, err := postgres.New(pool, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	})
}

// applyGoose runs goose up with the goose layout for opts, goose's own
// table being public.table (dropped when t ends).
func applyGoose(t *testing.T, url string, pool *pgxpool.Pool, opts postgres.Options, table string) {
	t.Helper()
	fsys, err := postgres.MigrationFS(opts, postgres.Goose)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName("public."+table), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatalf("goose: %v", err)
	}
	if _, err := p.Up(t.Context()); err != nil {
		t.Fatalf("goose up: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			return
		}
		defer conn.Close(t.Context())
		_, _ = conn.Exec(t.Context(), "DROP TABLE IF EXISTS "+pgx.Identifier{"public", table}.Sanitize())
	})
}

// TestMigrationFSGoose applies the goose layout with goose itself, checks
// what goose recorded, runs the conformance suite on the result, checks
// that Migrate then finds nothing to break, and that goose's down refuses
// to drop the lease table.
func TestMigrationFSGoose(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	opts, table := toolSchema(t, url, "goose")
	pool := newPool(t, url)
	applyGoose(t, url, pool, opts, table)
	var v int64
	if err := pool.QueryRow(t.Context(), "SELECT max(version_id) FROM "+pgx.Identifier{"public", table}.Sanitize()).Scan(&v); err != nil || v != 4 {
		t.Fatalf("goose's version: got %d (%v), want 4", v, err)
	}
	storeWorks(t, pool, opts)
	if err := postgres.Migrate(t.Context(), pool, opts); err != nil {
		t.Fatalf("Migrate after goose: %v", err)
	}
	storeWorks(t, pool, opts)

	fsys, err := postgres.MigrationFS(opts, postgres.Goose)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithTableName("public."+table), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(t.Context(), 0); err == nil || !strings.Contains(err.Error(), "refusing to drop") {
		t.Fatalf("goose down to 0: got %v, want the server's refusal to drop the fence table", err)
	}
	var exists bool
	if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{opts.Schema, opts.Table}.Sanitize()).Scan(&exists); err != nil || !exists {
		t.Fatalf("the lease table is gone after goose down (%v)", err)
	}
}

// TestMigrationFSGolangMigrate applies the golang-migrate layout with
// golang-migrate itself (pgx/v5 driver, iofs source) and runs the
// conformance suite's checks on a Store of the result.
func TestMigrationFSGolangMigrate(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	opts, table := toolSchema(t, url, "migrate")
	m := newMigrate(t, newPool(t, url), opts, table)
	if err := m.Up(); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	if v, dirty, err := m.Version(); err != nil || v != 4 || dirty {
		t.Fatalf("migrate version: got (%d, dirty %v, %v), want (4, false, nil)", v, dirty, err)
	}
	if err := m.Up(); !errors.Is(err, migrate.ErrNoChange) {
		t.Fatalf("second migrate up: got %v, want ErrNoChange", err)
	}
	pool := newPool(t, url)
	storeWorks(t, pool, opts)
	if tokenCheck(t, pool, opts) {
		t.Fatal("version 4 left the token CHECK constraint")
	}
	// Down by one puts version 1's token check back, and the Store works;
	// down by one more removes the waiter mark only, and the Store says
	// so; up brings both back to version 4.
	if err := m.Steps(-1); err != nil {
		t.Fatalf("migrate down one: %v", err)
	}
	if !tokenCheck(t, pool, opts) {
		t.Fatal("the down of version 4 did not restore the token CHECK constraint")
	}
	storeWorks(t, pool, opts)
	if err := m.Steps(-1); err != nil {
		t.Fatalf("migrate down two: %v", err)
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(t.Context(), leaseapi.MustKey("tools", "old"), "owner", time.Minute)
	wantConfig(t, "TryAcquire after migrate down two", err, "configuration: schema out of date: run postgres.Migrate", "42703")
	if err := m.Up(); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
	if tokenCheck(t, pool, opts) {
		t.Fatal("version 4 applied again left the token CHECK constraint")
	}
	storeWorks(t, pool, opts)
}

// tokenCheck reports whether the lease table of opts has version 1's
// CHECK (token > 0), which version 4 drops.
func tokenCheck(t *testing.T, pool *pgxpool.Pool, opts postgres.Options) bool {
	t.Helper()
	table := opts.Table
	if table == "" {
		table = postgres.DefaultTable
	}
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_catalog.pg_constraint
WHERE conrelid = $1::regclass AND contype = 'c' AND pg_catalog.pg_get_constraintdef(oid) = 'CHECK ((token > 0))'`,
		pgx.Identifier{opts.Schema, table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// newMigrate returns a golang-migrate instance (pgx/v5 driver, iofs
// source) on the golang-migrate layout for opts, its own table being
// public.table; closed when t ends.
func newMigrate(t *testing.T, pool *pgxpool.Pool, opts postgres.Options, table string) *migrate.Migrate {
	t.Helper()
	fsys, err := postgres.MigrationFS(opts, postgres.GolangMigrate)
	if err != nil {
		t.Fatal(err)
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	drv, err := migratepgx.WithInstance(db, &migratepgx.Config{SchemaName: "public", MigrationsTable: table})
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", drv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = m.Close() }) // gives back the connection the driver holds
	return m
}

// TestMigrationFSPlain: the plain layout is the up statements, one file
// per version, in name order, that apply as they are; and an unknown
// layout or bad options are ErrInvalidState.
func TestMigrationFSPlain(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	opts, _ := toolSchema(t, url, "plain")
	fsys, err := postgres.MigrationFS(opts, postgres.Plain)
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil || len(names) != 4 || names[0] != "0001_leases.sql" || names[3] != "0004_token_check.sql" {
		t.Fatalf("plain files: %v (%v)", names, err)
	}
	pool := newPool(t, url)
	for _, name := range names {
		sql, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(sql), "{{") || strings.Contains(string(sql), "goose") {
			t.Fatalf("%s is not plain SQL:\n%s", name, sql)
		}
		if _, err := pool.Exec(t.Context(), string(sql)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	storeWorks(t, pool, opts)
	_, err = postgres.MigrationFS(opts, postgres.Layout(99))
	wantKind(t, "unknown layout", err, leaseapi.ErrInvalidState)
	_, err = postgres.MigrationFS(postgres.Options{Schema: "Bad"}, postgres.Goose)
	wantKind(t, "bad options", err, leaseapi.ErrInvalidState)
}

// TestConformanceMigratedByTools runs the conformance suite on schemas
// migrated by goose alone and by golang-migrate alone.
func TestConformanceMigratedByTools(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	opts := postgres.Options{Table: "locks", FenceTable: "marks"}
	t.Run("goose", func(t *testing.T) {
		conformanceOn(t, url, opts, func(t *testing.T, pool *pgxpool.Pool, o postgres.Options) {
			applyGoose(t, url, pool, o, "goose_"+o.Schema)
		})
	})
	t.Run("golang-migrate", func(t *testing.T) {
		conformanceOn(t, url, opts, func(t *testing.T, pool *pgxpool.Pool, o postgres.Options) {
			table := "migrate_" + o.Schema
			t.Cleanup(func() {
				_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{"public", table}.Sanitize())
			})
			if err := newMigrate(t, pool, o, table).Up(); err != nil {
				t.Fatalf("migrate up: %v", err)
			}
		})
	})
}

// storeWorks checks a Store on opts's tables: acquire, contend, renew,
// fence a write, release.
func storeWorks(t *testing.T, pool *pgxpool.Pool, opts postgres.Options) {
	t.Helper()
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	k := leaseapi.MustKey("tools", fmt.Sprint("k", time.Now().UnixNano()))
	rec, err := s.TryAcquire(ctx, k, "owner", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	_, err = s.TryAcquire(ctx, k, "other", time.Minute)
	wantKind(t, "contended TryAcquire", err, leaseapi.ErrContended)
	if rec, err = s.Renew(ctx, rec, time.Minute); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := s.FencedWrite(ctx, pool, k.String(), rec.Token, &rec, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("FencedWrite: %v", err)
	}
	if err := s.Release(ctx, rec); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
