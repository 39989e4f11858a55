package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// pairAllocsOverFloor is what a Store pair (TryAcquire + Release) may
// allocate beyond the floor's pair (the minimal statements sent bare
// through the same pool), both measured here (18 and 14 when this was
// set): the key's text built once more (Key.String, per statement), and
// the scan plans of the acquire's columns (acquired_at, the late flag).
// The release sends the floor's arguments plus the NOTIFY channel (boxed
// once per Store) and, as the floor's, returns no row; the acquire reads
// no expires_at (the client adds the TTL). A new argument, column or
// per-call copy fails this test.
const pairAllocsOverFloor = 4

// TestPairAllocsNearTheFloor guards the Store's client-side cost on the
// hot path: allocations per acquire+release pair, against the floor's in
// the same process, serially (no pool waits).
func TestPairAllocsNearTheFloor(t *testing.T) {
	url := dbURL(t)
	pool := newPool(t, url)
	s, _ := newStore(t, url, pool)
	floor := floorPair(t, s, pool)
	store := storePair(s)
	measure := pairAllocs(t, context.Background())
	f, st := measure("floor", floor), measure("store", store)
	t.Logf("allocations per pair: floor %.0f, store %.0f", f, st)
	if st > f+pairAllocsOverFloor {
		t.Fatalf("a Store pair allocates %.0f times, the floor's %.0f: more than %d over the floor", st, f, pairAllocsOverFloor)
	}
}

// TestPairAllocsUnderADeadline: a Store pair under a ctx that can end (a
// deadline, shared by many calls, as the runtime's calls are, see
// internal/callctx) allocates no more than under context.Background. pgx
// would arm its context watcher for every statement of it (a channel,
// a context.AfterFunc, two closures), and the not-after parameter would
// be boxed: 28 allocations per pair against 18 before calls.go. The Store
// carries the deadline to the socket and watches each Done channel once
// for all its calls, and the not-after parameter has a slot of its own.
func TestPairAllocsUnderADeadline(t *testing.T) {
	url := dbURL(t)
	s, _ := newStore(t, url, newPool(t, url))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	bg := pairAllocs(t, context.Background())("background", storePair(s))
	dl := pairAllocs(t, ctx)("deadline", storePair(s))
	t.Logf("allocations per Store pair: context.Background %.0f, a shared ctx with a deadline %.0f", bg, dl)
	if dl > bg {
		t.Fatalf("a Store pair under a ctx with a deadline allocates %.0f times, under context.Background %.0f", dl, bg)
	}
}

// pairAllocs returns a measure of the allocations of one pair under ctx,
// serially, on keys built before.
func pairAllocs(t *testing.T, ctx context.Context) func(name string, pair func(context.Context, leaseapi.Key) error) float64 {
	return func(name string, pair func(context.Context, leaseapi.Key) error) float64 {
		t.Helper()
		i := 0
		var err error
		keys := make([]leaseapi.Key, 201) // built before: the key is the caller's
		for j := range keys {
			keys[j] = leaseapi.MustKey("allocs", fmt.Sprint(name, j))
		}
		n := testing.AllocsPerRun(200, func() {
			if e := pair(ctx, keys[i%len(keys)]); e != nil && err == nil {
				err = e
			}
			i++
		})
		if err != nil {
			t.Fatalf("%s pair: %v", name, err)
		}
		return n
	}
}
