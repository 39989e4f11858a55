package valkey_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/faultproxy"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// proxied returns a Store whose client talks to addr through a fault proxy,
// and a Store with the same prefix on a direct client, to look at the truth.
func proxied(t *testing.T, addr string) (p *faultproxy.Proxy, viaProxy, direct *valkey.Store) {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	prefix := uniquePrefix()
	// A short ConnWriteTimeout makes valkey-go give up a connection whose
	// replies stopped (a blackhole) quickly instead of after ~10s. One
	// pipeline connection, so that a cut armed after a successful call hits
	// the next script, not another connection's handshake.
	viaProxy = newStore(t, newClientOpt(t, vk.ClientOption{
		InitAddress:       []string{p.Addr()},
		ConnWriteTimeout:  300 * time.Millisecond,
		PipelineMultiplex: -1,
	}), valkey.Options{Prefix: prefix})
	direct = newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	// Load every script into the server's cache through the proxy, so that
	// the cut request below is the script itself, not an EVALSHA answered
	// by NOSCRIPT.
	warm := leaseapi.MustKey("ns", "warm")
	rec, err := viaProxy.TryAcquire(t.Context(), warm, ownerA, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = viaProxy.Renew(t.Context(), rec, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := viaProxy.Validate(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := viaProxy.Inspect(t.Context(), warm); err != nil {
		t.Fatal(err)
	}
	if err := viaProxy.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	return p, viaProxy, direct
}

// noLeak fails if err's text reveals any of the secrets.
func noLeak(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q reveals %q", err, s)
		}
	}
	if !strings.HasPrefix(err.Error(), "lease: ") {
		t.Fatalf("error %q lacks the lease: prefix", err)
	}
}

// eventually retries op until it succeeds (the client reconnects after a
// fault), for at most 5s.
func eventually(t *testing.T, what string, op func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = op(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond) // pacing reconnection attempts
	}
	t.Fatalf("%s: still failing after 5s: %v", what, err)
}

func TestFaultReplyLostAfterCommit(t *testing.T) {
	addr := serverAddr(t)
	p, s, direct := proxied(t, addr)
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "cut")

	// TryAcquire: the script runs, its reply is lost. Every cut picks its
	// request by the owner id, never a ping valkey-go sends on an idle
	// connection.
	done := p.CutAfterRequestContaining([]byte(ownerA))
	_, err := s.TryAcquire(ctx, k, ownerA, 5*time.Second)
	<-done
	wantKind(t, "TryAcquire with its reply lost", err, leaseapi.ErrAmbiguousOutcome)
	noLeak(t, err, addr, p.Addr(), ownerA, "cut")
	rec, held, err := direct.Inspect(ctx, k)
	if err != nil || !held || rec.Owner != ownerA {
		t.Fatalf("the ambiguous grant: got (owner %q, held %v, %v), want it held by the acquirer", rec.Owner, held, err)
	}
	// Never two holders: the key is contended for everyone else.
	_, err = direct.TryAcquire(ctx, k, ownerB, time.Second)
	wantKind(t, "TryAcquire of the ambiguous grant's key", err, leaseapi.ErrContended)

	// Renew: applied, reply lost. (Reconnect first, so that the cut hits
	// the script, not the new connection's handshake.)
	healthy(t, s, k)
	done = p.CutAfterRequestContaining([]byte(ownerA))
	_, err = s.Renew(ctx, rec, 10*time.Second)
	<-done
	wantKind(t, "Renew with its reply lost", err, leaseapi.ErrAmbiguousOutcome)
	after, _, err := direct.Inspect(ctx, k)
	if err != nil || !after.ExpiresAt.After(rec.ExpiresAt) {
		t.Fatalf("the ambiguous renewal was not applied: %v", err)
	}

	// Release: applied, reply lost; retrying it is safe (idempotent).
	healthy(t, s, k)
	done = p.CutAfterRequestContaining([]byte(ownerA))
	err = s.Release(ctx, rec)
	<-done
	wantKind(t, "Release with its reply lost", err, leaseapi.ErrAmbiguousOutcome)
	if _, held, err := direct.Inspect(ctx, k); err != nil || held {
		t.Fatalf("the ambiguous release was not applied: held %v, %v", held, err)
	}
	eventually(t, "retried Release", func() error { return s.Release(ctx, rec) })

	// Validate, a read: its failure is ErrBackendUnavailable.
	rec = acquireOK(t, direct, k)
	healthy(t, s, k)
	done = p.CutAfterRequestContaining([]byte(ownerA))
	_, err = s.Validate(ctx, rec)
	<-done
	wantKind(t, "Validate with its reply lost", err, leaseapi.ErrBackendUnavailable)
}

