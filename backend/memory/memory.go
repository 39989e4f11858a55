// Package memory is the in-process reference backend: deterministic, driven
// by an injectable clock, and never distributed. Use it in tests, in
// simulations and for locks within one process.
//
// # Guarantees
//
// Every operation is one critical section under the store's mutex, timed by
// the store's clock, with the semantics of [leaseapi.Backend], its
// not-after rule included (a mutation that gets the mutex only after its
// ctx ended changes nothing and returns the context's error). Tokens are
// per key, start at 1 and strictly increase with every acquisition; they
// survive release and expiry but not the Store (a new Store starts again at
// 1: it is not a durable fencing authority across processes). A key whose
// token reached 2^64-1 cannot be acquired again: TryAcquire fails closed
// with [leaseapi.ErrInvalidState] and grants nothing.
//
// A Store must be made by [New]: the zero Store and a nil *Store return
// [leaseapi.ErrInvalidState] from every operation.
//
// # What this package does not do
//
// It forgets nothing: every key ever acquired keeps a small entry (its last
// token) for the life of the Store, so the token history is never lost. A
// program that acquires unboundedly many distinct keys grows accordingly.
package memory

import (
	"context"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/leasekit/lease/internal/watchhub"
	"github.com/leasekit/lease/leaseapi"
)

// Options configures a [Store]. The zero value is valid.
type Options struct {
	// Clock is the store's clock: the "backend time" of every record. Nil
	// means the real clock. A simulated or skewed clock makes the store
	// deterministic or models a backend whose clock differs from the client's.
	Clock leaseapi.Clock
}

// Store is the memory backend; make one with [New]. It implements
// [leaseapi.Backend], [leaseapi.Inspector], [leaseapi.ReleaseWatcher] and
// [leaseapi.BatchRenewer], and claims them ([Store.Capabilities]). It is
// safe for concurrent use and starts no goroutine, so it needs no Close.
type Store struct {
	clk leaseapi.Clock

	// mu guards keys; no channel operation blocks under it.
	mu   sync.Mutex
	keys map[leaseapi.Key]*entry

	// watches holds the WatchRelease registrations. It has no listener
	// (releases are notified by Release itself), so it starts nothing.
	watches watchhub.Hub[leaseapi.Key, struct{}]
}

// entry is one key's state; it is never deleted, to keep the token.
type entry struct {
	token      leaseapi.Token
	owner      string // "" once released
	acquiredAt time.Time
	expiresAt  time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// New returns an empty Store. It does no I/O and starts nothing. A Clock
// that is a nil pointer or func inside the interface (which would panic on
// the first operation) is leaseapi.ErrInvalidState.
func New(o Options) (*Store, error) {
	if v := reflect.ValueOf(o.Clock); (v.Kind() == reflect.Pointer || v.Kind() == reflect.Func) && v.IsNil() {
		return nil, leaseapi.NewError("new store", leaseapi.ErrInvalidState, "typed-nil clock")
	}
	clk := o.Clock
	if clk == nil {
		clk = realClock{}
	}
	return &Store{
		clk:  clk,
		keys: make(map[leaseapi.Key]*entry),
	}, nil
}

// Capabilities implements [leaseapi.Capable]: Inspect (a read under the
// store's mutex), Adopt (a grant read back is the grant: there is nothing
// more durable to wait for), WatchRelease, RenewBatch, and NeverBlocks
// (every operation is one short critical section). A Store that [New] did
// not make claims nothing.
func (s *Store) Capabilities() leaseapi.Capabilities {
	if s.ready("capabilities") != nil {
		return leaseapi.Capabilities{}
	}
	return leaseapi.Capabilities{Inspect: true, Adopt: true, WatchRelease: true, RenewBatch: true, NeverBlocks: true}
}

// ready returns ErrInvalidState for a Store that New did not make.
func (s *Store) ready(op string) error {
	if s == nil || s.clk == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "store not made by memory.New")
	}
	return nil
}

func (e *entry) live(now time.Time) bool {
	return e.owner != "" && now.Before(e.expiresAt)
}

func (e *entry) record(k leaseapi.Key) leaseapi.Record {
	return leaseapi.Record{Key: k, Owner: e.owner, Token: e.token, AcquiredAt: e.acquiredAt, ExpiresAt: e.expiresAt}
}

// matches reports whether rec names e's current grant.
func (e *entry) matches(rec leaseapi.Record) bool {
	return e.owner == rec.Owner && e.token == rec.Token
}

