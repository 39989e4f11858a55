// Command valkey shows the Valkey/Redis backend end to end: acquire a lease
// through the runtime, keep it with managed renewal, publish a cache value
// guarded by the lease (Store.Guard), and see the old holder's publication
// refused once the token has changed.
//
//	VALKEY_ADDR=127.0.0.1:6379 go run ./examples/valkey
//
// VALKEY_ADDR defaults to 127.0.0.1:6379 (Valkey 7.2+ or Redis 7+). The
// example uses the key prefix "lease-example" and the lease "reports/daily";
// run it twice and the tokens go on from where the last run left them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/valkey"
)

const defaultAddr = "127.0.0.1:6379"

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "valkey example:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := os.Getenv("VALKEY_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	vc, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer vc.Close()

	store, err := valkey.New(vc, valkey.Options{Prefix: "lease-example"})
	if err != nil {
		return err
	}
	defer store.Close() // stops the release subscription Acquire may start

	// Two runtime clients on one store stand for two processes.
	first, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer first.Close(context.Background())
	second, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer second.Close(context.Background())

	key, err := lease.NewKey("reports", "daily")
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:   time.Second,
		Wait:  5 * time.Second,
		Retry: 500 * time.Millisecond,
	})
	if err != nil {
		return err
	}

	// 1. Acquire, then keep the lease with managed renewal.
	h, err := first.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "acquired with token %d\n", h.Token())
	m, err := h.StartManaged(ctx)
	if err != nil {
		return err
	}
	time.Sleep(1500 * time.Millisecond) // longer than the TTL: renewal keeps it
	snap := h.Status()
	fmt.Fprintf(out, "after 1.5s: %v, renewed (expires %v after its last renewal)\n",
		snap.State, snap.Record.GrantedTTL())

	// 2. Publish a cache value guarded by the lease: written only while the
	// record is the key's live grant, atomically with the check.
	cacheKey, err := store.CacheKey(key, "summary")
	if err != nil {
		return err
	}
	if err := store.Guard(ctx, snap.Record, cacheKey, "summary from the first holder", time.Minute); err != nil {
		return err
	}
	fmt.Fprintln(out, "guarded write by the holder: accepted")

	// 3. The token changes: the first holder stops and releases, the second
	// takes over (woken at once by the release notification).
	if err := m.Stop(ctx); err != nil {
		return err
	}
	if err := h.Release(ctx); err != nil {
		return err
	}
	h2, err := second.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	defer h2.Release(context.Background())
	fmt.Fprintf(out, "second holder acquired with token %d\n", h2.Token())

	// 4. A late write by the first holder (a paused process waking up) is
	// refused and writes nothing; the new holder's write goes through.
	err = store.Guard(ctx, snap.Record, cacheKey, "late write from the first holder", time.Minute)
	if !errors.Is(err, lease.ErrStaleOwner) {
		return fmt.Errorf("stale guarded write: got %v, want ErrStaleOwner", err)
	}
	fmt.Fprintln(out, "guarded write by the old holder: refused (stale owner or token)")
	if err := store.Guard(ctx, h2.Snapshot(), cacheKey, "summary from the second holder", time.Minute); err != nil {
		return err
	}
	v, err := vc.Do(ctx, vc.B().Get().Key(cacheKey).Build()).ToString()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "cache now holds: %q\n", v)
	return nil
}