// healthy waits until s's connection works again.
func healthy(t *testing.T, s *valkey.Store, k leaseapi.Key) {
	t.Helper()
	eventually(t, "Inspect", func() error {
		_, _, err := s.Inspect(t.Context(), k)
		return err
	})
}

func acquireOK(t *testing.T, s *valkey.Store, k leaseapi.Key) leaseapi.Record {
	t.Helper()
	var rec leaseapi.Record
	eventually(t, "TryAcquire", func() error {
		var err error
		rec, err = s.TryAcquire(t.Context(), k, ownerA, 5*time.Second)
		return err
	})
	return rec
}

// The bound a call on a blackholed connection keeps: its ctx deadline,
// plus closeGrace when the call had to reconnect and its budget ran out
// before the new connection's handshake started (valkey-go then closes
// that connection politely: pipe.Close queues a PING and waits for it, up
// to a hard-coded second, before it closes the socket). loadSlack is what
// a loaded machine adds (a run with the race detector, five test binaries
// and two CPU burners on two cores took 2.46s once). What the limit
// catches is a wait of valkey-go's own: the 5s dial timeout, the 10s
// default ConnWriteTimeout.
const (
	blackholeTimeout = 150 * time.Millisecond
	closeGrace       = time.Second
	loadSlack        = 2 * time.Second
)

// boundedCall runs f with a ctx of blackholeTimeout and fails t if it
// takes longer than the bound above or returns anything but want.
func boundedCall(t *testing.T, p *faultproxy.Proxy, what string, want error, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), blackholeTimeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	if el, limit := time.Since(start), blackholeTimeout+closeGrace+loadSlack; el > limit {
		t.Fatalf("%s took %v, want at most %v (ctx %v)", what, el, limit, blackholeTimeout)
	}
	wantKind(t, what, err, want)
	noLeak(t, err, p.Target(), p.Addr(), ownerA)
}

func TestFaultBlackholeIsBoundedByContext(t *testing.T) {
	addr := serverAddr(t)
	p, s, direct := proxied(t, addr)
	k := leaseapi.MustKey("ns", "blackhole")
	rec := acquireOK(t, direct, k)
	p.Blackhole()
	call := func(what string, want error, f func(ctx context.Context) error) {
		t.Helper()
		boundedCall(t, p, what, want, f)
	}
	for range 2 { // the second round runs on a fresh (also blackholed) connection
		call("TryAcquire", leaseapi.ErrAmbiguousOutcome, func(ctx context.Context) error {
			_, err := s.TryAcquire(ctx, leaseapi.MustKey("ns", "blackhole-2"), ownerA, time.Second)
			return err
		})
		call("Renew", leaseapi.ErrAmbiguousOutcome, func(ctx context.Context) error {
			_, err := s.Renew(ctx, rec, time.Second)
			return err
		})
		call("Release", leaseapi.ErrAmbiguousOutcome, func(ctx context.Context) error { return s.Release(ctx, rec) })
		call("Guard", leaseapi.ErrAmbiguousOutcome, func(ctx context.Context) error {
			ck, _ := s.CacheKey(k, "c")
			return s.Guard(ctx, rec, ck, "v", 0)
		})
		call("Validate", leaseapi.ErrBackendUnavailable, func(ctx context.Context) error { _, err := s.Validate(ctx, rec); return err })
		call("Inspect", leaseapi.ErrBackendUnavailable, func(ctx context.Context) error {
			_, _, err := s.Inspect(ctx, k)
			return err
		})
		call("RenewBatch", leaseapi.ErrAmbiguousOutcome, func(ctx context.Context) error {
			return s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}})[0].Err
		})
	}
	p.Pass()
	eventually(t, "Validate after healing", func() error { _, err := s.Validate(t.Context(), rec); return err })
}

