package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/leaseapi"
)

// versionTable records the applied migrations in the configured schema: one
// row per (target, version), where target names the lease and fence tables
// the migration set was applied for.
const versionTable = "lease_migrations"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the embedded migration files, for users who run
// migrations with their own tool (goose, atlas, golang-migrate). Each file is
// named NNNN_description.sql (NNNN the version) and is a text/template whose
// only fields are {{.Schema}}, {{.Table}} and {{.Fences}}: substitute the
// quoted identifiers (e.g. "lease", "leases", "fences") before applying.
// [Migrate] does exactly that, with the validated names of its Options.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil { // unreachable: the directory is embedded
		return migrationFiles
	}
	return sub
}

// migration is one parsed, rendered migration file.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations parses and renders every embedded file with n's quoted
// identifiers, in version order.
func loadMigrations(n names) ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	data := struct{ Schema, Table, Fences string }{
		Schema: n.qSchema,
		Table:  pgx.Identifier{n.table}.Sanitize(),
		Fences: pgx.Identifier{n.fences}.Sanitize(),
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || path.Ext(name) != ".sql" {
			return nil, fmt.Errorf("bad migration file name")
		}
		raw, err := migrationFiles.ReadFile("migrations/" + name)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(name).Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, data); err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(name, ".sql"), sql: b.String()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("duplicate migration version")
		}
	}
	return out, nil
}

// lockID is the pg_advisory_xact_lock key serialising migrators of one
// schema (all targets in a schema share the version table).
func lockID(schema string) int64 {
	h := sha256.Sum256([]byte("github.com/leasekit/lease/backend/postgres migrate " + schema))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Migrate brings the tables named by o up to date: it creates the schema and
// the version table if missing, then applies, in one transaction, every embedded migration not
// yet recorded in the schema's version table (lease_migrations). It is
// idempotent (a second call is a no-op) and safe to run from many processes
// at once: the transaction holds a pg_advisory_xact_lock per schema, so
// exactly one migrator applies each version and the others then find it
// recorded. Migrations only create; nothing is ever dropped. On an
// up-to-date database it only reads, so a role without CREATE privilege can
// run it at every start.
//
// ctx bounds the whole call, including the wait for the lock. Errors: an
// invalid o, nil pool or nil ctx is leaseapi.ErrInvalidState; a failure
// before commit is leaseapi.ErrBackendUnavailable (nothing applied) or the
// context's error; a lost commit reply is leaseapi.ErrAmbiguousOutcome (run
// Migrate again: it is idempotent).
func Migrate(ctx context.Context, pool *pgxpool.Pool, o Options) error {
	const op = "migrate"
	if err := leaseapi.CheckContext(ctx, op); err != nil {
		return err
	}
	if pool == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil pool")
	}
	n, err := o.names()
	if err != nil {
		return leaseapi.Wrap(err, op)
	}
	ms, err := loadMigrations(n)
	if err != nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "bad embedded migration")
	}
	target := n.table + "/" + n.fences
	vt := pgx.Identifier{n.schema, versionTable}.Sanitize()

	tx, err := pool.Begin(ctx)
	if err != nil {
		return leaseapi.Wrap(classify(err, false), op)
	}
	defer rollback(ctx, tx) // a no-op after Commit
	fail := func(err error) error { return leaseapi.Wrap(classify(err, false), op) }

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::bigint)`, lockID(n.schema)); err != nil {
		return fail(err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1::text)`, n.schema).Scan(&exists); err != nil {
		return fail(err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+n.qSchema); err != nil {
			return fail(err)
		}
	}
	// Create the version table only if missing, so that an up-to-date
	// database needs no CREATE privilege.
	var hasVT bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1::text) IS NOT NULL`, vt).Scan(&hasVT); err != nil {
		return fail(err)
	}
	if !hasVT {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+vt+` (
	target     text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (target, version)
)`); err != nil {
			return fail(err)
		}
	}
	applied := make(map[int]bool)
	rows, err := tx.Query(ctx, `SELECT version FROM `+vt+` WHERE target = $1::text`, target)
	if err != nil {
		return fail(err)
	}
	var v int32
	if _, err := pgx.ForEachRow(rows, []any{&v}, func() error { applied[int(v)] = true; return nil }); err != nil {
		return fail(err)
	}
	todo := 0
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		todo++
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fail(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+vt+` (target, version, name) VALUES ($1::text, $2::integer, $3::text)`, target, m.version, m.name); err != nil {
			return fail(err)
		}
	}
	if todo == 0 {
		return nil // the deferred rollback releases the lock
	}
	if err := tx.Commit(ctx); err != nil {
		return leaseapi.Wrap(classify(err, true), op)
	}
	return nil
}
