package valkey_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// TestRenewKeepsTheGrant renews grants in every state the lease value can
// be in (marked by a waiting contender or not, renewed for the same TTL or
// another), through Renew and through RenewBatch, and checks the value the
// server holds afterwards, byte for byte: the renewal changes the TTL and
// the expiry only, keeps the mark and the token and owner, and the grant
// then validates, inspects and releases as the renewed record (a marked
// one publishing its release). The batch once wrote the mark alone in
// place of "mark, token, owner" (string.find's two results fed to
// string.sub); the safety suite's audit found it.
func TestRenewKeepsTheGrant(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	c := newClient(t, addr)
	s := newStore(t, c, valkey.Options{Prefix: prefix})
	waiter := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, waiter, s)
	ctx := t.Context()
	const ttl = 2 * time.Second
	for i, tc := range []struct {
		name   string
		batch  bool
		marked bool
		newTTL time.Duration
	}{
		{"Renew, same TTL", false, false, ttl},
		{"Renew, another TTL", false, false, 3 * time.Second},
		{"Renew, marked", false, true, ttl},
		{"Renew, marked, another TTL", false, true, 3 * time.Second},
		{"RenewBatch, same TTL", true, false, ttl},
		{"RenewBatch, another TTL", true, false, 3 * time.Second},
		{"RenewBatch, marked", true, true, ttl},
		{"RenewBatch, marked, another TTL", true, true, 3 * time.Second},
	} {
		k := leaseapi.MustKey("value", strconv.Itoa(i))
		rec, err := s.TryAcquire(ctx, k, ownerA, ttl)
		if err != nil {
			t.Fatal(err)
		}
		woke, stop := waiter.WatchRelease(k)
		mark := ":"
		if tc.marked {
			markWaiting(t, waiter, k)
			mark = "!"
		}
		var got leaseapi.Record
		if tc.batch {
			// Two elements, so that the batch script (not the single
			// renewal) runs.
			other, err := s.TryAcquire(ctx, leaseapi.MustKey("value", "other-"+strconv.Itoa(i)), ownerA, ttl)
			if err != nil {
				t.Fatal(err)
			}
			res := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: tc.newTTL}, {Record: other, TTL: tc.newTTL}})
			got, err = res[0].Record, res[0].Err
			if err != nil || res[1].Err != nil {
				t.Fatalf("%s: %v, %v", tc.name, err, res[1].Err)
			}
		} else if got, err = s.Renew(ctx, rec, tc.newTTL); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Token != rec.Token || got.GrantedTTL() != tc.newTTL || got.ExpiresAt.UnixMicro()%1000 != 0 {
			t.Fatalf("%s: renewed to %+v (TTL %v), want token %d, TTL %v, a whole-ms expiry", tc.name, got, got.GrantedTTL(), rec.Token, tc.newTTL)
		}
		lease, _ := s.Keys(k)
		v, err := c.Do(ctx, c.B().Get().Key(lease).Build()).ToString()
		want := strconv.FormatInt(tc.newTTL.Microseconds(), 10) + mark + rec.Token.String() + ":" + ownerA
		if err != nil || v != want {
			t.Fatalf("%s: the lease value is %q (%v), want %q", tc.name, v, err, want)
		}
		pet, err := c.Do(ctx, c.B().Pexpiretime().Key(lease).Build()).AsInt64()
		if err != nil || (pet+1)*1000 != got.ExpiresAt.UnixMicro() {
			t.Fatalf("%s: the key expires at %d ms (%v), want the grant's expiry %d µs less 1ms", tc.name, pet, err, got.ExpiresAt.UnixMicro())
		}
		if v, err := s.Validate(ctx, got); err != nil || v != got {
			t.Fatalf("%s: Validate: %+v, %v; want %+v", tc.name, v, err, got)
		}
		if in, held, err := s.Inspect(ctx, k); err != nil || !held || in != got {
			t.Fatalf("%s: Inspect: %+v held %v, %v; want %+v", tc.name, in, held, err, got)
		}
		if err := s.Release(ctx, got); err != nil {
			t.Fatalf("%s: Release: %v", tc.name, err)
		}
		if tc.marked {
			select {
			case <-woke:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the marked grant's release was not published", tc.name)
			}
		}
		stop()
	}
}

// TestPublishOnlyForAWaiter: a release publishes its notification only
// when a watching contender marked the grant (the server's own count of
// PUBLISH calls says so), and a contended attempt by a Store that does not
// watch the key marks nothing.
func TestPublishOnlyForAWaiter(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	c := newClient(t, srv.Addr())
	prefix := uniquePrefix()
	s := newStore(t, c, valkey.Options{Prefix: prefix})
	other := newStore(t, newClient(t, srv.Addr()), valkey.Options{Prefix: prefix})
	ctx := t.Context()
	calls := func(cmd string) int64 {
		t.Helper()
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
	k := leaseapi.MustKey("ns", "publish")
	release := func(mark func()) int64 {
		t.Helper()
		rec, err := s.TryAcquire(ctx, k, ownerA, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mark()
		before := calls("publish")
		if err := s.Release(ctx, rec); err != nil {
			t.Fatal(err)
		}
		return calls("publish") - before
	}
	if n := release(func() {}); n != 0 {
		t.Errorf("a release nobody waited for published %d times, want 0", n)
	}
	if n := release(func() {
		if _, err := other.TryAcquire(ctx, k, ownerB, time.Minute); leaseapi.Kind(err) != leaseapi.ErrContended {
			t.Fatalf("contended attempt: %v", err)
		}
	}); n != 0 {
		t.Errorf("a release after a contended attempt by a Store that does not watch published %d times, want 0", n)
	}
	if n := release(func() {
		_, stop := other.WatchRelease(k)
		defer stop()
		before := calls("setrange")
		markWaiting(t, other, k)
		markWaiting(t, other, k)
		if n := calls("setrange") - before; n != 1 {
			t.Errorf("two watching attempts wrote the mark %d times, want once", n)
		}
	}); n != 1 {
		t.Errorf("a release a watcher waited for published %d times, want 1", n)
	}
}