// TestFaultSlowDialIsBounded forces the worst case of the bound above: a
// call that reconnects to a blackholed server and whose dial uses up its
// whole budget still returns within ctx + closeGrace (+ loadSlack), with
// its failure classified.
func TestFaultSlowDialIsBounded(t *testing.T) {
	addr := serverAddr(t)
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var slow atomic.Bool
	c := newClientOpt(t, vk.ClientOption{
		InitAddress: []string{p.Addr()}, ConnWriteTimeout: 300 * time.Millisecond, PipelineMultiplex: -1,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", dst)
			if err == nil && slow.Load() {
				<-ctx.Done() // a dial that outlasts the call's budget, as on a loaded machine
			}
			return conn, err
		},
	})
	s := newStore(t, c, valkey.Options{})
	rec, err := s.TryAcquire(t.Context(), leaseapi.MustKey("ns", "slow-dial"), ownerA, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	slow.Store(true)
	p.ResetAll()
	// Each call dials anew: the previous handshake never completed.
	boundedCall(t, p, "Validate", leaseapi.ErrBackendUnavailable, func(ctx context.Context) error {
		_, err := s.Validate(ctx, rec)
		return err
	})
	boundedCall(t, p, "Renew", leaseapi.ErrAmbiguousOutcome, func(ctx context.Context) error {
		_, err := s.Renew(ctx, rec, time.Second)
		return err
	})
}

func TestFaultClientPauseFailsClosed(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c, valkey.Options{})
	k := leaseapi.MustKey("ns", "paused")
	rec, err := s.TryAcquire(t.Context(), k, ownerA, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("CLIENT", "PAUSE", "1500", "ALL"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	start := time.Now()
	_, err = s.Renew(ctx, rec, 2*time.Second)
	cancel()
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Renew during CLIENT PAUSE took %v, want about 150ms", el)
	}
	wantKind(t, "Renew during CLIENT PAUSE", err, leaseapi.ErrAmbiguousOutcome)
	ctx, cancel = context.WithTimeout(t.Context(), 150*time.Millisecond)
	_, err = s.Validate(ctx, rec)
	wantKind(t, "Validate during CLIENT PAUSE", err, leaseapi.ErrBackendUnavailable)
	cancel()
	// After the pause the server runs what it queued: the lease is still
	// the acquirer's, and the client recovers.
	eventually(t, "Validate after the pause", func() error { _, err := s.Validate(t.Context(), rec); return err })
}

func TestRestartKeepsTokensWithAppendOnly(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{AppendOnly: true, AppendFsync: "always"})
	c := newClient(t, srv.Addr())
	s := newStore(t, c, valkey.Options{})
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "durable")
	var last leaseapi.Record
	for range 3 {
		rec, err := s.TryAcquire(ctx, k, ownerA, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, rec); err != nil {
			t.Fatal(err)
		}
		last = rec
	}
	held, err := s.TryAcquire(ctx, leaseapi.MustKey("ns", "held"), ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	srv.Kill() // a crash
	// While the server is down, mutations fail without a grant, and once
	// the connection is known dead, with ErrBackendUnavailable (the dial
	// fails before anything is sent).
	sawUnavailable := false
	for range 20 {
		_, err := s.TryAcquire(ctx, k, ownerB, time.Second)
		switch leaseapi.Kind(err) {
		case leaseapi.ErrBackendUnavailable:
			sawUnavailable = true
		case leaseapi.ErrAmbiguousOutcome:
		default:
			t.Fatalf("TryAcquire while down: got %v, want unavailable or ambiguous", err)
		}
		noLeak(t, err, srv.Addr())
		if sawUnavailable {
			break
		}
	}
	if !sawUnavailable {
		t.Fatal("TryAcquire against a dead server never reported ErrBackendUnavailable")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}

	// The restarted server has an empty script cache: EVALSHA falls back to
	// EVAL. The token continues where it was; the held lease is still held.
	var rec leaseapi.Record
	eventually(t, "TryAcquire after restart", func() error {
		var err error
		rec, err = s.TryAcquire(ctx, k, ownerB, time.Second)
		return err
	})
	if rec.Token <= last.Token {
		t.Fatalf("token after restart: got %d, want > %d", rec.Token, last.Token)
	}
	if _, err := s.Validate(ctx, held); err != nil {
		t.Fatalf("held lease after restart: %v", err)
	}
	// The batched path falls back from EVALSHA too.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "RenewBatch after restart", func() error {
		return s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: held, TTL: 10 * time.Second}})[0].Err
	})
}

