package runtime

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

func TestHistogramBuckets(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{0, 5 * time.Microsecond, 5*time.Microsecond + 1, time.Minute, time.Minute + 1, time.Hour} {
		h.observe(d)
	}
	s := h.snapshot()
	want := map[int]uint64{0: 2, 1: 1, len(durationBounds) - 1: 1, len(durationBounds): 2}
	for i, c := range s.Counts {
		if c != want[i] {
			t.Errorf("bucket %d: got %d, want %d", i, c, want[i])
		}
	}
	if s.Count() != 6 {
		t.Errorf("count: got %d, want 6", s.Count())
	}
	if wantSum := 2*time.Minute + time.Hour + 10*time.Microsecond + 2; s.Sum != wantSum {
		t.Errorf("sum: got %v, want %v", s.Sum, wantSum)
	}
	for i := 1; i < len(durationBounds); i++ {
		if durationBounds[i] <= durationBounds[i-1] {
			t.Fatalf("bounds not increasing at %d", i)
		}
	}
}

// TestKindIndexCoversEverySentinel: every sentinel has its own counter and
// its label is the outcome leaseapi reports for it.
func TestKindIndexCoversEverySentinel(t *testing.T) {
	seen := map[int]bool{}
	for i, k := range kinds {
		err := error(nil)
		if k != nil {
			err = leaseapi.NewError("op", k, "")
		}
		if got := kindIndex(err); got != i {
			t.Errorf("kindIndex(%v): got %d, want %d", err, got, i)
		}
		if outcomeAt(i) != leaseapi.OutcomeOf(err) {
			t.Errorf("outcomeAt(%d): got %v, want %v", i, outcomeAt(i), leaseapi.OutcomeOf(err))
		}
		seen[i] = true
	}
	if got := kindIndex(errors.New("raw")); kinds[got] != leaseapi.ErrBackendUnavailable {
		t.Errorf("unclassified error: got %v, want ErrBackendUnavailable", kinds[got])
	}
}

func TestLossCause(t *testing.T) {
	e := func(k error) error { return leaseapi.NewError("op", k, "") }
	for _, tc := range []struct {
		name           string
		to             leaseapi.State
		cause, pending error
		want           LossCause
	}{
		{"stale", leaseapi.StateLost, e(leaseapi.ErrStaleOwner), nil, LossStale},
		{"regression", leaseapi.StateLost, e(leaseapi.ErrFencingRegression), nil, LossRegression},
		{"closed", leaseapi.StateLost, e(leaseapi.ErrLost), nil, LossClosed},
		{"deadline from active", leaseapi.StateExpired, e(leaseapi.ErrLost), nil, LossExpired},
		{"deadline while unavailable", leaseapi.StateExpired, e(leaseapi.ErrLost), e(leaseapi.ErrBackendUnavailable), LossUnavailable},
		{"deadline while ambiguous", leaseapi.StateExpired, e(leaseapi.ErrLost), e(leaseapi.ErrAmbiguousOutcome), LossAmbiguous},
		{"released", leaseapi.StateReleased, nil, nil, 0},
		{"uncertain", leaseapi.StateUncertain, e(leaseapi.ErrAmbiguousOutcome), nil, 0},
	} {
		if got := lossCause(tc.to, tc.cause, tc.pending); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStateQueueDropsWhenFullAndSurvivesPanics: a blocked hook makes
// further changes queue up to the bound and then drop (counted); a
// panicking hook loses its event only; changes arrive in order.
func TestStateQueueDropsWhenFullAndSurvivesPanics(t *testing.T) {
	m := new(clientMetrics)
	h, err := NewKeyHasher([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	entered := make(chan struct{})
	var mu sync.Mutex
	var got []leaseapi.Token
	q := newStateQueue(func(sc StateChange) {
		if sc.Token == 1 {
			close(entered)
			<-block
		}
		if sc.Token == 2 {
			panic("hook bug")
		}
		mu.Lock()
		got = append(got, sc.Token)
		mu.Unlock()
	}, h, m)
	k := leaseapi.MustKey("q", "k")
	q.push(k, StateChange{Token: 1})
	<-entered
	for i := range stateQueueSize + 5 {
		q.push(k, StateChange{Token: leaseapi.Token(i + 2)})
	}
	close(block)
	q.wait()
	if d := m.eventDropped.n.Load(); d != 5+1 {
		t.Fatalf("dropped: got %d, want 6 (5 over the bound, 1 panic)", d)
	}
	if len(got) != stateQueueSize {
		t.Fatalf("delivered: got %d, want %d", len(got), stateQueueSize)
	}
	for i, tok := range got {
		want := leaseapi.Token(1)
		if i > 0 {
			want = leaseapi.Token(i + 2)
		}
		if tok != want {
			t.Fatalf("order: event %d has token %d, want %d", i, tok, want)
		}
	}
}

func TestKeyHasher(t *testing.T) {
	if _, err := NewKeyHasher([]byte("short")); leaseapi.Kind(err) != leaseapi.ErrInvalidState {
		t.Fatalf("short secret: got %v, want ErrInvalidState", err)
	}
	a, _ := NewKeyHasher([]byte("fleet-secret-0123456789"))
	b, _ := NewKeyHasher([]byte("fleet-secret-0123456789"))
	c, _ := NewKeyHasher([]byte("other-secret-0123456789"))
	k := leaseapi.MustKey("ns", "payroll")
	if a.Hash(k) != b.Hash(k) || len(a.Hash(k)) != 16 {
		t.Fatalf("same secret: got %q and %q, want one 16-digit hash", a.Hash(k), b.Hash(k))
	}
	if a.Hash(k) == c.Hash(k) || a.Hash(k) == a.Hash(leaseapi.MustKey("ns", "payroll2")) {
		t.Fatal("hash does not depend on secret and key")
	}
	var nilHasher *KeyHasher
	if nilHasher.Hash(k) != "" {
		t.Fatal("nil hasher: want empty hash")
	}
}

// TestBucketOfMatchesBounds: the bit-length lookup puts every duration in
// the bucket a search over the bounds finds, at each bound, one either
// side of it, at each power of two and one either side, and at the
// extremes; and the bounds grow by a factor of at least 2, which the
// lookup's single comparison relies on.
func TestBucketOfMatchesBounds(t *testing.T) {
	search := func(d time.Duration) int {
		i := 0
		for i < len(durationBounds) && d > durationBounds[i] {
			i++
		}
		return i
	}
	ds := []time.Duration{math.MinInt64, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64}
	for _, b := range durationBounds {
		ds = append(ds, b-1, b, b+1)
	}
	for n := range 63 {
		p := time.Duration(1) << n
		ds = append(ds, p-1, p, p+1)
	}
	for _, d := range ds {
		if got, want := bucketOf(d), search(d); got != want {
			t.Errorf("bucketOf(%d): got %d, want %d", d, got, want)
		}
	}
	for i := 1; i < len(durationBounds); i++ {
		if durationBounds[i] < 2*durationBounds[i-1] {
			t.Errorf("bound %v is less than twice %v", durationBounds[i], durationBounds[i-1])
		}
	}
}
