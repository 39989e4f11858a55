package valkey_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

const (
	ownerA = "owner-a-0123456789abcdef"
	ownerB = "owner-b-0123456789abcdef"
)

func wantKind(t *testing.T, what string, err, want error) {
	t.Helper()
	if leaseapi.Kind(err) != want {
		t.Fatalf("%s: got %v (kind %v), want kind %v", what, err, leaseapi.Kind(err), want)
	}
}

func TestNewValidates(t *testing.T) {
	c := newClient(t, serverAddr(t))
	if _, err := valkey.New(nil, valkey.Options{}); !errors.Is(err, leaseapi.ErrInvalidState) {
		t.Fatalf("New(nil client): got %v, want ErrInvalidState", err)
	}
	for _, tc := range []struct {
		name string
		o    valkey.Options
		ok   bool
	}{
		{"zero options", valkey.Options{}, true},
		{"plain prefix", valkey.Options{Prefix: "app:leases"}, true},
		{"longest prefix", valkey.Options{Prefix: strings.Repeat("p", valkey.MaxPrefixBytes)}, true},
		{"prefix too long", valkey.Options{Prefix: strings.Repeat("p", valkey.MaxPrefixBytes+1)}, false},
		{"open brace", valkey.Options{Prefix: "a{b"}, false},
		{"close brace", valkey.Options{Prefix: "a}b"}, false},
		{"space", valkey.Options{Prefix: "a b"}, false},
		{"control byte", valkey.Options{Prefix: "a\x00b"}, false},
		{"non-ascii", valkey.Options{Prefix: "préfixe"}, false},
		{"negative replicas", valkey.Options{WaitReplicas: -1}, false},
		{"wait timeout too small", valkey.Options{WaitReplicas: 1, WaitTimeout: time.Microsecond}, false},
		{"wait timeout too large", valkey.Options{WaitReplicas: 1, WaitTimeout: 2 * leaseapi.MaxOperationTimeout}, false},
		{"negative wait timeout", valkey.Options{WaitTimeout: -time.Second}, false},
	} {
		s, err := valkey.New(c, tc.o)
		if tc.ok && err != nil {
			t.Errorf("%s: got %v, want nil", tc.name, err)
		}
		if !tc.ok {
			wantKind(t, tc.name, err, leaseapi.ErrInvalidState)
			if strings.Contains(err.Error(), tc.o.Prefix) && tc.o.Prefix != "" {
				t.Errorf("%s: error %q reveals the prefix", tc.name, err)
			}
		}
		if s != nil {
			s.Close()
		}
	}
}

// keyslotTag returns what Redis Cluster hashes for key: the text between
// the first '{' and the first '}' after it, when non-empty.
func keyslotTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

func TestKeyLayoutSharesOneHashTag(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{Prefix: "tagtest"})
	for _, name := range []string{"plain", "we}ird{name", "a:b:c", "100%/x", "}{}{", "nested/{tag}/x"} {
		k := leaseapi.MustKey("ns", name)
		lease, token := s.Keys(k)
		cache, err := s.CacheKey(k, "value{x}")
		if err != nil {
			t.Fatalf("CacheKey: %v", err)
		}
		tag := keyslotTag(lease)
		if keyslotTag(token) != tag || keyslotTag(cache) != tag {
			t.Fatalf("key %q: tags differ: %q %q %q", name, tag, keyslotTag(token), keyslotTag(cache))
		}
		if strings.ContainsAny(tag, "{}:") || !strings.HasPrefix(lease, "tagtest:{"+tag+"}") {
			t.Fatalf("key %q: lease key %q, hash tag %q: want \"tagtest:{\" and the whole escaped key", name, lease, tag)
		}
	}
	// Different (prefix, key) pairs never share a tag, even when their
	// plain concatenations coincide.
	s2 := newStore(t, c, valkey.Options{Prefix: "tagtest:ns"})
	l1, _ := s.Keys(leaseapi.MustKey("ns:x", "y"))
	l2, _ := s2.Keys(leaseapi.MustKey("x", "y"))
	if l1 == l2 {
		t.Fatalf("prefix/key confusion: both map to %q", l1)
	}
	if lk, tk := s.Keys(leaseapi.Key{}); lk != "" || tk != "" {
		t.Fatalf("Keys(zero): got %q %q, want empty", lk, tk)
	}
}

