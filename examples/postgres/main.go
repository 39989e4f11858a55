// Command postgres shows the PostgreSQL backend end to end: migrate the
// schema, acquire a lease through the runtime, renew it, make a write that
// commits only if the lease is still held (Store.Fence inside the write's
// transaction), and release.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/postgres
//
// DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/test. The
// example uses the schema lease_example (created if missing).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/postgres"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/test"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "postgres example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = defaultURL
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()

	// 1. Migrate: idempotent, safe from many processes at once.
	opts := postgres.Options{Schema: "lease_example"}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lease_example.report_runs (
	id bigserial PRIMARY KEY, token bigint NOT NULL, note text NOT NULL)`); err != nil {
		return err
	}
	fmt.Println("migrated schema lease_example")

	store, err := postgres.New(pool, opts)
	if err != nil {
		return err
	}
	defer store.Close() // stops the LISTEN connection the runtime's Acquire may start

	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer client.Close(context.Background())

	// 2. Acquire (waiting up to 10s if another process holds the key).
	key, err := lease.NewKey("jobs", "nightly-report")
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:   5 * time.Second,
		Wait:  10 * time.Second,
		Retry: 250 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	h, err := client.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	rec := h.Snapshot()
	fmt.Printf("acquired %s: token %d, server time %s, expires %s (TTL %s)\n",
		key, h.Token(), rec.AcquiredAt.Format(time.RFC3339Nano), rec.ExpiresAt.Format(time.RFC3339Nano), rec.GrantedTTL())

	// 3. Renew: same token, a new expiry from the server's clock.
	if err := h.Renew(ctx); err != nil {
		return err
	}
	fmt.Printf("renewed: expires %s, state %s\n", h.Snapshot().ExpiresAt.Format(time.RFC3339Nano), h.State())

	// 4. A fenced write: the lease check and the write commit together.
	if h.State() != lease.StateActive {
		return errors.New("lease not active")
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := store.Fence(ctx, tx, h.Snapshot()); err != nil {
			return err // ErrStaleOwner: the lease is gone, write nothing
		}
		_, err := tx.Exec(ctx, `INSERT INTO lease_example.report_runs (token, note) VALUES ($1, $2)`,
			int64(h.Token()), "report generated")
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("fenced write committed with token %d\n", h.Token())

	// 5. Release: the next waiter is woken through LISTEN/NOTIFY.
	if err := h.Release(ctx); err != nil {
		return err
	}
	fmt.Printf("released: state %s\n", h.State())
	_, held, err := store.Inspect(ctx, key)
	if err != nil {
		return err
	}
	fmt.Printf("inspect after release: held=%v\n", held)
	return nil
}
