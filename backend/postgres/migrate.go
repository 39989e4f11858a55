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
	"testing/fstest"
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

// rollbackFiles are the down migrations, one per version with the same
// name as its up file; [MigrationFS] renders them, Migrate never runs them.
//
//go:embed rollback/*.sql
var rollbackFiles embed.FS

// Migrations returns the embedded migration templates. Each file is named
// NNNN_description.sql (NNNN the version) and is a text/template whose only
// fields are {{.Schema}}, {{.Table}} and {{.Fences}}: substitute the quoted
// identifiers (e.g. "lease", "leases", "fences") before applying. [Migrate]
// does exactly that, with the validated names of its Options, and
// [MigrationFS] renders them for the usual migration tools.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil { // unreachable: the directory is embedded
		return migrationFiles
	}
	return sub
}

// migration is one parsed, rendered migration file: its up statements
// and those of its rollback file.
type migration struct {
	version int
	name    string
	sql     string
	down    string
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
		up, err := render(migrationFiles, "migrations/"+name, data)
		if err != nil {
			return nil, err
		}
		down, err := render(rollbackFiles, "rollback/"+name, data)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: strings.TrimSuffix(name, ".sql"), sql: up, down: down})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("duplicate migration version")
		}
	}
	return out, nil
}

// Layout is the file layout of a migration tool, for [MigrationFS].
type Layout int

// The layouts MigrationFS renders. Every layout holds the same SQL as
// [Migrate] applies, with the identifiers of the given Options substituted,
// and the same version numbers (0001, 0002, ...).
const (
	// Goose is github.com/pressly/goose's SQL layout: NNNN_name.sql with
	// "-- +goose Up" and "-- +goose Down" sections.
	Goose Layout = iota + 1
	// GolangMigrate is github.com/golang-migrate/migrate's layout: a
	// NNNN_name.up.sql and a NNNN_name.down.sql per version.
	GolangMigrate
	// Plain is one NNNN_name.sql file of up statements per version, for
	// tools that apply plain versioned files in name order (atlas's
	// versioned migrations read them; run "atlas migrate hash" on the
	// directory to create its atlas.sum).
	Plain
)

// MigrationFS renders the migrations for the tables named by o in layout
// l (version 1 also creates the schema if missing), as a read-only file
// system of files at its root, for goose
// (goose.SetBaseFS, or goose.NewProvider), golang-migrate (source/iofs) or
// a copy into an atlas migration directory. Apply them to a database that
// [Migrate] never touched, or keep using one tool: Migrate's version table
// knows nothing of the tool's. The rendered statements are idempotent (IF
// NOT EXISTS, or a look at the catalog first), so a schema migrated by one
// can be brought up by the other.
//
// The down migrations drop only what carries no lease state (the waiter
// mark's column; the down of version 4 adds the token check back). Those
// of the lease and fence tables refuse, with an
// error raised by the server: dropping the lease table loses every key's
// token history (tokens would start again at 1 and could be handed out a
// second time), and dropping the fence table forgets the tokens the
// protected resources have accepted. Drop them by hand if that is what you
// want.
//
// An invalid o or an unknown layout is leaseapi.ErrInvalidState.
func MigrationFS(o Options, l Layout) (fs.FS, error) {
	const op = "migration fs"
	n, err := o.names()
	if err != nil {
		return nil, leaseapi.Wrap(err, op)
	}
	ms, err := loadMigrations(n)
	if err != nil {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "bad embedded migration")
	}
	files := fstest.MapFS{}
	add := func(name, text string) { files[name] = &fstest.MapFile{Data: []byte(text), Mode: 0o444} }
	// The tools create no schema (Migrate does, before its migrations):
	// version 1 does.
	ms[0].sql = "CREATE SCHEMA IF NOT EXISTS " + n.qSchema + ";\n" + ms[0].sql
	for _, m := range ms {
		switch l {
		case Goose:
			add(m.name+".sql", "-- +goose Up\n-- +goose StatementBegin\n"+m.sql+"\n-- +goose StatementEnd\n\n-- +goose Down\n-- +goose StatementBegin\n"+m.down+"\n-- +goose StatementEnd\n")
		case GolangMigrate:
			add(m.name+".up.sql", m.sql)
			add(m.name+".down.sql", m.down)
		case Plain:
			add(m.name+".sql", m.sql)
		default:
			return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "unknown layout")
		}
	}
	return files, nil
}

// render executes the template file name of fsys with data.
func render(fsys embed.FS, name string, data any) (string, error) {
	raw, err := fsys.ReadFile(name)
	if err != nil {
		return "", err
	}
	tmpl, err := template.New(name).Option("missingkey=error").Parse(string(raw))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
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
// recorded. Migrations never drop lease state (version 4 drops only a
// CHECK constraint the Store's writes never violate). If a version
// is recorded but its table was dropped since, Migrate changes nothing and
// returns leaseapi.ErrBackendUnavailable with the detail "configuration:
// table dropped after migration": re-creating it would restart the keys'
// tokens at 1 (or forget the tokens the resources accepted), so a token
// could be handed out twice. To start over knowingly, once nothing fenced
// with the old tokens remains, drop the schema's lease_migrations rows of
// the target (or the whole schema) and run Migrate again. On an
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
	// A version recorded as applied whose table is gone (dropped by hand)
	// is not re-created silently: the lease table held every key's token
	// history and the fence table the tokens resources accepted, and a
	// fresh one would let old tokens be handed out or accepted again.
	var hasTable, hasFences bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1::text) IS NOT NULL, to_regclass($2::text) IS NOT NULL`, n.qTable, n.qFences).Scan(&hasTable, &hasFences); err != nil {
		return fail(err)
	}
	if applied[1] && !hasTable || applied[2] && !hasFences {
		return leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, detailDropped)
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
