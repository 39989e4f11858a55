package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
)

// fixedClock is a backend clock that moves only when told to.
type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time { return c.now }

// The Store used directly, as a backend: what the client does under a
// Handle. Programs normally use it through lease.NewClient.
func Example() {
	ctx := context.Background()
	clk := &fixedClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	store, _ := memory.New(memory.Options{Clock: clk})
	key := leaseapi.MustKey("jobs", "nightly")

	rec, _ := store.TryAcquire(ctx, key, "owner-a", 10*time.Second)
	fmt.Println("token", rec.Token, "expires", rec.ExpiresAt.Format(time.TimeOnly))

	_, err := store.TryAcquire(ctx, key, "owner-b", 10*time.Second)
	fmt.Println("contended:", errors.Is(err, leaseapi.ErrContended))

	clk.now = clk.now.Add(4 * time.Second)
	rec, _ = store.Renew(ctx, rec, 10*time.Second)
	cur, _ := store.Validate(ctx, rec)
	fmt.Println("renewed, expires", cur.ExpiresAt.Format(time.TimeOnly))

	clk.now = clk.now.Add(11 * time.Second) // past the expiry: anyone may acquire
	next, _ := store.TryAcquire(ctx, key, "owner-b", 10*time.Second)
	fmt.Println("after expiry: token", next.Token)
	err = store.Release(ctx, rec)
	fmt.Println("stale release:", errors.Is(err, leaseapi.ErrStaleOwner))
	// Output:
	// token 1 expires 12:00:10
	// contended: true
	// renewed, expires 12:00:14
	// after expiry: token 2
	// stale release: true
}
