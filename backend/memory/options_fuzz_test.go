package memory_test

import (
	"math"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
)

// instantClock reads one instant; a nil *instantClock panics.
type instantClock struct{ t time.Time }

func (c *instantClock) Now() time.Time { return c.t }

// FuzzNew feeds New a nil Clock, a typed-nil one, or a clock fixed at any
// instant, then acquires with any TTL. Nothing may panic. A typed-nil
// clock is rejected with ErrInvalidState only; every other Options is
// accepted, and a grant it makes is a valid record acquired at the
// clock's instant, never longer than the TTL asked and never ending before
// it starts. A failed acquisition matches exactly one sentinel. The seeds
// run with every go test; the long tier runs, for instance:
//
//	go test -run '^$' -fuzz '^FuzzNew$' -fuzztime 30s ./backend/memory
func FuzzNew(f *testing.F) {
	for _, s := range []struct {
		kind      uint8
		sec, nsec int64
		ttl       int64
	}{
		{0, 0, 0, int64(time.Second)},
		{1, 1_764_000_000, 0, int64(time.Second)},
		{2, 0, 0, int64(time.Second)},
		{1, 0, 0, 0},
		{1, -62_135_596_800, 0, int64(time.Second)}, // year 1
		{1, math.MaxInt64, 999_999_999, int64(leaseapi.MaxTTL)},
		{1, math.MinInt64, 0, int64(leaseapi.MaxTTL)},
		{1, 1_764_000_000, -1, -1},
		{1, 1_764_000_000, 0, int64(leaseapi.MaxTTL) + 1},
	} {
		f.Add(s.kind, s.sec, s.nsec, s.ttl)
	}
	_, fixedErr := memory.New(memory.Options{Clock: (*instantClock)(nil)})
	fixed := backendtest.Messages(fixedErr)
	key := leaseapi.MustKey("fuzz", "k")
	const owner = "fuzz-owner-0123456789abcdef"
	f.Fuzz(func(t *testing.T, kind uint8, sec, nsec, ttl int64) {
		var o memory.Options
		var now time.Time
		switch kind % 3 {
		case 1:
			now = time.Unix(sec, nsec)
			o.Clock = &instantClock{t: now}
		case 2:
			o.Clock = (*instantClock)(nil)
		}
		s, err := memory.New(o)
		if kind%3 == 2 {
			if s != nil {
				t.Fatalf("New(typed-nil clock) returned a store with error %v", err)
			}
			backendtest.WantRejected(t, "New", err, fixed)
			return
		}
		if err != nil || s == nil {
			t.Fatalf("New(%+v): %v", o, err)
		}
		rec, err := s.TryAcquire(t.Context(), key, owner, time.Duration(ttl))
		if err != nil {
			if k := leaseapi.Kind(err); k == nil {
				t.Fatalf("TryAcquire: %v matches no sentinel", err)
			}
			return
		}
		if err := rec.Check(); err != nil {
			t.Fatalf("TryAcquire granted an invalid record: %v", err)
		}
		if kind%3 == 1 && !rec.AcquiredAt.Equal(now) {
			t.Fatalf("AcquiredAt %v, want the clock's %v", rec.AcquiredAt, now)
		}
		if g := rec.GrantedTTL(); g < 0 || g > time.Duration(ttl) {
			t.Fatalf("granted TTL %v for %v asked (acquired %v, expires %v)", g, time.Duration(ttl), rec.AcquiredAt, rec.ExpiresAt)
		}
	})
}
