package valkey_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/faultproxy"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

// lateEnv is the set-up of the late-execution tests: a private server
// (CLIENT PAUSE holds back every client's writes), Stores that reach it
// through fault proxies, and a direct client and Store to read the truth.
type lateEnv struct {
	srv    *testserver.RedisServer
	c      vk.Client // direct: TIME, GET, PEXPIRETIME
	direct *valkey.Store
	prefix string
}

func newLateEnv(t *testing.T) *lateEnv {
	t.Helper()
	srv := privateServer(t, testserver.RedisOptions{})
	c := newClient(t, srv.Addr())
	prefix := uniquePrefix()
	return &lateEnv{srv: srv, c: c, direct: newStore(t, c, valkey.Options{Prefix: prefix}), prefix: prefix}
}

// viaProxy returns a new proxy to the server and a Store (the env's prefix)
// on a one-connection client through it, warmed up: every script is in the
// server's cache, so the held-back request is the script itself, and the
// Store has learnt the server's clock from a reply.
func (e *lateEnv) viaProxy(t *testing.T, o valkey.Options) (*faultproxy.Proxy, *valkey.Store) {
	t.Helper()
	p, err := faultproxy.New(e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	o.Prefix = e.prefix
	s := newStore(t, newClientOpt(t, vk.ClientOption{
		InitAddress:       []string{p.Addr()},
		PipelineMultiplex: -1,
	}), o)
	warm := leaseapi.MustKey("late", "warm")
	rec, err := s.TryAcquire(t.Context(), warm, ownerA, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = s.Renew(t.Context(), rec, time.Second); err != nil {
		t.Fatal(err)
	}
	if r := s.RenewBatch(t.Context(), []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if err := s.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	return p, s
}

// state is k's lease key (value and expiry) and token counter as the
// server holds them.
func (e *lateEnv) state(t *testing.T, k leaseapi.Key) string {
	t.Helper()
	lk, tk := e.direct.Keys(k)
	v, err := e.c.Do(t.Context(), e.c.B().Get().Key(lk).Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		t.Fatal(err)
	}
	pet, err := e.c.Do(t.Context(), e.c.B().Pexpiretime().Key(lk).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := e.c.Do(t.Context(), e.c.B().Get().Key(tk).Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		t.Fatal(err)
	}
	return "lease{" + v + " pxat " + strconv.FormatInt(pet, 10) + "} counter=" + tok
}

// serverNow reads the server's clock (µs since the epoch).
func (e *lateEnv) serverNow(t *testing.T) int64 {
	t.Helper()
	tm, err := e.c.Do(t.Context(), e.c.B().Time().Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		t.Fatalf("TIME: %v %v", tm, err)
	}
	sec, err1 := strconv.ParseInt(tm[0], 10, 64)
	us, err2 := strconv.ParseInt(tm[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME: %v", tm)
	}
	return sec*1_000_000 + us
}

func waitProxy(t *testing.T, p *faultproxy.Proxy, what string, cond func(faultproxy.Stats) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.WaitFor(ctx, cond); err != nil {
		t.Fatalf("waiting for %s: %v (stats %+v)", what, err, p.Stats())
	}
}

// lateRig is the conformance suite's LateRig on Valkey: the server holds
// writes back (CLIENT PAUSE WRITE) while the call runs on a Store whose one
// connection goes through a fault proxy; once the server holds the request
// back, the proxy detaches it (the client sees its connection reset, the
// server keeps the connection and the queued script). With a deadline, the
// rig waits until the server's clock is past the bound the request carried,
// then ends the pause and waits until the server has run the script (its
// reply arrives at the proxy, which drains it).
func (e *lateEnv) lateRig(t *testing.T) *simtest.LateRig {
	t.Helper()
	p, s := e.viaProxy(t, valkey.Options{})
	paused := false
	unpause := func(t *testing.T) {
		if paused {
			if _, err := e.srv.Do("CLIENT", "UNPAUSE"); err != nil {
				t.Fatal(err)
			}
			paused = false
		}
	}
	t.Cleanup(func() { unpause(t) })
	return &simtest.LateRig{
		Backend: s,
		Direct:  e.direct,
		Hold: func(t *testing.T, _ leaseapi.Key) {
			if _, err := e.srv.Do("CLIENT", "PAUSE", "60000", "WRITE"); err != nil {
				t.Fatal(err)
			}
			paused = true
		},
		WaitHeld: func(t *testing.T, errc <-chan error) {
			// The server counts a client whose command the pause postpones
			// as blocked: only then is the script queued on the server.
			eventually(t, "the request to be held back by the server", func() error {
				select {
				case err := <-errc:
					t.Fatalf("the call returned before it was held back: %v", err)
				default:
				}
				info, err := e.srv.Do("INFO", "clients")
				if err == nil && !strings.Contains(info, "blocked_clients:1\r\n") {
					err = fmt.Errorf("not blocked yet")
				}
				return err
			})
		},
		Cut: func(*testing.T) { p.Detach() },
		WaitPast: func(t *testing.T, deadline time.Time, _ time.Duration) {
			bound := valkey.BoundAt(s, deadline)
			if bound == 0 {
				t.Fatal("the Store sent no bound: it has no estimate of the server's clock")
			}
			// 1ms more for the rounding of BoundAt's own arithmetic.
			eventually(t, "the server's clock to pass the request's bound", func() error {
				if now := e.serverNow(t); now <= bound+1000 {
					return fmt.Errorf("server time %d, bound %d", now, bound)
				}
				return nil
			})
		},
		Release: func(t *testing.T) {
			dropped := p.Stats().Dropped
			unpause(t)
			waitProxy(t, p, "the server to run the held-back script", func(st faultproxy.Stats) bool { return st.Dropped > dropped })
		},
	}
}

// TestLateExecutionIsNoop is the conformance suite's not-after check
// (scenario 7 with the not-after bound) on a private server, which CLIENT
// PAUSE holds back as a whole: a mutation that the server runs after its
// caller's deadline writes nothing, and the control run, without a ctx
// deadline, does apply late.
func TestLateExecutionIsNoop(t *testing.T) {
	e := newLateEnv(t)
	simtest.CheckLateExecution(t, simtest.Harness{
		New:  func(*testing.T) leaseapi.Backend { return e.direct },
		Late: func(t *testing.T, _ leaseapi.Backend) *simtest.LateRig { return e.lateRig(t) },
	})
}

// lateCases are the scripts that grant or extend. setup prepares key k:
// free for an acquisition, held by ownerA for a renewal.
var lateCases = []struct {
	name  string
	setup func(t *testing.T, e *lateEnv, k leaseapi.Key) leaseapi.Record
	call  func(ctx context.Context, s *valkey.Store, k leaseapi.Key, rec leaseapi.Record) error
}{
	{"TryAcquire",
		func(t *testing.T, e *lateEnv, k leaseapi.Key) leaseapi.Record {
			rec := acquireOK(t, e.direct, k) // leaves the counter at 1, the key free
			if err := e.direct.Release(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
			return leaseapi.Record{}
		},
		func(ctx context.Context, s *valkey.Store, k leaseapi.Key, _ leaseapi.Record) error {
			_, err := s.TryAcquire(ctx, k, ownerB, time.Minute)
			return err
		}},
	{"Renew",
		func(t *testing.T, e *lateEnv, k leaseapi.Key) leaseapi.Record { return acquireOK(t, e.direct, k) },
		func(ctx context.Context, s *valkey.Store, k leaseapi.Key, rec leaseapi.Record) error {
			_, err := s.Renew(ctx, rec, time.Minute)
			return err
		}},
	{"RenewBatch",
		func(t *testing.T, e *lateEnv, k leaseapi.Key) leaseapi.Record { return acquireOK(t, e.direct, k) },
		func(ctx context.Context, s *valkey.Store, k leaseapi.Key, rec leaseapi.Record) error {
			return s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}})[0].Err
		}},
}

// TestLateStatusIsNotApplied: a Store whose estimate of the server's clock
// is too low (as a forward step of the server's clock leaves it) sends a
// bound that a prompt request already misses. The script writes nothing,
// the call fails with a definite ErrBackendUnavailable (not ambiguous), and
// the reply's server time corrects the estimate: the next call applies.
// With WaitReplicas, the late acquisition burns no token and waits for no
// replica.
func TestLateStatusIsNotApplied(t *testing.T) {
	e := newLateEnv(t)
	for _, tc := range lateCases {
		t.Run(tc.name, func(t *testing.T) {
			k := leaseapi.MustKey("skew", tc.name)
			rec := tc.setup(t, e, k)
			_, s := e.viaProxy(t, valkey.Options{})
			before := e.state(t, k)
			valkey.SkewClock(s, -10*time.Second)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			err := tc.call(ctx, s, k, rec)
			wantKind(t, tc.name+" with a bound already passed", err, leaseapi.ErrBackendUnavailable)
			if !strings.Contains(err.Error(), "not applied") {
				t.Errorf("error %q does not say it was not applied", err)
			}
			noLeak(t, err, ownerA, ownerB, k.String(), e.prefix)
			if after := e.state(t, k); after != before {
				t.Fatalf("the late %s changed the server's state:\nbefore %s\nafter  %s", tc.name, before, after)
			}
			if err := tc.call(ctx, s, k, rec); err != nil {
				t.Fatalf("%s after the late reply refreshed the estimate: %v", tc.name, err)
			}
			if after := e.state(t, k); after == before {
				t.Fatalf("the second %s did not apply", tc.name)
			}
		})
	}
	t.Run("TryAcquireWaitReplicas", func(t *testing.T) {
		k := leaseapi.MustKey("skew", "wait")
		s := newStore(t, e.c, valkey.Options{Prefix: e.prefix, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
		// No deadline, no bound; the reply (a grant, released again for
		// want of a replica) teaches s the server's clock.
		_, err := s.TryAcquire(t.Context(), k, ownerB, time.Minute)
		wantKind(t, "TryAcquire without a deadline, no replica", err, leaseapi.ErrBackendUnavailable)
		if strings.Contains(err.Error(), "not applied") {
			t.Fatalf("without a deadline the acquisition was refused as late: %v", err)
		}
		before := e.state(t, k) // token 1 burnt by the refused acquisition
		valkey.SkewClock(s, -10*time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = s.TryAcquire(ctx, k, ownerB, time.Minute)
		wantKind(t, "late TryAcquire with WaitReplicas", err, leaseapi.ErrBackendUnavailable)
		if !strings.Contains(err.Error(), "not applied") {
			t.Errorf("error %q does not say it was not applied", err)
		}
		if after := e.state(t, k); after != before {
			t.Fatalf("the late acquisition changed the server's state:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// TestBoundOnThePromptPath: with an estimate of the server's clock, every
// mutation carries a bound that is never earlier than the caller's
// deadline in server time (same machine: the server's clock is ours) and
// not much later; prompt requests apply as before, with or without a
// deadline.
func TestBoundOnThePromptPath(t *testing.T) {
	e := newLateEnv(t)
	_, s := e.viaProxy(t, valkey.Options{})
	dl := time.Now().Add(time.Second)
	bound := valkey.BoundAt(s, dl)
	if bound < dl.UnixMicro() || bound > dl.Add(250*time.Millisecond).UnixMicro() {
		t.Fatalf("bound %d for a deadline at %d: want within [deadline, deadline + 250ms]", bound, dl.UnixMicro())
	}
	for _, tc := range lateCases {
		for _, deadline := range []bool{true, false} {
			k := leaseapi.MustKey("prompt", fmt.Sprintf("%s-%v", tc.name, deadline))
			rec := tc.setup(t, e, k)
			before := e.state(t, k)
			ctx, cancel := context.WithCancel(t.Context())
			if deadline {
				ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
			}
			err := tc.call(ctx, s, k, rec)
			cancel()
			if err != nil {
				t.Fatalf("%s (deadline %v): %v", tc.name, deadline, err)
			}
			if after := e.state(t, k); after == before {
				t.Fatalf("%s (deadline %v) did not apply", tc.name, deadline)
			}
		}
	}
}
