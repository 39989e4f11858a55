package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// wantConfig checks that err is ErrBackendUnavailable (only), that its
// message ends with detail and holds none of secrets, and that errors.As
// reaches the server's *pgconn.PgError with SQLSTATE code.
func wantConfig(t *testing.T, what string, err error, detail, code string, secrets ...string) {
	t.Helper()
	wantKind(t, what, err, leaseapi.ErrBackendUnavailable)
	if !strings.HasSuffix(err.Error(), ": "+detail) {
		t.Errorf("%s: message %q, want it to end with %q", what, err, detail)
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s: message %q reveals %q", what, err, s)
		}
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Errorf("%s: errors.As does not reach a *pgconn.PgError", what)
	} else if pgErr.Code != code {
		t.Errorf("%s: SQLSTATE %s, want %s", what, pgErr.Code, code)
	}
}

// TestConfigurationErrors: a wrong password, an unknown role, a database
// that does not exist and a role without privileges are configuration
// failures, told apart from outages in the message, with the server's
// error reachable by errors.As; nothing leaks the role, the password or the
// database name. The server is a private one whose pg_hba.conf asks every
// role but the superuser for a password.
func TestConfigurationErrors(t *testing.T) {
	t.Parallel()
	dbURL(t) // skips (or fails) as the other server tests do
	srv, err := testserver.StartPostgres(testserver.PostgresOptions{})
	if err != nil {
		t.Fatalf("private server: %v", err)
	}
	t.Cleanup(srv.Stop)
	admin := newPool(t, srv.URL())
	ctx := t.Context()
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(srv.Dir(), "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	var reloaded bool
	if err := admin.QueryRow(ctx, "SELECT pg_reload_conf()").Scan(&reloaded); err != nil || !reloaded {
		t.Fatalf("reload: %v", err)
	}
	opts := postgres.Options{Schema: "cfg"}
	if err := postgres.Migrate(ctx, admin, opts); err != nil {
		t.Fatal(err)
	}
	const role, password = "lease_secret_role", "right-secret-pw"
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'",
		"GRANT USAGE ON SCHEMA cfg TO " + role,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	k := leaseapi.MustKey("cfg", "k")
	try := func(t *testing.T, tweak func(*pgconn.Config)) error {
		t.Helper()
		c := cfg.Copy()
		tweak(&c.ConnConfig.Config)
		pool, err := pgxpool.NewWithConfig(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		s, err := postgres.New(pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = s.TryAcquire(cctx, k, "owner", time.Minute)
		return err
	}
	secrets := []string{role, password, "nosuchdb", "wrong-secret-pw", "cfg"}

	// Wait for the reload to take effect: a password is asked for once it did.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := try(t, func(c *pgconn.Config) { c.User, c.Password = role, "wrong-secret-pw" })
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "28P01" {
			wantConfig(t, "wrong password", err, "configuration: authentication failed", "28P01", secrets...)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wrong password: got %v, want authentication failed (28P01)", err)
		}
		time.Sleep(20 * time.Millisecond) // pacing the wait for the server's reload
	}
	err = try(t, func(c *pgconn.Config) { c.User, c.Password = "lease_no_such_role", "x" })
	wantConfig(t, "unknown role", err, "configuration: authentication failed", "28P01", secrets...)
	err = try(t, func(c *pgconn.Config) { c.Database = "nosuchdb" })
	wantConfig(t, "no such database", err, "configuration: database does not exist", "3D000", secrets...)
	err = try(t, func(c *pgconn.Config) { c.User, c.Password = role, password })
	wantConfig(t, "no privilege on the lease table", err, "configuration: permission denied", "42501", secrets...)

	// The same role, granted what the Store needs, works.
	if _, err := admin.Exec(ctx, "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA cfg TO "+role); err != nil {
		t.Fatal(err)
	}
	if err := try(t, func(c *pgconn.Config) { c.User, c.Password = role, password }); err != nil {
		t.Fatalf("with the privileges granted: %v", err)
	}
	// A privilege revoked after the Store checked the schema is reported by
	// the operation itself.
	pool := newPool(t, srv.URL(), func(c *pgxpool.Config) { c.ConnConfig.User, c.ConnConfig.Password = role, password })
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.TryAcquire(ctx, leaseapi.MustKey("cfg", "revoked"), "owner", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "REVOKE UPDATE ON ALL TABLES IN SCHEMA cfg FROM "+role); err != nil {
		t.Fatal(err)
	}
	_, err = s.Renew(ctx, rec, time.Minute)
	wantConfig(t, "renew after REVOKE UPDATE", err, "configuration: permission denied", "42501", secrets...)
}

// olderSchema migrates a fresh schema, undoes version v on its lease
// table by hand (ALTER TABLE ... alter) and forgets v in the version table,
// as a schema migrated by a release before v is; it returns a pool, the
// options and a Store on them.
func olderSchema(t *testing.T, v int, alter string) (*pgxpool.Pool, postgres.Options, *postgres.Store) {
	t.Helper()
	url := dbURL(t)
	pool := newPool(t, url)
	opts := postgres.Options{Schema: randomSchema(t, url)}
	ctx := t.Context()
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	if tokenCheck(t, pool, opts) {
		t.Fatal("Migrate left the token CHECK constraint")
	}
	tbl := pgx.Identifier{opts.Schema, postgres.DefaultTable}.Sanitize()
	vt := pgx.Identifier{opts.Schema, "lease_migrations"}.Sanitize()
	if _, err := pool.Exec(ctx, "ALTER TABLE "+tbl+" "+alter+"; DELETE FROM "+vt+" WHERE version = "+fmt.Sprint(v)); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return pool, opts, s
}

// TestSchemaOutOfDate: a lease table without the latest migration (here
// version 3's waiter mark, as a schema migrated by an older release has)
// is reported before any operation, with the fix; Migrate brings it up and
// the Store then works.
func TestSchemaOutOfDate(t *testing.T) {
	t.Parallel()
	pool, opts, s := olderSchema(t, 3, "DROP COLUMN waiting")
	ctx := t.Context()
	k := leaseapi.MustKey("old", "k")
	_, _, err := s.Inspect(ctx, k) // a read that would not need the column
	wantConfig(t, "Inspect on an old schema", err, "configuration: schema out of date: run postgres.Migrate", "42703", opts.Schema)
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, k, "owner", time.Minute); err != nil {
		t.Fatalf("TryAcquire after Migrate: %v", err)
	}
}

// TestMigrateDropsTokenCheck: a lease table migrated by an older release
// (up to version 3, with version 1's CHECK (token > 0)) loses the check
// when Migrate applies version 4, and keeps its rows and tokens.
func TestMigrateDropsTokenCheck(t *testing.T) {
	t.Parallel()
	pool, opts, s := olderSchema(t, 4, "ADD CHECK (token > 0)")
	ctx := t.Context()
	k := leaseapi.MustKey("old", "check")
	rec, err := s.TryAcquire(ctx, k, "owner", time.Minute) // version 3 works as it is
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	if tokenCheck(t, pool, opts) {
		t.Fatal("Migrate from version 3 left the token CHECK constraint")
	}
	if got, held, err := s.Inspect(ctx, k); err != nil || !held || got.Token != rec.Token {
		t.Fatalf("the grant across Migrate: got %v held %v (%v), want token %d held", got, held, err, rec.Token)
	}
}

// TestMigrateAfterTableDropped: Migrate notices that a table it recorded as
// migrated is gone and says so (re-creating it would restart the tokens),
// changing nothing; the Store reports the missing table.
func TestMigrateAfterTableDropped(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	for _, table := range []string{postgres.DefaultTable, postgres.DefaultFenceTable} {
		opts := postgres.Options{Schema: randomSchema(t, url)}
		ctx := t.Context()
		if err := postgres.Migrate(ctx, pool, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{opts.Schema, table}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		err := postgres.Migrate(ctx, pool, opts)
		wantKind(t, "Migrate after DROP TABLE "+table, err, leaseapi.ErrBackendUnavailable)
		if !strings.HasSuffix(err.Error(), ": configuration: table dropped after migration: see postgres.Migrate") {
			t.Errorf("Migrate after DROP TABLE %s: %q, want it to say the table was dropped", table, err)
		}
		var exists bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{opts.Schema, table}.Sanitize()).Scan(&exists); err != nil || exists {
			t.Fatalf("Migrate re-created the dropped %s (%v)", table, err)
		}
		if table == postgres.DefaultTable {
			s, err := postgres.New(pool, opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.TryAcquire(ctx, leaseapi.MustKey("dropped", "k"), "owner", time.Minute)
			wantConfig(t, "TryAcquire on the dropped table", err, "configuration: schema missing: run postgres.Migrate", "42P01", opts.Schema)
		}
	}
}
