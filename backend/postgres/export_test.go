package postgres

import (
	"context"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// Statements exposes the SQL of the hot path to the benchmarks, so that the
// raw-pgx baseline runs exactly the statements the Store runs.
func (s *Store) Statements() (acquire, release, channel string) {
	return s.q.acquire, s.q.release, s.channel
}

// KeyHash exposes the NOTIFY payload of a key.
var KeyHash = keyHash

// Classify exposes classify to the table test.
var Classify = classify

// SchemaOf returns the store's schema name.
func SchemaOf(s *Store) string { return s.n.schema }

// WithBudget returns a view of s whose mutations send the not-after budget b
// whatever their ctx says, so that a test can make a statement late while
// its caller still waits for the answer.
func WithBudget(s *Store, b time.Duration) *FixedBudget {
	return &FixedBudget{s: s, b: b.Microseconds()}
}

// FixedBudget is the view of s that [WithBudget] returns.
type FixedBudget struct {
	s *Store
	b int64
}

func (w *FixedBudget) bound(_ context.Context, dst *notAfter) *notAfter {
	*dst = notAfter(w.b)
	return dst
}

func (w *FixedBudget) TryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	return w.s.tryAcquire(ctx, key, owner, ttl, w.bound)
}

func (w *FixedBudget) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	return w.s.renew(ctx, rec, ttl, w.bound)
}

func (w *FixedBudget) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	return w.s.renewBatch(ctx, reqs, w.bound)
}

// AcquireResult and RenewResult expose the interpretation of the
// statements' rows to the classification test.
var (
	AcquireResult = acquireResult
	RenewResult   = renewResult
)

// SQL returns every statement s runs, in a fixed order, so that a test can
// see where its identifiers appear.
func SQL(s *Store) []string {
	q := s.q
	return []string{q.acquire, q.acquireMark, q.renew, q.validate, q.release, q.released, q.inspect, q.renewBatch, q.fence, q.advance, q.sweep, q.check}
}

// MaxIdleWatches exposes maxIdleGroups to the test that bounds the watched
// contexts.
const MaxIdleWatches = maxIdleGroups

// Watches is the number of Done channels s watches.
func Watches(s *Store) int {
	s.calls.mu.Lock()
	defer s.calls.mu.Unlock()
	return len(s.calls.groups)
}
