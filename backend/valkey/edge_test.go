package valkey_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// TestTokenBoundary seeds the token counter, as an operator might after
// data loss, and acquires. Up to 2^53 - 1 the token is exact; above, a Lua
// number cannot hold it, and the acquisition fails closed with
// ErrInvalidState and grants nothing, whoever asks (the exact inputs of
// the report: four owners after 1764000000000000000 all got the same
// token; at 2^63 - 2 the grant was orphaned and the call ambiguous).
func TestTokenBoundary(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	const maxExact = 1<<53 - 1
	owners := []string{ownerA, ownerB, "owner-c-0123456789abcdef", "owner-d-0123456789abcdef"}
	for i, tc := range []struct {
		seed string
		want uint64 // 0: refused
	}{
		{strconv.FormatUint(maxExact-2, 10), maxExact - 1},
		{strconv.FormatUint(maxExact-1, 10), maxExact},
		{strconv.FormatUint(maxExact, 10), 0},
		{strconv.FormatUint(maxExact+1, 10), 0},
		{"1764000000000000000", 0},
		{strconv.FormatUint(1<<63-2, 10), 0},
		{strconv.FormatUint(1<<63-1, 10), 0},
		{"not-a-number", 0},
	} {
		k := leaseapi.MustKey("ns", "boundary-"+strconv.Itoa(i))
		_, tk := s.Keys(k)
		if err := c.Do(ctx, c.B().Set().Key(tk).Value(tc.seed).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for _, owner := range owners {
			rec, err := s.TryAcquire(ctx, k, owner, time.Minute)
			if tc.want != 0 {
				if err != nil || uint64(rec.Token) != tc.want {
					t.Fatalf("seed %s: got token %d, %v; want %d", tc.seed, rec.Token, err, tc.want)
				}
				if err := s.Release(ctx, rec); err != nil {
					t.Fatal(err)
				}
				break // the next acquisition would pass the boundary
			}
			wantKind(t, "TryAcquire past the exact tokens (seed "+tc.seed+")", err, leaseapi.ErrInvalidState)
			if rec != (leaseapi.Record{}) {
				t.Fatalf("seed %s: refused acquisition returned %+v", tc.seed, rec)
			}
			if got, held, err := s.Inspect(ctx, k); held || err != nil && tc.seed != "not-a-number" {
				t.Fatalf("seed %s: after the refusal Inspect says held %v (owner %q), %v", tc.seed, held, got.Owner, err)
			}
			lease, _ := s.Keys(k)
			if n, err := c.Do(ctx, c.B().Exists().Key(lease).Build()).AsInt64(); err != nil || n != 0 {
				t.Fatalf("seed %s: lease key exists (%d, %v) after a refused acquisition", tc.seed, n, err)
			}
		}
	}
	// Inspect reports a counter above 2^53 exactly (it is text end to end).
	k := leaseapi.MustKey("ns", "boundary-inspect")
	_, tk := s.Keys(k)
	if err := c.Do(ctx, c.B().Set().Key(tk).Value("1764000000000000001").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if rec, held, err := s.Inspect(ctx, k); err != nil || held || rec.Token != 1764000000000000001 {
		t.Fatalf("Inspect of a large counter: got token %d, held %v, %v", rec.Token, held, err)
	}
}

// TestZeroStore: a Store not made by New never panics; every method says
// ErrInvalidState and does no I/O.
func TestZeroStore(t *testing.T) {
	k := leaseapi.MustKey("ns", "zero")
	rec := leaseapi.Record{Key: k, Owner: ownerA, Token: 1, AcquiredAt: time.Unix(1, 0), ExpiresAt: time.Unix(2, 0)}
	ctx := context.Background()
	for name, s := range map[string]*valkey.Store{"zero": {}, "nil": nil} {
		_, err := s.TryAcquire(ctx, k, ownerA, time.Second)
		wantKind(t, name+" TryAcquire", err, leaseapi.ErrInvalidState)
		_, err = s.Renew(ctx, rec, time.Second)
		wantKind(t, name+" Renew", err, leaseapi.ErrInvalidState)
		_, err = s.Validate(ctx, rec)
		wantKind(t, name+" Validate", err, leaseapi.ErrInvalidState)
		wantKind(t, name+" Release", s.Release(ctx, rec), leaseapi.ErrInvalidState)
		_, _, err = s.Inspect(ctx, k)
		wantKind(t, name+" Inspect", err, leaseapi.ErrInvalidState)
		wantKind(t, name+" Guard", s.Guard(ctx, rec, "x", "v", 0), leaseapi.ErrInvalidState)
		_, err = s.CacheKey(k, "v")
		wantKind(t, name+" CacheKey", err, leaseapi.ErrInvalidState)
		res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}, {Record: rec, TTL: time.Second}})
		if len(res) != 2 {
			t.Fatalf("%s RenewBatch: %d results, want 2", name, len(res))
		}
		for _, r := range res {
			wantKind(t, name+" RenewBatch", r.Err, leaseapi.ErrInvalidState)
		}
		if c := s.Capabilities(); c != (leaseapi.Capabilities{}) {
			t.Fatalf("%s Capabilities: %+v, want no claims", name, c)
		}
		if lk, tk := s.Keys(k); lk != "" || tk != "" {
			t.Fatalf("%s Keys: %q %q, want empty", name, lk, tk)
		}
		ch, stop := s.WatchRelease(k)
		stop()
		select {
		case <-ch:
			t.Fatalf("%s WatchRelease: the channel received", name)
		default:
		}
		s.Close()
		s.Close()
	}
}