// TestRestartWithoutPersistenceLosesTokens documents the hazard the package
// doc describes: a server without persistence forgets its token counters.
func TestRestartWithoutPersistenceLosesTokens(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	s := newStore(t, newClient(t, srv.Addr()), valkey.Options{})
	k := leaseapi.MustKey("ns", "volatile")
	for range 2 {
		rec, err := s.TryAcquire(t.Context(), k, ownerA, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var rec leaseapi.Record
	eventually(t, "TryAcquire after restart", func() error {
		var err error
		rec, err = s.TryAcquire(t.Context(), k, ownerA, time.Second)
		return err
	})
	if rec.Token != 1 {
		t.Fatalf("token after a restart without persistence: got %d; the doc says it starts again at 1", rec.Token)
	}
}

func TestWatchersWokenOnReconnect(t *testing.T) {
	addr := serverAddr(t)
	p, waiter, holder := proxied(t, addr)
	warmWatch(t, waiter, holder)
	k := leaseapi.MustKey("ns", "reconnect")
	ch, stop := waiter.WatchRelease(k)
	defer stop()

	// The subscription's connection dies: releases may be missed while it
	// is down, so every watch is woken once.
	p.ResetAll()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watch not woken after the subscription's connection was reset")
	}
	// The subscription comes back by itself and delivers again.
	rec := acquireOK(t, holder, k)
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The reset killed the waiter's script connection too: its first
		// attempt may meet the dead connection before valkey-go redials.
		// The key is held, so no attempt can grant it; repeat until one is
		// answered (contended), which is what marks the waiter.
		eventually(t, "the waiter's attempt after the reset", func() error {
			_, err := waiter.TryAcquire(t.Context(), k, "owner-waiting-0123456789", time.Second)
			if err == nil {
				t.Fatal("the waiter was granted a key the holder holds")
			}
			if leaseapi.Kind(err) == leaseapi.ErrContended {
				return nil
			}
			return err
		})
		if err := holder.Release(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no notification after the subscription came back")
		}
		rec = acquireOK(t, holder, k)
	}
}

// TestOutOfMemoryWritesNothing: a server out of memory (noeviction)
// refuses every mutation script before it runs (the shebang makes it check
// up front), so the refusal is ErrBackendUnavailable and nothing, not even
// the token counter, changed; the read-only scripts still answer.
func TestOutOfMemoryWritesNothing(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{Args: []string{"--maxmemory-policy", "noeviction"}})
	s := newStore(t, newClient(t, srv.Addr()), valkey.Options{})
	ctx := t.Context()
	k := leaseapi.MustKey("ns", "oom")
	rec, err := s.TryAcquire(ctx, k, ownerA, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, leaseapi.MustKey("ns", "oom-other"), ownerA, time.Second)
	wantKind(t, "TryAcquire out of memory", err, leaseapi.ErrBackendUnavailable)
	_, err = s.Renew(ctx, rec, 5*time.Second)
	wantKind(t, "Renew out of memory", err, leaseapi.ErrBackendUnavailable)
	ck, _ := s.CacheKey(k, "c")
	wantKind(t, "Guard out of memory", s.Guard(ctx, rec, ck, "v", 0), leaseapi.ErrBackendUnavailable)
	wantKind(t, "Release out of memory", s.Release(ctx, rec), leaseapi.ErrBackendUnavailable)
	if _, err := s.Validate(ctx, rec); err != nil {
		t.Fatalf("Validate out of memory: got %v, want nil", err)
	}
	if got, held, err := s.Inspect(ctx, leaseapi.MustKey("ns", "oom-other")); err != nil || held || got.Token != 0 {
		t.Fatalf("refused acquisition: got (token %d, held %v, %v), want nothing written", got.Token, held, err)
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	next, err := s.TryAcquire(ctx, k, ownerB, time.Second)
	if err != nil || next.Token != rec.Token+1 {
		t.Fatalf("after OOM: got (token %d, %v), want token %d", next.Token, err, rec.Token+1)
	}
}
