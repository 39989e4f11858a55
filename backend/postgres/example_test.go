package postgres_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/postgres"
)

// The usual setup: one pool, Migrate at start-up (idempotent, safe from
// every replica at once), one Store, one lease.Client on it.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	opts := postgres.Options{Schema: "lease"}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the client: LIFO
	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
}

// A write that commits only if the lease is still held: the check and the
// write are in one transaction, and a successor's acquisition waits for it.
func ExampleStore_Fence() {
	var (
		ctx   context.Context
		pool  *pgxpool.Pool
		store *postgres.Store
		h     *lease.Handle // a held lease
	)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := store.Fence(ctx, tx, h.Snapshot()); err != nil {
			return err // lease.ErrStaleOwner: the lease is gone
		}
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 10 WHERE id = 1`)
		return err
	})
	if errors.Is(err, lease.ErrStaleOwner) {
		log.Print("lost the lease: nothing written")
	}
}

// A resource that remembers the highest token it accepted refuses a
// paused former holder even long after its lease expired.
func ExampleStore_FencedWrite() {
	var (
		ctx   context.Context
		pool  *pgxpool.Pool
		store *postgres.Store
		h     *lease.Handle // a held lease
	)
	err := store.FencedWrite(ctx, pool, "reports/2026-11", h.Token(), nil, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO reports (month, body) VALUES ('2026-11', 'done')`)
		return err
	})
	if errors.Is(err, lease.ErrStaleOwner) {
		log.Print("a newer holder already wrote: refused")
	}
}
