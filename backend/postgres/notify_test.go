package postgres_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// TestReleaseNotifyLatency measures the hand-off: the time from sending a
// Release to the wake-up of a watcher on another Store, through the
// server's NOTIFY. Each cycle is what a waiting Acquire does: the watcher's
// contended attempt sets the waiter mark, and the holder's release then
// notifies.
func TestReleaseNotifyLatency(t *testing.T) {
	t.Parallel()
	url := dbURL(t)
	pool := newPool(t, url)
	s, opts := newStore(t, url, pool)
	holder, err := postgres.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	k := leaseapi.MustKey("notify", "k")
	ch, stop := s.WatchRelease(k)
	defer stop()
	cycle := func() time.Time {
		t.Helper()
		rec, err := holder.TryAcquire(ctx, k, "owner", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.TryAcquire(ctx, k, "waiter", time.Minute); !errors.Is(err, leaseapi.ErrContended) {
			t.Fatalf("the watcher's attempt: got %v, want ErrContended", err)
		}
		sent := time.Now()
		if err := holder.Release(ctx, rec); err != nil {
			t.Fatal(err)
		}
		return sent
	}
	wait := func() time.Time {
		t.Helper()
		select {
		case <-ch:
			return time.Now()
		case <-time.After(5 * time.Second):
			t.Fatal("no release notification within 5s")
			return time.Time{}
		}
	}
	// The first wake proves the listener is LISTENing (it may come from the
	// sweep after connecting).
	cycle()
	wait()
	select { // drop a second wake (sweep and NOTIFY both delivered)
	case <-ch:
	case <-time.After(50 * time.Millisecond):
	}
	var lat []time.Duration
	for range 20 {
		sent := cycle()
		lat = append(lat, wait().Sub(sent))
	}
	slices.Sort(lat)
	median, worst := lat[len(lat)/2], lat[len(lat)-1]
	t.Logf("release -> wake: median %v, max %v (20 hand-offs)", median, worst)
	if median > 100*time.Millisecond {
		t.Fatalf("release -> wake median %v, want well under 100ms", median)
	}
	// A watch that was stopped is never woken, and Close stops everything.
	stop()
	cycle()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ch2, stop2 := s.WatchRelease(k) // after Close: registers nothing
	defer stop2()
	cycle()
	select {
	case <-ch2:
		t.Fatal("a watch registered after Close was woken")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestSweepWakesReleasedWatchedKey: a release committed before the listener
// LISTENs is not lost; the sweep after connecting wakes the key's watcher,
// and not the watcher of a key that was never released.
func TestSweepWakesReleasedWatchedKey(t *testing.T) {
	t.Parallel()
	s := freshStore(t)
	k := leaseapi.MustKey("sweep", "released")
	rec, err := s.TryAcquire(t.Context(), k, "owner", time.Minute)
	if err == nil {
		err = s.Release(t.Context(), rec) // no watcher, no listener yet
	}
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := s.WatchRelease(k) // registered before the listener it starts
	defer stop()
	chOther, stopOther := s.WatchRelease(leaseapi.MustKey("sweep", "never-acquired"))
	defer stopOther()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher of a released key: no wake-up from the sweep within 10s")
	}
	select {
	case <-chOther:
		t.Fatal("the watcher of a key never acquired was woken, want no wake-up")
	default:
	}
}
