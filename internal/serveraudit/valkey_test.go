package serveraudit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/internal/serveraudit"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// need skips (or, under LEASE_REQUIRE_BACKENDS=1, fails) without a server.
func need(t *testing.T, name string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if testenv.RequireBackends() {
		t.Fatalf("LEASE_REQUIRE_BACKENDS=1 but %s is not available: %v", name, err)
	}
	t.Skipf("%s not available: %v", name, err)
}

// script runs the same lease history on a store and returns the calls as
// their caller saw them: o1 acquires, renews and releases; o2 acquires
// with a short TTL and lets it expire; once expired is true (the server
// cleaned up, for Valkey, or the grant is past its expiry), o3 acquires.
func script(t *testing.T, s leaseapi.Backend, k leaseapi.Key, expired func(rec leaseapi.Record) bool) []serveraudit.Call {
	t.Helper()
	ctx := context.Background()
	var calls []serveraudit.Call
	acquire := func(owner string, ttl time.Duration) leaseapi.Record {
		sent := time.Now()
		rec, err := s.TryAcquire(ctx, k, owner, ttl)
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", owner, err)
		}
		calls = append(calls, serveraudit.Call{Client: owner, Op: serveraudit.OpAcquire, Key: k.String(), Owner: owner, Token: uint64(rec.Token),
			Sent: sent, Returned: time.Now(), Outcome: serveraudit.OK, Acquired: rec.AcquiredAt, Expires: rec.ExpiresAt})
		return rec
	}
	rec := acquire("o1", time.Second)
	sent := time.Now()
	rec, err := s.Renew(ctx, rec, time.Second)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	calls = append(calls, serveraudit.Call{Client: "o1", Op: serveraudit.OpRenew, Key: k.String(), Owner: "o1", Token: uint64(rec.Token),
		Sent: sent, Returned: time.Now(), Outcome: serveraudit.OK, Acquired: rec.AcquiredAt, Expires: rec.ExpiresAt})
	sent = time.Now()
	if err := s.Release(ctx, rec); err != nil {
		t.Fatalf("Release: %v", err)
	}
	calls = append(calls, serveraudit.Call{Client: "o1", Op: serveraudit.OpRelease, Key: k.String(), Owner: "o1", Token: uint64(rec.Token),
		Sent: sent, Returned: time.Now(), Outcome: serveraudit.OK})
	rec2 := acquire("o2", 30*time.Millisecond)
	for end := time.Now().Add(5 * time.Second); !expired(rec2); {
		if time.Now().After(end) {
			t.Fatalf("o2's grant never expired")
		}
		_ = backendtest.Pause(ctx, 10*time.Millisecond) // polling the server's state
	}
	acquire("o3", time.Second)
	return calls
}

func startAuditedRedis(t *testing.T) *testserver.RedisServer {
	t.Helper()
	srv, err := testserver.StartRedis(testserver.RedisOptions{AppendOnly: true, AppendFsync: "always",
		Args: []string{"--auto-aof-rewrite-percentage", "0"}})
	need(t, "valkey", err)
	t.Cleanup(srv.Stop)
	return srv
}

func valkeyStore(t *testing.T, addr, prefix string) *valkey.Store {
	t.Helper()
	c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey client: %v", err)
	}
	t.Cleanup(c.Close)
	s, err := valkey.New(c, valkey.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("valkey.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestReadAOF runs a lease history on a real server and reads it back
// from the append-only file: the records are the grants, the renewal,
// the release and the cleanup of the expired grant, with the times the
// store returned; C1 and C4 are clean. Another prefix's keys are not in it.
func TestReadAOF(t *testing.T) {
	srv := startAuditedRedis(t)
	s := valkeyStore(t, srv.Addr(), "audit")
	other := valkeyStore(t, srv.Addr(), "other")
	k := leaseapi.MustKey("n:s", "a{b}%/c") // exercises the key escaping
	if _, err := other.TryAcquire(context.Background(), k, "elsewhere", time.Second); err != nil {
		t.Fatalf("other prefix: %v", err)
	}
	lease, _ := s.Keys(k)
	calls := script(t, s, k, func(leaseapi.Record) bool {
		_, err := srv.Do("GET", lease)
		return err != nil // nil reply: the key expired, and the server deleted it
	})
	l, err := serveraudit.ReadAOF(srv.AppendOnlyDir(), "audit")
	if err != nil {
		t.Fatalf("ReadAOF: %v", err)
	}
	var kinds []string
	for _, r := range l.Records {
		if r.Key != k.String() {
			t.Errorf("record of key %q, want %q", r.Key, k.String())
		}
		kinds = append(kinds, string(r.Kind))
	}
	if got, want := strings.Join(kinds, " "), "grant renew end grant end grant"; got != want {
		t.Fatalf("records %q, want %q (%+v)", got, want, l.Records)
	}
	if vs := l.Check(); len(vs) != 0 {
		t.Errorf("C1: %v", vs)
	}
	rep := serveraudit.Match(l, calls)
	if len(rep.Violations) != 0 || rep.Successes != len(calls) {
		t.Errorf("C4: %d of %d successes found, violations %v", rep.Successes, len(calls), rep.Violations)
	}
	// The End after the release lies between the renewal and o2's grant;
	// the cleanup's lies at or after o2's expiry.
	if e := l.Records[2]; e.NotBefore.IsZero() || e.NotAfter.IsZero() || e.NotAfter.Before(e.NotBefore) {
		t.Errorf("release End bracket [%v, %v]", e.NotBefore, e.NotAfter)
	}
	if e := l.Records[4]; e.NotAfter.Before(l.Records[3].Expires) {
		t.Errorf("cleanup End before the grant expired: %v < %v", e.NotAfter, l.Records[3].Expires)
	}
}

// TestReadAOFDoctored: the same history with the last grant's token
// rewritten in the file to a lower one must fail C1. (A reader that
// cannot see a bad file proves nothing.)
func TestReadAOFDoctored(t *testing.T) {
	srv := startAuditedRedis(t)
	s := valkeyStore(t, srv.Addr(), "audit")
	k := leaseapi.MustKey("n", "k")
	lease, _ := s.Keys(k)
	script(t, s, k, func(leaseapi.Record) bool {
		_, err := srv.Do("GET", lease)
		return err != nil
	})
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(srv.AppendOnlyDir(), "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("append-only files: %v (%d)", err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".incr.aof") {
			// o3's grant: the lease value "1000000:3:o3" becomes token 2.
			doctored := strings.Replace(string(b), "\r\n1000000:3:o3\r\n", "\r\n1000000:2:o3\r\n", 1)
			if doctored == string(b) {
				t.Fatalf("no token 3 in the file")
			}
			b = []byte(doctored)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := serveraudit.ReadAOF(dir, "audit")
	if err != nil {
		t.Fatalf("ReadAOF: %v", err)
	}
	vs := l.Check()
	if len(vs) == 0 || vs[0].Rule != "token-order" {
		t.Errorf("C1 on the doctored file: %v, want token-order", vs)
	}
}

// TestReadAOFWithoutAOF: a server without the append-only file has no
// audit, and says so.
func TestReadAOFWithoutAOF(t *testing.T) {
	srv, err := testserver.StartRedis(testserver.RedisOptions{})
	need(t, "valkey", err)
	t.Cleanup(srv.Stop)
	if _, err := serveraudit.ReadAOF(srv.AppendOnlyDir(), "audit"); !errors.Is(err, serveraudit.ErrNoAOF) {
		t.Errorf("got %v, want ErrNoAOF", err)
	}
}
