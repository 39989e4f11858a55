package faultproxy

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasekit/lease/internal/testserver"
)

// TestCutAgainstPostgres: a committed INSERT whose reply is lost reports an
// error to the client, and the row is there.
func TestCutAgainstPostgres(t *testing.T) {
	t.Parallel()
	srv, p := postgresViaProxy(t)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URLVia(p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE fence (token bigint)"); err != nil {
		t.Fatal(err)
	}

	done := p.CutAfterRequest()
	if _, err := conn.Exec(ctx, "INSERT INTO fence VALUES (7)"); err == nil {
		t.Fatal("INSERT through the cut reported success")
	}
	waitChan(t, done, "the cut")

	direct, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM fence WHERE token = 7").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("rows after the cut = %d; want 1: the INSERT must have committed", n)
	}
}

// postgresViaProxy starts a private PostgreSQL server (or skips, see
// testserver.SkipReason) and a proxy in front of it.
func postgresViaProxy(t *testing.T) (*testserver.PostgresServer, *Proxy) {
	t.Helper()
	srv, err := testserver.StartPostgres(testserver.PostgresOptions{})
	if skip := testserver.SkipReason("postgres", testserver.EnvPostgresURL, err); skip != "" {
		t.Skip(skip)
	}
	t.Cleanup(srv.Stop)
	return srv, newProxy(t, srv.Addr())
}
