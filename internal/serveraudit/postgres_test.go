package serveraudit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/serveraudit"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// auditedPostgres starts a private server, migrates schema "audit" and
// installs the audit trigger.
func auditedPostgres(t *testing.T) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	srv, err := testserver.StartPostgres(testserver.PostgresOptions{})
	need(t, "postgres", err)
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool, postgres.Options{Schema: "audit"}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if err := serveraudit.Install(ctx, pool, "audit", postgres.DefaultTable); err != nil {
		t.Fatalf("Install: %v", err)
	}
	s, err := postgres.New(pool, postgres.Options{Schema: "audit"})
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return pool, s
}

// TestReadPostgres runs a lease history on a real server and reads the
// trigger's audit: the grants (an INSERT, then UPDATEs raising the
// token, one over an expired grant), the renewal and the release, with
// the times the store returned; C1 and C4 are clean. A change that rolls
// back leaves no audit row.
func TestReadPostgres(t *testing.T) {
	pool, s := auditedPostgres(t)
	ctx := context.Background()
	k := leaseapi.MustKey("n", "k")
	calls := script(t, s, k, func(rec leaseapi.Record) bool { return time.Now().After(rec.ExpiresAt.Add(time.Millisecond)) })

	// A change that rolls back is not audited.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{"audit", postgres.DefaultTable}.Sanitize()
	if _, err := tx.Exec(ctx, "UPDATE "+table+" SET owner = 'thief' WHERE key = $1", k.String()); err != nil {
		t.Fatalf("update: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	l, err := serveraudit.ReadPostgres(ctx, pool, "audit")
	if err != nil {
		t.Fatalf("ReadPostgres: %v", err)
	}
	var kinds []string
	for _, r := range l.Records {
		kinds = append(kinds, string(r.Kind))
	}
	if got, want := strings.Join(kinds, " "), "grant renew release grant grant"; got != want {
		t.Fatalf("records %q, want %q (%+v)", got, want, l.Records)
	}
	if vs := l.Check(); len(vs) != 0 {
		t.Errorf("C1: %v", vs)
	}
	rep := serveraudit.Match(l, calls)
	if len(rep.Violations) != 0 || rep.Successes != len(calls) {
		t.Errorf("C4: %d of %d successes found, violations %v", rep.Successes, len(calls), rep.Violations)
	}
	for _, r := range l.Records {
		if r.Txn == 0 || r.At.IsZero() {
			t.Errorf("record %d without txid or time: %+v", r.Seq, r)
		}
	}
}

// TestReadPostgresDoctored: the same audit with a grant's token lowered,
// and with a row the library never writes (an owner changed in place),
// must fail C1.
func TestReadPostgresDoctored(t *testing.T) {
	pool, s := auditedPostgres(t)
	ctx := context.Background()
	k := leaseapi.MustKey("n", "k")
	script(t, s, k, func(rec leaseapi.Record) bool { return time.Now().After(rec.ExpiresAt.Add(time.Millisecond)) })
	audit := pgx.Identifier{"audit", serveraudit.AuditTable}.Sanitize()
	if _, err := pool.Exec(ctx, "UPDATE "+audit+" SET new_token = 1 WHERE new_token = 3 AND op = 'UPDATE' AND new_owner = 'o3'"); err != nil {
		t.Fatalf("doctor: %v", err)
	}
	l, err := serveraudit.ReadPostgres(ctx, pool, "audit")
	if err != nil {
		t.Fatalf("ReadPostgres: %v", err)
	}
	if vs := l.Check(); len(vs) == 0 || vs[0].Rule != "token-order" {
		t.Errorf("C1 with a lowered token: %v, want token-order", vs)
	}
	table := pgx.Identifier{"audit", postgres.DefaultTable}.Sanitize()
	if _, err := pool.Exec(ctx, "UPDATE "+table+" SET owner = 'thief' WHERE key = $1", k.String()); err != nil {
		t.Fatalf("update: %v", err)
	}
	if l, err = serveraudit.ReadPostgres(ctx, pool, "audit"); err != nil {
		t.Fatalf("ReadPostgres: %v", err)
	}
	found := false
	for _, v := range l.Check() {
		found = found || v.Rule == "unknown"
	}
	if !found {
		t.Errorf("C1 missed an owner changed in place: %v", l.Check())
	}
}