// TryAcquire implements [leaseapi.Backend].
func (s *Store) TryAcquire(ctx context.Context, key leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	const op = "try acquire"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, err
	}
	if err := leaseapi.CheckAcquire(ctx, op, key, owner, ttl); err != nil {
		return leaseapi.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if err := notAfter(ctx, op); err != nil {
		return leaseapi.Record{}, err
	}
	e := s.keys[key]
	if e == nil {
		e = &entry{}
		s.keys[key] = e
	} else if e.live(now) {
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrContended, "")
	} else if e.token == math.MaxUint64 {
		// The next token cannot be represented: fail closed, grant nothing.
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrInvalidState, "fencing tokens exhausted")
	}
	*e = entry{token: e.token + 1, owner: owner, acquiredAt: now, expiresAt: now.Add(ttl)}
	return e.record(key), nil
}

// notAfter is the not-after rule of [leaseapi.Backend] in process: a
// mutation that gets to execute (holds the mutex and has read the store's
// clock) only after its ctx ended, its deadline included, changes nothing
// and returns the context's error. It asks ctx itself, never compares
// ctx.Deadline() with a clock: the deadline may be on a simulated clock
// (github.com/benbjohnson/clock's mock) that neither the time package nor
// the store's clock share.
func notAfter(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return leaseapi.ContextError(op, err)
	}
	return nil
}

// Renew implements [leaseapi.Backend].
func (s *Store) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	const op = "renew"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, err
	}
	if err := leaseapi.CheckRenew(ctx, op, rec, ttl); err != nil {
		return leaseapi.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if err := notAfter(ctx, op); err != nil {
		return leaseapi.Record{}, err
	}
	e := s.keys[rec.Key]
	if e == nil || !e.renewable(rec) || !e.live(now) {
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	e.acquiredAt, e.expiresAt = now, now.Add(ttl)
	return e.record(rec.Key), nil
}

// RenewBatch implements [leaseapi.BatchRenewer] by renewing each request in
// order; it exists so the runtime's batching path has a reference.
func (s *Store) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	out := make([]leaseapi.RenewResult, len(reqs))
	if err := s.ready("renew batch"); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	for i, r := range reqs {
		out[i].Record, out[i].Err = s.Renew(ctx, r.Record, r.TTL)
	}
	return out
}

// Validate implements [leaseapi.Backend].
// It returns the stored record of rec's grant.
func (s *Store) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	const op = "validate"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, err
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return leaseapi.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[rec.Key]
	if e == nil || !e.matches(rec) || !e.live(s.clk.Now()) {
		return leaseapi.Record{}, leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	return e.record(rec.Key), nil
}

// Release implements [leaseapi.Backend].
func (s *Store) Release(ctx context.Context, rec leaseapi.Record) error {
	const op = "release"
	if err := s.ready(op); err != nil {
		return err
	}
	if err := leaseapi.CheckRecord(ctx, op, rec); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[rec.Key]
	switch {
	case e == nil || e.token != rec.Token:
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	case e.owner == "":
		return nil // already released: idempotent
	case e.owner != rec.Owner:
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	e.owner = ""
	e.expiresAt = e.acquiredAt
	s.watches.Notify(rec.Key) // under mu, as before: never blocks
	return nil
}

// Inspect implements [leaseapi.Inspector].
func (s *Store) Inspect(ctx context.Context, key leaseapi.Key) (leaseapi.Record, bool, error) {
	const op = "inspect"
	if err := s.ready(op); err != nil {
		return leaseapi.Record{}, false, err
	}
	if err := leaseapi.CheckKey(ctx, op, key); err != nil {
		return leaseapi.Record{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		return leaseapi.Record{Key: key}, false, nil
	}
	if !e.live(s.clk.Now()) {
		return leaseapi.Record{Key: key, Token: e.token}, false, nil
	}
	return e.record(key), true, nil
}

// WatchRelease implements [leaseapi.ReleaseWatcher]. The channel receives
// a value (buffer 1, coalescing; never closed) after key is released
// through this Store. It starts nothing; stop removes the registration and
// is safe to call more than once. On a Store that New did not make, the
// channel never receives.
func (s *Store) WatchRelease(key leaseapi.Key) (<-chan struct{}, func()) {
	if s.ready("watch release") != nil {
		return make(chan struct{}), func() {}
	}
	return s.watches.Watch(key, struct{}{})
}
