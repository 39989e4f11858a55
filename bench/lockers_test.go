package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// locker is one way of taking leases (the floor, the Store, the public
// API), with H the value that stands for a held lease. The workloads are
// generic over it so that a held lease is kept by value, as a program using
// that layer would keep it, and the harness boxes nothing per operation.
type locker[H any] interface {
	// tryAcquire takes the lease named name, or fails with errBusy if
	// someone else holds it.
	tryAcquire(ctx context.Context, name string) (H, error)
	// acquire is the layer's own waiting acquire; errNoWait if it has none.
	acquire(ctx context.Context, name string) (H, error)
	renew(ctx context.Context, h *H) error
	release(ctx context.Context, h *H) error
	token(h *H) uint64
}

var (
	errBusy   = errors.New("bench: held by someone else")
	errNoWait = errors.New("bench: no waiting acquire in this layer")
)

// newOwner returns a fresh owner id from the library's default source.
func newOwner() string {
	o, err := leaseapi.RandomOwners{}.NewOwner()
	if err != nil {
		panic(err) // crypto/rand failed: nothing can be measured
	}
	return o
}

// storeLocker calls a Store directly, with one owner id for all its
// acquisitions (as the floor has one per locker).
type storeLocker struct {
	s     leaseapi.Backend
	ns    string // the namespace of every key
	owner string
	ttl   time.Duration
}

func newStoreLocker(s leaseapi.Backend, ns string, ttl time.Duration) *storeLocker {
	return &storeLocker{s: s, ns: ns, owner: newOwner(), ttl: ttl}
}

func (l *storeLocker) tryAcquire(ctx context.Context, name string) (leaseapi.Record, error) {
	k, err := leaseapi.NewKey(l.ns, name)
	if err != nil {
		return leaseapi.Record{}, err
	}
	rec, err := l.s.TryAcquire(ctx, k, l.owner, l.ttl)
	if errors.Is(err, leaseapi.ErrContended) {
		return leaseapi.Record{}, errBusy
	}
	return rec, err
}

func (l *storeLocker) acquire(context.Context, string) (leaseapi.Record, error) {
	return leaseapi.Record{}, errNoWait
}

func (l *storeLocker) renew(ctx context.Context, h *leaseapi.Record) error {
	rec, err := l.s.Renew(ctx, *h, l.ttl)
	if err == nil {
		*h = rec
	}
	return err
}

func (l *storeLocker) release(ctx context.Context, h *leaseapi.Record) error {
	return l.s.Release(ctx, *h)
}

func (l *storeLocker) token(h *leaseapi.Record) uint64 { return uint64(h.Token) }

// apiLocker is the public API, package lease (its Client and Handle are
// runtime's): Client.TryAcquire (or Acquire) and the Handle's Renew and
// Release, with the policies of the peers harness's lease adapter (built
// once here, not per call).
type apiLocker struct {
	c          *lease.Client
	ns         string
	try, waitP lease.Policy
}

func newAPILocker(c *lease.Client, ns string, ttl time.Duration) (*apiLocker, error) {
	o := lease.PolicyOptions{TTL: ttl, SafetyMargin: ttl / 10, OperationTimeout: min(time.Second, ttl/4), MaxAttempts: 1}
	try, err := lease.NewPolicy(o)
	if err != nil {
		return nil, err
	}
	o.Wait, o.Retry, o.MaxAttempts = lease.MaxWait, 10*time.Millisecond, lease.MaxAttempts
	w, err := lease.NewPolicy(o)
	if err != nil {
		return nil, err
	}
	return &apiLocker{c: c, ns: ns, try: try, waitP: w}, nil
}

func (l *apiLocker) get(ctx context.Context, name string, wait bool) (*lease.Handle, error) {
	k, err := lease.NewKey(l.ns, name)
	if err != nil {
		return nil, err
	}
	var h *lease.Handle
	if wait {
		h, err = l.c.Acquire(ctx, k, l.waitP)
	} else {
		h, err = l.c.TryAcquire(ctx, k, l.try)
	}
	if errors.Is(err, lease.ErrContended) {
		return nil, errBusy
	}
	return h, err
}

func (l *apiLocker) tryAcquire(ctx context.Context, name string) (*lease.Handle, error) {
	return l.get(ctx, name, false)
}

func (l *apiLocker) acquire(ctx context.Context, name string) (*lease.Handle, error) {
	return l.get(ctx, name, true)
}

func (l *apiLocker) renew(ctx context.Context, h **lease.Handle) error { return (*h).Renew(ctx) }

func (l *apiLocker) release(ctx context.Context, h **lease.Handle) error {
	return (*h).Release(ctx)
}

func (l *apiLocker) token(h **lease.Handle) uint64 { return uint64((*h).Token()) }

// newClient is a Client on b for up to n managed leases (0: the default).
func newClient(b lease.Backend, n uint32) (*lease.Client, error) {
	return lease.NewClient(b, lease.ClientOptions{MaxManaged: n})
}

// closeClient closes c, bounded.
func closeClient(c *lease.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// renewCount counts the renewals a managed-renewal benchmark's backend
// performed and the backend calls they took.
type renewCount struct {
	renewed, calls atomic.Int64
	// more gets a token whenever renewed grows (buffer 1, never blocks).
	more chan struct{}
}

func newRenewCount() *renewCount { return &renewCount{more: make(chan struct{}, 1)} }

func (c *renewCount) one(err error) {
	c.calls.Add(1)
	if err == nil {
		c.add(1)
	}
}

// add counts n renewals done.
func (c *renewCount) add(n int64) {
	if n == 0 {
		return
	}
	c.renewed.Add(n)
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// waitPast waits until more than from renewals were counted, or ctx ends.
func (c *renewCount) waitPast(ctx context.Context, from int64) {
	for c.renewed.Load() <= from {
		select {
		case <-c.more:
		case <-ctx.Done():
			return
		}
	}
}

func (c *renewCount) batch(res []leaseapi.RenewResult) {
	c.calls.Add(1)
	var n int64
	for _, r := range res {
		if r.Err == nil {
			n++
		}
	}
	c.add(n)
}

// The counted stores embed a Store, so every capability the runtime looks
// for (batched renewal, inspection, release notification, NeverBlocks) is
// the Store's own; only Renew and RenewBatch are counted on the way out.

type countedValkey struct {
	*valkey.Store
	n *renewCount
}

func (s countedValkey) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	r, err := s.Store.Renew(ctx, rec, ttl)
	s.n.one(err)
	return r, err
}

func (s countedValkey) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	res := s.Store.RenewBatch(ctx, reqs)
	s.n.batch(res)
	return res
}

type countedPG struct {
	*postgres.Store
	n *renewCount
}

func (s countedPG) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	r, err := s.Store.Renew(ctx, rec, ttl)
	s.n.one(err)
	return r, err
}

func (s countedPG) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	res := s.Store.RenewBatch(ctx, reqs)
	s.n.batch(res)
	return res
}

type countedMemory struct {
	*memory.Store
	n *renewCount
}

func (s countedMemory) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	r, err := s.Store.Renew(ctx, rec, ttl)
	s.n.one(err)
	return r, err
}

func (s countedMemory) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	res := s.Store.RenewBatch(ctx, reqs)
	s.n.batch(res)
	return res
}