// TestClosedClient: on a closed valkey-go client a read is
// ErrBackendUnavailable and a mutation ErrAmbiguousOutcome with a detail
// that names the closed client (valkey-go gives the same ErrClosing to a
// command written just before Close, so a write is never reported as not
// applied); nothing changes on the server.
func TestClosedClient(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	live := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	c := newClient(t, addr)
	s, err := valkey.New(c, valkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "closed")
	rec, err := live.TryAcquire(ctx, k, ownerA, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = s.TryAcquire(ctx, leaseapi.MustKey("ns", "closed-free"), ownerB, time.Minute)
	wantKind(t, "TryAcquire on a closed client", err, leaseapi.ErrAmbiguousOutcome)
	if err == nil || !strings.Contains(err.Error(), "client closed") {
		t.Fatalf("TryAcquire on a closed client: got %v, want a message naming the closed client", err)
	}
	_, err = s.Renew(ctx, rec, time.Minute)
	wantKind(t, "Renew on a closed client", err, leaseapi.ErrAmbiguousOutcome)
	wantKind(t, "Release on a closed client", s.Release(ctx, rec), leaseapi.ErrAmbiguousOutcome)
	_, err = s.Validate(ctx, rec)
	wantKind(t, "Validate on a closed client", err, leaseapi.ErrBackendUnavailable)
	_, _, err = s.Inspect(ctx, k)
	wantKind(t, "Inspect on a closed client", err, leaseapi.ErrBackendUnavailable)
	ck, _ := s.CacheKey(k, "v")
	wantKind(t, "Guard on a closed client", s.Guard(ctx, rec, ck, "v", 0), leaseapi.ErrAmbiguousOutcome)
	for _, r := range s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}}) {
		wantKind(t, "RenewBatch on a closed client", r.Err, leaseapi.ErrAmbiguousOutcome)
	}
	s.Close()
	// Nothing changed: the grant is as it was, and the free key is free.
	got, held, err := live.Inspect(ctx, k)
	if err != nil || !held || got.Token != rec.Token || !got.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Fatalf("after the refused calls: got %+v held %v, %v; want %+v", got, held, err, rec)
	}
	if _, held, err := live.Inspect(ctx, leaseapi.MustKey("ns", "closed-free")); err != nil || held {
		t.Fatalf("refused TryAcquire left a grant (held %v, %v)", held, err)
	}
}
