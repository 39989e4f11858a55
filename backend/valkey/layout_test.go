package valkey_test

import (
	"errors"
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
// release channel, and the commands its scripts and subscription run,
// ending with functionRules.
func storeRules(p string) []string {
	return append([]string{"~" + p + ":*", "&" + p + ":*", "+evalsha", "+eval", "+subscribe", "+ping", "+hello",
		"+time", "+get", "+mget", "+set", "+setrange", "+exists", "+incr", "+del", "+publish", "+pexpireat",
		"+pexpiretime", "+zadd", "+zrem", "+zpopmin"}, functionRules...)
}

// functionRules let a Store run its scripts as functions (functions.go);
// without them it runs them by EVALSHA.
var functionRules = []string{"+fcall", "+function|load"}

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

// TestConfigurationErrors: an ACL user without a permission the Store
// needs, and a password that no longer works, fail as
// ErrBackendUnavailable with a message that says "configuration" (and
// nothing of the server's text), and errors.As reaches valkey-go's error
// for a caller who asks.
func TestConfigurationErrors(t *testing.T) {
	addr := serverAddr(t)
	admin := newClient(t, addr)
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "config")
	check := func(what string, err error, code string) {
		t.Helper()
		wantKind(t, what, err, leaseapi.ErrBackendUnavailable)
		if !strings.Contains(err.Error(), "configuration:") {
			t.Errorf("%s: %q does not say it is a configuration failure", what, err)
		}
		var ve *vk.ValkeyError
		if !errors.As(err, &ve) || !strings.HasPrefix(ve.Error(), code) && !strings.Contains(ve.Error(), " "+code+" ") {
			t.Errorf("%s: errors.As does not reach the server's %s error (%v)", what, code, ve)
		}
		for _, secret := range []string{"wrong-pw", "right-pw", code, "permission", addr} {
			if strings.Contains(err.Error(), secret) && secret != "permission" {
				t.Errorf("%s: %q reveals %q", what, err, secret)
			}
		}
	}

	// A user whose ACL lacks TIME (which the acquire script calls), used
	// on its own prefix and on another one, outside its key pattern.
	prefix := "cfg-" + uniquePrefix()
	noTime := "nt-" + uniquePrefix()
	rules := slices.DeleteFunc(storeRules(prefix), func(r string) bool { return r == "+time" })
	aclUser(t, admin, noTime, "right-pw", rules...)
	c := newClientOpt(t, vk.ClientOption{InitAddress: []string{addr}, Username: noTime, Password: "right-pw"})
	s := newStore(t, c, valkey.Options{Prefix: prefix})
	// Redis 7.0 refuses a command the script may not run with a script
	// error that has no code: it is not told apart from other refusals,
	// but the driver's error is there for a caller who asks.
	_, err := s.TryAcquire(ctx, k, ownerA, time.Second)
	wantKind(t, "TryAcquire without +time", err, leaseapi.ErrBackendUnavailable)
	if ve := (*vk.ValkeyError)(nil); !errors.As(err, &ve) {
		t.Errorf("TryAcquire without +time: errors.As does not reach the server's error: %v", err)
	}
	other := newStore(t, c, valkey.Options{Prefix: "elsewhere-" + uniquePrefix()})
	_, _, err = other.Inspect(ctx, k)
	check("Inspect outside the key pattern", err, "NOPERM")

	// The password changes under a connected client (a rotation): its
	// connections are killed, and the reconnection is refused.
	rotated := "rot-" + uniquePrefix()
	aclUser(t, admin, rotated, "right-pw", storeRules(prefix)...)
	rc := newClientOpt(t, vk.ClientOption{InitAddress: []string{addr}, Username: rotated, Password: "right-pw"})
	rs := newStore(t, rc, valkey.Options{Prefix: prefix})
	if _, err := rs.TryAcquire(ctx, k, ownerA, time.Second); err != nil {
		t.Fatalf("TryAcquire before the rotation: %v", err)
	}
	if err := admin.Do(ctx, admin.B().Arbitrary("ACL").Args("SETUSER", rotated, "resetpass", ">wrong-pw").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, admin.B().Arbitrary("CLIENT").Args("KILL", "USER", rotated).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var last error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		_, _, last = rs.Inspect(ctx, k)
		if last != nil && strings.Contains(last.Error(), "configuration:") {
			break
		}
	}
	check("Inspect after the password changed", last, "WRONGPASS")
}
