package valkey_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// aclUser creates a user on the shared server with the given ACL rules
// (after "on" and its password) and deletes it when t ends.
func aclUser(t *testing.T, admin vk.Client, name, password string, rules ...string) {
	t.Helper()
	args := append([]string{"SETUSER", name, "reset", "on", ">" + password}, rules...)
	if err := admin.Do(t.Context(), admin.B().Arbitrary("ACL").Args(args...).Build()).Error(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() {
		_ = admin.Do(t.Context(), admin.B().Arbitrary("ACL").Args("DELUSER", name).Build()).Error()
	})
}

// storeRules are the ACL rules a Store needs under prefix p: its keys, its
// release channel, and the commands its scripts and subscription run.
func storeRules(p string) []string {
	return []string{"~" + p + ":*", "&" + p + ":*", "+evalsha", "+eval", "+subscribe", "+ping", "+hello",
		"+time", "+get", "+mget", "+set", "+setrange", "+exists", "+incr", "+del", "+publish", "+pexpireat",
		"+pexpiretime"}
}

// TestPrefixIsAKeyPrefix runs every operation as an ACL user that may touch
// only keys and channels under "myapp:", and lists the keys with SCAN MATCH
// "myapp:*".
func TestPrefixIsAKeyPrefix(t *testing.T) {
	addr := serverAddr(t)
	admin := newClient(t, addr)
	prefix := "myapp-" + uniquePrefix()
	user := "u-" + uniquePrefix()
	aclUser(t, admin, user, "secret-pw", storeRules(prefix)...)
	c := newClientOpt(t, vk.ClientOption{InitAddress: []string{addr}, Username: user, Password: "secret-pw"})
	s := newStore(t, c, valkey.Options{Prefix: prefix})
	ctx := t.Context()

	k := leaseapi.MustKey("ns", "we}ird{na:me")
	other := leaseapi.MustKey("ns", "other")
	rec, err := s.TryAcquire(ctx, k, ownerA, time.Second)
	if err != nil {
		t.Fatalf("TryAcquire as the restricted user: %v", err)
	}
	if rec, err = s.Renew(ctx, rec, time.Second); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if _, held, err := s.Inspect(ctx, k); err != nil || !held {
		t.Fatalf("Inspect: held %v, %v", held, err)
	}
	ck, err := s.CacheKey(k, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Guard(ctx, rec, ck, "x", time.Minute); err != nil {
		t.Fatalf("Guard: %v", err)
	}
	got := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}})
	if got[0].Err != nil {
		t.Fatalf("RenewBatch: %v", got[0].Err)
	}
	if _, err := s.TryAcquire(ctx, other, ownerB, time.Second); err != nil {
		t.Fatalf("TryAcquire of a second key: %v", err)
	}

	// Every key of the Store starts with "prefix:".
	lease, token := s.Keys(k)
	want := []string{ck, lease, token}
	lo, to := s.Keys(other)
	want = append(want, lo, to)
	slices.Sort(want)
	var found []string
	cursor := uint64(0)
	for {
		e, err := admin.Do(ctx, admin.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(found)
	if !slices.Equal(found, want) {
		t.Fatalf("SCAN MATCH %s:*: got %q, want %q", prefix, found, want)
	}
	for _, key := range want {
		if !strings.HasPrefix(key, prefix+":{") {
			t.Fatalf("key %q does not start with %q", key, prefix+":{")
		}
	}

	// The release notification reaches the restricted user's subscription
	// (through the server: a second Store on the same client).
	s2 := newStore(t, c, valkey.Options{Prefix: prefix})
	warmWatch(t, s2, s)
	woke2, stop2 := s2.WatchRelease(k)
	defer stop2()
	markWaiting(t, s2, k)
	if err := s.Release(ctx, rec); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-woke2:
	case <-time.After(10 * time.Second):
		t.Fatal("no release notification through the restricted user's subscription")
	}

	// The same user cannot touch another prefix: its keys are outside the
	// pattern, and the server refuses the script before it runs.
	s3 := newStore(t, c, valkey.Options{Prefix: "elsewhere-" + uniquePrefix()})
	_, err = s3.TryAcquire(ctx, k, ownerA, time.Second)
	wantKind(t, "TryAcquire outside the user's key pattern", err, leaseapi.ErrBackendUnavailable)
}
