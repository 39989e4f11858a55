// Command protectedwrite shows why a lease needs a fencing token, on
// PostgreSQL: two workers share one lease; worker A acquires it, then
// stalls (think of a long GC pause) with a write in flight; its lease
// expires and worker B takes over with a higher token and writes. When A
// resumes, its write carries the old token and the protected resource
// refuses it (Store.FencedWrite / Store.AdvanceFence: a per-resource
// high-water mark advanced in the write's own transaction). The program
// exits non-zero if the stale write were accepted.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/protectedwrite
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

// resource is the protected resource's name in the fence table.
const resource = "documents/42"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "protectedwrite:", err)
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
	opts := postgres.Options{Schema: "lease_example"}
	if err := postgres.Migrate(ctx, pool, opts); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lease_example.documents (
	id int PRIMARY KEY, body text NOT NULL, token bigint NOT NULL)`); err != nil {
		return err
	}
	store, err := postgres.New(pool, opts)
	if err != nil {
		return err
	}
	defer store.Close()

	// Two workers, each with its own client (as two processes would have).
	workerA, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer workerA.Close(context.Background())
	workerB, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer workerB.Close(context.Background())

	key, err := lease.NewKey("documents", "42")
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:   time.Second,
		Wait:  10 * time.Second,
		Retry: 100 * time.Millisecond,
	})
	if err != nil {
		return err
	}

	// write replaces the document, accepted only with a token at least as
	// high as the last one the document accepted.
	write := func(token lease.Token, body string) error {
		return store.FencedWrite(ctx, pool, resource, token, nil, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO lease_example.documents (id, body, token) VALUES (42, $1, $2)
ON CONFLICT (id) DO UPDATE SET body = excluded.body, token = excluded.token`, body, int64(token))
			return err
		})
	}

	a, err := workerA.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	fmt.Printf("worker A acquired the lease with token %d\n", a.Token())
	if err := write(a.Token(), "draft by A"); err != nil {
		return err
	}
	fmt.Printf("worker A wrote with token %d\n", a.Token())
	aToken := a.Token()
	fmt.Println("worker A stalls with its next write in flight (no renewals)...")

	// Worker B waits for the key: A's lease expires after its TTL.
	b, err := workerB.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	fmt.Printf("worker B acquired the lease after A's expired, with token %d\n", b.Token())
	if err := write(b.Token(), "final by B"); err != nil {
		return err
	}
	fmt.Printf("worker B wrote with token %d\n", b.Token())

	// Worker A resumes: its lease is long gone, but its write was already
	// on its way. The resource refuses it.
	fmt.Printf("worker A resumes; its handle says %s\n", a.State())
	err = write(aToken, "late overwrite by A")
	switch {
	case errors.Is(err, lease.ErrStaleOwner):
		fmt.Printf("worker A's late write with token %d was refused: %v\n", aToken, err)
	case err == nil:
		return errors.New("a stale write was accepted")
	default:
		return err
	}

	var body string
	var tok int64
	if err := pool.QueryRow(ctx, `SELECT body, token FROM lease_example.documents WHERE id = 42`).Scan(&body, &tok); err != nil {
		return err
	}
	fmt.Printf("document 42: %q (token %d)\n", body, tok)
	if err := b.Release(ctx); err != nil {
		return err
	}
	fmt.Println("worker B released the lease")
	return nil
}
