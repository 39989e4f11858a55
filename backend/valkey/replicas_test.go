package valkey_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

func TestWaitReplicasFailsClosedWithoutReplicas(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c, valkey.Options{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	k := leaseapi.MustKey("ns", "wait")
	start := time.Now()
	_, err := s.TryAcquire(t.Context(), k, ownerA, time.Second)
	if el := time.Since(start); el > time.Second {
		t.Fatalf("TryAcquire took %v, want about the 50ms WAIT timeout", el)
	}
	wantKind(t, "TryAcquire without the replicas it waits for", err, leaseapi.ErrBackendUnavailable)
	// The grant was released: the key is free at once, its token burnt.
	rec, held, err := s.Inspect(t.Context(), k)
	if err != nil || held || rec.Token != 1 {
		t.Fatalf("Inspect after a refused acquisition: got (token %d, held %v, %v), want (1, false, nil)", rec.Token, held, err)
	}
	plain := newStore(t, c, valkey.Options{})
	if _, err := plain.TryAcquire(t.Context(), leaseapi.MustKey("ns", "plain"), ownerA, time.Second); err != nil {
		t.Fatalf("a Store without WaitReplicas: %v", err)
	}
}

func TestWaitReplicasWithAReplica(t *testing.T) {
	primary := privateServer(t, testserver.RedisOptions{Args: []string{"--repl-diskless-sync-delay", "0"}})
	replica := privateServer(t, testserver.RedisOptions{ReplicaOf: primary.Addr()})
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := replica.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not sync: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling the replica's sync, not ordering goroutines
	}
	c := newClient(t, primary.Addr())
	prefix := uniquePrefix()
	s := newStore(t, c, valkey.Options{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	for i := range 5 {
		k := leaseapi.MustKey("ns", "replicated")
		rec, err := s.TryAcquire(t.Context(), k, ownerA, time.Second)
		if err != nil {
			t.Fatalf("TryAcquire with a replica: %v", err)
		}
		if rec.Token != leaseapi.Token(i+1) {
			t.Fatalf("token: got %d, want %d", rec.Token, i+1)
		}
		// WAIT returned: the replica has the token already.
		_, token := s.Keys(k)
		got, err := replica.Do("GET", token)
		if err != nil || got != rec.Token.String() {
			t.Fatalf("replica's token right after TryAcquire: got %q, %v; want %s", got, err, rec.Token)
		}
		if err := s.Release(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
	}
	// The EVAL fallback of the WAIT path (the script cache is empty after a
	// SCRIPT FLUSH).
	if _, err := primary.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(t.Context(), leaseapi.MustKey("ns", "after-flush"), ownerA, time.Second); err != nil {
		t.Fatalf("TryAcquire after SCRIPT FLUSH: %v", err)
	}
}