func TestTokenCounterNeverExpires(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "counter")
	lease, token := s.Keys(k)
	rec, err := s.TryAcquire(ctx, k, ownerA, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	pttl, err := c.Do(ctx, c.B().Pttl().Key(lease).Build()).AsInt64()
	if err != nil || pttl <= 0 || pttl > 201 {
		t.Fatalf("lease key PTTL: got %d, %v; want in (0, 201]", pttl, err)
	}
	if err := s.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key(lease).Build()).AsInt64(); n != 0 {
		t.Fatal("lease key still exists after release")
	}
	if _, err := s.TryAcquire(ctx, k, ownerB, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // let the TTL and the server's cleanup pass
	if n, _ := c.Do(ctx, c.B().Exists().Key(lease).Build()).AsInt64(); n != 0 {
		t.Fatal("lease key still exists after expiry cleanup")
	}
	pttl, _ = c.Do(ctx, c.B().Pttl().Key(token).Build()).AsInt64()
	v, _ := c.Do(ctx, c.B().Get().Key(token).Build()).ToString()
	if pttl != -1 || v != "2" {
		t.Fatalf("token counter: got PTTL %d value %q, want -1 and \"2\"", pttl, v)
	}
	// Release of the expired, cleaned-up latest grant is still idempotent;
	// the counter alone proves no later grant exists.
	rec2 := leaseapi.Record{Key: k, Owner: ownerB, Token: 2}
	if err := s.Release(ctx, rec2); err != nil {
		t.Fatalf("Release of a cleaned-up latest grant: got %v, want nil", err)
	}
	wantKind(t, "Release of an older cleaned-up grant", s.Release(ctx, rec), leaseapi.ErrStaleOwner)
	got, held, err := s.Inspect(ctx, k)
	if err != nil || held || got.Token != 2 {
		t.Fatalf("Inspect: got (token %d, held %v, %v), want (2, false, nil)", got.Token, held, err)
	}
}

