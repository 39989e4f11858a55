package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// BenchmarkDeadline runs the mutations with a ctx deadline, as the runtime
// does (its OperationTimeout), so that each request carries a not-after
// bound: TryAcquire followed by Release, one Renew, and a RenewBatch of
// 1,000 leases. Compare with a build without the bound using benchstat.
func BenchmarkDeadline(b *testing.B) {
	c := newClient(b, serverAddr(b))
	withDeadline := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return f(ctx)
	}
	// Each run has a Store of its own prefix: -count runs a sub-benchmark
	// again in the same parent, and a lease of the last run is still held.
	b.Run("pair", func(b *testing.B) {
		s := newStore(b, c, valkey.Options{})
		b.ReportAllocs()
		k := leaseapi.MustKey("bench", "deadline-pair")
		for b.Loop() {
			if err := withDeadline(func(ctx context.Context) error {
				rec, err := s.TryAcquire(ctx, k, ownerA, benchTTL)
				if err == nil {
					err = s.Release(ctx, rec)
				}
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("renew", func(b *testing.B) {
		s := newStore(b, c, valkey.Options{})
		b.ReportAllocs()
		rec, err := s.TryAcquire(context.Background(), leaseapi.MustKey("bench", "deadline-renew"), ownerA, benchTTL)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := withDeadline(func(ctx context.Context) error {
				_, err := s.Renew(ctx, rec, benchTTL)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("batch1k", func(b *testing.B) {
		s := newStore(b, c, valkey.Options{})
		b.ReportAllocs()
		reqs := acquireMany(b, s, 1000)
		for b.Loop() {
			if err := withDeadline(func(ctx context.Context) error {
				for _, r := range s.RenewBatch(ctx, reqs) {
					if r.Err != nil {
						return r.Err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
