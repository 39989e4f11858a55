package valkey_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

// startCluster starts a private 3-master cluster for t.
func startCluster(t *testing.T) *testserver.RedisCluster {
	t.Helper()
	c, err := testserver.StartRedisCluster(3)
	if err != nil {
		if reason := testserver.SkipReason("valkey cluster", testserver.EnvValkeyAddr, err); reason != "" {
			t.Skip(reason)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// TestCluster runs on a 3-master Valkey/Redis Cluster through valkey-go's
// cluster client: every script touches keys of one hash tag only, so no
// command is refused with CROSSSLOT, whichever node owns the lease.
func TestCluster(t *testing.T) {
	cl := startCluster(t)
	c := newClient(t, cl.Addrs()...)
	if got := c.Mode(); got != "cluster" {
		t.Fatalf("client mode: got %q, want cluster", got)
	}

	t.Run("Conformance", func(t *testing.T) {
		simtest.Conformance(t, simtest.Harness{
			TTL:   time.Second,
			Slack: 200 * time.Millisecond,
			New: func(t *testing.T) leaseapi.Backend {
				return newStore(t, c, valkey.Options{})
			},
		})
	})

	t.Run("ManyKeysAcrossNodes", func(t *testing.T) {
		s := newStore(t, c, valkey.Options{})
		// A deadline, so that every call after the first carries a
		// not-after bound (the batched renewal's one script per lease
		// included).
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		const n = 200
		reqs := make([]leaseapi.RenewRequest, 0, n)
		for i := range n {
			k := leaseapi.MustKey("ns", "key-{"+itoa(i)+"}")
			rec, err := s.TryAcquire(ctx, k, ownerA, 2*time.Second)
			if err != nil {
				t.Fatalf("TryAcquire %d: %v", i, err)
			}
			ck, err := s.CacheKey(k, "v")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Guard(ctx, rec, ck, "x", time.Second); err != nil {
				t.Fatalf("Guard %d: %v", i, err)
			}
			if _, _, err := s.Inspect(ctx, k); err != nil {
				t.Fatalf("Inspect %d: %v", i, err)
			}
			reqs = append(reqs, leaseapi.RenewRequest{Record: rec, TTL: 3 * time.Second})
		}
		for i, r := range s.RenewBatch(ctx, reqs) {
			if r.Err != nil {
				t.Fatalf("RenewBatch element %d: %v", i, r.Err)
			}
		}
		for _, r := range reqs {
			if err := s.Release(ctx, r.Record); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		// The keys really are spread over the nodes.
		nodes := 0
		for _, node := range cl.Nodes() {
			if n, err := node.Do("DBSIZE"); err == nil && n != "0" {
				nodes++
			}
		}
		if nodes < 2 {
			t.Fatalf("keys on %d node(s), want them spread over the cluster", nodes)
		}
		// Every node ran them as functions (the library loaded on every
		// node), and loads them again after every node lost its functions.
		for _, node := range cl.Nodes() {
			info, err := node.Do("INFO", "commandstats")
			if err != nil {
				t.Fatal(err)
			}
			if calls, failed := commandStat(info, "fcall", "calls"), commandStat(info, "fcall", "failed_calls"); calls <= failed {
				t.Fatalf("a node ran no FCALL: %v calls, %v failed", calls, failed)
			}
			if _, err := node.Do("FUNCTION", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 20 {
			k := leaseapi.MustKey("ns", "again-{"+itoa(i)+"}")
			rec, err := s.TryAcquire(ctx, k, ownerA, 2*time.Second)
			if err != nil {
				t.Fatalf("TryAcquire %d after FUNCTION FLUSH: %v", i, err)
			}
			if r := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: 3 * time.Second}})[0]; r.Err != nil {
				t.Fatalf("RenewBatch %d after FUNCTION FLUSH: %v", i, r.Err)
			}
			if err := s.Release(ctx, rec); err != nil {
				t.Fatalf("Release %d after FUNCTION FLUSH: %v", i, err)
			}
		}
	})

	t.Run("ReleaseNotificationAcrossNodes", func(t *testing.T) {
		prefix := uniquePrefix()
		holder := newStore(t, c, valkey.Options{Prefix: prefix})
		waiter := newStore(t, newClient(t, cl.Addrs()...), valkey.Options{Prefix: prefix})
		warmWatch(t, waiter, holder)
		for i := range 20 { // keys in many slots, so on every node
			k := leaseapi.MustKey("ns", "handoff-"+itoa(i))
			ch, stop := waiter.WatchRelease(k)
			rec, err := holder.TryAcquire(t.Context(), k, ownerA, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			markWaiting(t, waiter, k)
			if got := waitSet(t, c, holder, k); !slices.Equal(got, []string{valkey.StoreID(waiter)}) {
				t.Fatalf("key %d: wait set %v, want the waiter queued", i, got)
			}
			if err := holder.Release(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
			case <-time.After(2 * time.Second):
				t.Fatalf("key %d: no release notification within 2s", i)
			}
			if got := waitSet(t, c, holder, k); len(got) != 0 {
				t.Fatalf("key %d: wait set %v after the release, want it popped", i, got)
			}
			stop()
		}
	})

	t.Run("WaitReplicasFailsClosed", func(t *testing.T) {
		// The cluster has no replicas: WAIT (on the lease's node, on the
		// connection that ran the script) times out and the grant is given
		// back.
		s := newStore(t, c, valkey.Options{WaitReplicas: 1, WaitTimeout: 30 * time.Millisecond})
		for i := range 5 {
			k := leaseapi.MustKey("ns", "wait-"+itoa(i))
			_, err := s.TryAcquire(t.Context(), k, ownerA, time.Second)
			wantKind(t, "TryAcquire waiting for a missing replica", err, leaseapi.ErrBackendUnavailable)
			if rec, held, err := s.Inspect(t.Context(), k); err != nil || held || rec.Token != 1 {
				t.Fatalf("after the refused acquisition: got (token %d, held %v, %v), want (1, false, nil)", rec.Token, held, err)
			}
		}
	})
}