func TestGrantUsesServerTime(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	const ttl = 1500*time.Millisecond + 250*time.Microsecond
	before, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.TryAcquire(ctx, leaseapi.MustKey("ns", "time"), ownerA, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.GrantedTTL(); got != ttl.Truncate(time.Microsecond) {
		t.Fatalf("ExpiresAt-AcquiredAt: got %v, want %v exactly", got, ttl)
	}
	if sec := rec.AcquiredAt.Unix(); sec < atoi(before[0]) || sec > atoi(before[0])+5 {
		t.Fatalf("AcquiredAt %v is not the server's TIME (%s)", rec.AcquiredAt, before[0])
	}
}

func atoi(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}

func TestGuard(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "guarded")
	ck, err := s.CacheKey(k, "report")
	if err != nil {
		t.Fatal(err)
	}
	get := func() (string, bool) {
		v, err := c.Do(ctx, c.B().Get().Key(ck).Build()).ToString()
		if vk.IsValkeyNil(err) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return v, true
	}

	first, err := s.TryAcquire(ctx, k, ownerA, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Guard(ctx, first, ck, "v1", time.Minute); err != nil {
		t.Fatalf("current guard: got %v, want nil", err)
	}
	if v, ok := get(); !ok || v != "v1" {
		t.Fatalf("after current guard: got %q, %v; want v1", v, ok)
	}
	if pttl, _ := c.Do(ctx, c.B().Pttl().Key(ck).Build()).AsInt64(); pttl <= 0 || pttl > 60_000 {
		t.Fatalf("cache PTTL: got %d, want (0, 60000]", pttl)
	}

	// The token changes: the old holder's guard is refused and writes nothing.
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "guard after release", s.Guard(ctx, first, ck, "stale-1", 0), leaseapi.ErrStaleOwner)
	second, err := s.TryAcquire(ctx, k, ownerB, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, "guard by the replaced holder", s.Guard(ctx, first, ck, "stale-2", 0), leaseapi.ErrStaleOwner)
	sameOwnerOldToken := second
	sameOwnerOldToken.Token = first.Token
	wantKind(t, "guard with an old token", s.Guard(ctx, sameOwnerOldToken, ck, "stale-3", 0), leaseapi.ErrStaleOwner)
	if v, _ := get(); v != "v1" {
		t.Fatalf("stale guards wrote: got %q, want v1", v)
	}
	if err := s.Guard(ctx, second, ck, "v2", 0); err != nil {
		t.Fatalf("new holder's guard: got %v, want nil", err)
	}
	if v, _ := get(); v != "v2" {
		t.Fatalf("after new holder's guard: got %q, want v2", v)
	}

	// An expired grant is stale too.
	short, err := s.TryAcquire(ctx, leaseapi.MustKey("ns", "guard-expiry"), ownerA, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sck, _ := s.CacheKey(short.Key, "x")
	time.Sleep(80 * time.Millisecond) // let the TTL pass
	wantKind(t, "guard after expiry", s.Guard(ctx, short, sck, "late", 0), leaseapi.ErrStaleOwner)
	if n, _ := c.Do(ctx, c.B().Exists().Key(sck).Build()).AsInt64(); n != 0 {
		t.Fatal("expired guard wrote its value")
	}

	// Keys not made by CacheKey for this lease are refused before any I/O.
	lease, token := s.Keys(k)
	otherCache, _ := s.CacheKey(leaseapi.MustKey("ns", "other"), "report")
	for _, bad := range []string{"", lease, token, otherCache, "plain-key", strings.TrimSuffix(ck, "report")} {
		wantKind(t, "guard with a foreign key", s.Guard(ctx, second, bad, "x", 0), leaseapi.ErrInvalidState)
	}
	wantKind(t, "guard with negative ttl", s.Guard(ctx, second, ck, "x", -time.Second), leaseapi.ErrInvalidState)
	wantKind(t, "guard with zero record", s.Guard(ctx, leaseapi.Record{}, ck, "x", 0), leaseapi.ErrInvalidState)
	for _, name := range []string{"", "a\nb", strings.Repeat("n", valkey.MaxCacheNameBytes+1), "\xff"} {
		if _, err := s.CacheKey(k, name); !errors.Is(err, leaseapi.ErrInvalidState) {
			t.Fatalf("CacheKey(%q): got %v, want ErrInvalidState", name, err)
		}
	}
	if v, _ := get(); v != "v2" {
		t.Fatalf("refused guards wrote: got %q, want v2", v)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	wantKind(t, "guard with canceled ctx", s.Guard(canceled, second, ck, "x", 0), leaseapi.ErrCanceled)
}

// warmWatch returns once s's release subscription delivers messages
// published through pub: it releases a warm-up key through pub until s's
// watch of it fires.
func warmWatch(tb testing.TB, s, pub *valkey.Store) {
	tb.Helper()
	k := leaseapi.MustKey("ns", "warm-up")
	ch, stop := s.WatchRelease(k)
	defer stop()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := pub.TryAcquire(tb.Context(), k, ownerA, time.Second)
		if err != nil {
			tb.Fatal(err)
		}
		markWaiting(tb, s, k)
		if err := pub.Release(tb.Context(), rec); err != nil {
			tb.Fatal(err)
		}
		select {
		case <-ch:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	tb.Fatal("release subscription not live within 5s")
}

// markWaiting makes waiter, which watches k, try to acquire k while
// another owner holds it: the contended attempt marks the grant, so that
// its release publishes a notification (a release nobody waits for
// publishes nothing).
func markWaiting(tb testing.TB, waiter *valkey.Store, k leaseapi.Key) {
	tb.Helper()
	if _, err := waiter.TryAcquire(tb.Context(), k, "owner-waiting-0123456789", time.Second); leaseapi.Kind(err) != leaseapi.ErrContended {
		tb.Fatalf("the waiter's attempt: got %v, want ErrContended", err)
	}
}

func TestReleaseNotificationLatency(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	// Holder and waiter use different clients and Stores, as two processes
	// would: the notification travels through the server.
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	waiter := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, waiter, holder)

	const n = 30
	lat := make([]time.Duration, 0, n)
	k := leaseapi.MustKey("ns", "handoff")
	for range n {
		rec, err := holder.TryAcquire(t.Context(), k, ownerA, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ch, stop := waiter.WatchRelease(k)
		markWaiting(t, waiter, k)
		start := time.Now()
		if err := holder.Release(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			lat = append(lat, time.Since(start))
		case <-time.After(2 * time.Second):
			t.Fatal("no release notification within 2s")
		}
		stop()
	}
	slices.Sort(lat)
	p50, p90 := lat[n/2], lat[n*9/10]
	t.Logf("release -> notified through the server: p50 %v, p90 %v, max %v", p50, p90, lat[n-1])
	if p50 > 100*time.Millisecond {
		t.Fatalf("release notification p50 %v, want < 100ms", p50)
	}
}

// TestSubscriptionHasItsOwnConnection: the release subscription never
// shares a connection with the scripts. valkey-go can hand a call another
// call's reply on a connection that also carries a subscription and is
// reset (the nemesis soak saw it, and a "message handled out of order"
// panic), so the Store subscribes on a dedicated connection. The server's
// CLIENT LIST shows, for the connections of the Store's client (found by
// their name), which subscribe and which ran a script last.
func TestSubscriptionHasItsOwnConnection(t *testing.T) {
	addr := serverAddr(t)
	name := uniquePrefix()
	c := newClientOpt(t, vk.ClientOption{InitAddress: []string{addr}, ClientName: name})
	prefix := uniquePrefix()
	s := newStore(t, c, valkey.Options{Prefix: prefix})
	// The release goes through another client: a Store's own release wakes
	// its watches locally, before its subscription need exist, so only a
	// wake that travelled through the server shows the subscription live.
	// s's last command is then warmWatch's contended attempt: a script, on
	// the shared connection.
	warmWatch(t, s, newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix}))
	admin := newClient(t, addr)
	list, err := admin.Do(t.Context(), admin.B().ClientList().Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var subs, scripts int
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		if f["name"] != name {
			continue
		}
		sub := f["sub"] != "0" && f["sub"] != ""
		script := f["cmd"] == "evalsha" || f["cmd"] == "eval" || f["cmd"] == "fcall"
		if sub {
			subs++
		}
		if script {
			scripts++
		}
		if sub && script {
			t.Errorf("one connection subscribes and runs scripts: %s", line)
		}
	}
	if subs != 1 || scripts == 0 {
		t.Fatalf("the client's connections: %d subscribed (want 1), %d ran a script last (want >= 1):\n%s", subs, scripts, list)
	}
}

func TestWatchReleaseOtherKeyAndStop(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	waiter := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	otherPrefix := uniquePrefix()
	other := newStore(t, newClient(t, addr), valkey.Options{Prefix: otherPrefix})
	warmWatch(t, waiter, holder)

	k := leaseapi.MustKey("ns", "watched")
	ch, stop := waiter.WatchRelease(k)
	defer stop()
	stoppedCh, stopNow := waiter.WatchRelease(k)
	stopNow()
	stopNow() // idempotent

	// Releases of other keys, and of the same key under another prefix, do
	// not notify, although someone waits for them (so they publish).
	for _, tc := range []struct {
		s      *valkey.Store
		k      leaseapi.Key
		prefix string
	}{{holder, leaseapi.MustKey("ns", "not-watched"), prefix}, {other, k, otherPrefix}} {
		rec, err := tc.s.TryAcquire(t.Context(), tc.k, ownerA, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		w := newStore(t, newClient(t, addr), valkey.Options{Prefix: tc.prefix})
		_, wstop := w.WatchRelease(tc.k)
		markWaiting(t, w, tc.k)
		if err := tc.s.Release(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		wstop()
	}
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	markWaiting(t, waiter, k)
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("no notification within 2s")
	}
	// Messages are delivered in publish order on one subscription, so the
	// earlier releases had their chance: nothing arrived for them.
	select {
	case <-ch:
		t.Fatal("a second notification arrived for one release")
	case <-stoppedCh:
		t.Fatal("a stopped watch was notified")
	default:
	}

	// After Close, watches never fire and Close is idempotent; the Backend
	// methods keep working.
	waiter.Close()
	waiter.Close()
	closedCh, stopClosed := waiter.WatchRelease(k)
	defer stopClosed()
	rec, err = waiter.TryAcquire(t.Context(), k, ownerB, time.Second)
	if err != nil {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if err := waiter.Release(t.Context(), rec); err != nil {
		t.Fatalf("Release after Close: %v", err)
	}
	select {
	case <-closedCh:
		t.Fatal("a watch made after Close was notified")
	case <-time.After(50 * time.Millisecond):
	}
}

func TestRenewBatchMany(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	const n = 500
	reqs := make([]leaseapi.RenewRequest, 0, n+2)
	for i := range n {
		rec, err := s.TryAcquire(ctx, leaseapi.MustKey("batch", "k"+itoa(i)), ownerA, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if i%5 == 4 {
			rec.Owner = ownerB // stale
		}
		reqs = append(reqs, leaseapi.RenewRequest{Record: rec, TTL: 3 * time.Second})
	}
	reqs = append(reqs, leaseapi.RenewRequest{TTL: time.Second}, leaseapi.RenewRequest{Record: reqs[0].Record, TTL: 0})
	res := s.RenewBatch(ctx, reqs)
	if len(res) != len(reqs) {
		t.Fatalf("got %d results, want %d", len(res), len(reqs))
	}
	for i := range n {
		if i%5 == 4 {
			wantKind(t, "stale element", res[i].Err, leaseapi.ErrStaleOwner)
			continue
		}
		if res[i].Err != nil || res[i].Record.Token != reqs[i].Record.Token || res[i].Record.GrantedTTL() != 3*time.Second {
			t.Fatalf("element %d: got (%v, ttl %v)", i, res[i].Err, res[i].Record.GrantedTTL())
		}
	}
	wantKind(t, "zero record", res[n].Err, leaseapi.ErrInvalidState)
	wantKind(t, "zero ttl", res[n+1].Err, leaseapi.ErrInvalidState)
	if got := s.RenewBatch(ctx, nil); len(got) != 0 {
		t.Fatalf("empty batch: got %d results", len(got))
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, r := range s.RenewBatch(canceled, reqs[:3]) {
		wantKind(t, "canceled batch", r.Err, leaseapi.ErrCanceled)
	}
}

// TestRenewBatchMixedTTLs: a batch whose renewals ask for different TTLs,
// interleaved (each script call serves one TTL, so the Store regroups
// them), renews each for its own TTL and answers in request order.
func TestRenewBatchMixedTTLs(t *testing.T) {
	c := newClient(t, serverAddr(t))
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	const n = 600 // more than one chunk of one TTL
	ttls := []time.Duration{3 * time.Second, 2 * time.Second, 5 * time.Second}
	reqs := make([]leaseapi.RenewRequest, n)
	for i := range reqs {
		rec, err := s.TryAcquire(ctx, leaseapi.MustKey("mixed", "k"+itoa(i)), ownerA, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 6 {
			rec.Owner = ownerB // stale
		}
		reqs[i] = leaseapi.RenewRequest{Record: rec, TTL: ttls[i%3]}
	}
	res := s.RenewBatch(ctx, reqs)
	for i, r := range res {
		if i%7 == 6 {
			wantKind(t, "stale element", r.Err, leaseapi.ErrStaleOwner)
			continue
		}
		if r.Err != nil || r.Record.Key != reqs[i].Record.Key || r.Record.Token != reqs[i].Record.Token || r.Record.GrantedTTL() != reqs[i].TTL {
			t.Fatalf("element %d: got %+v (%v, ttl %v), want ttl %v", i, r.Record, r.Err, r.Record.GrantedTTL(), reqs[i].TTL)
		}
		if v, err := s.Validate(ctx, r.Record); err != nil || v != r.Record {
			t.Fatalf("element %d: Validate: %+v, %v; want %+v", i, v, err, r.Record)
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
