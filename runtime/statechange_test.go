package runtime_test

import (
	"context"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// changeLog collects the state changes a client delivers.
type changeLog struct {
	mu  sync.Mutex
	got []runtime.StateChange
}

func (l *changeLog) hook(sc runtime.StateChange) {
	l.mu.Lock()
	l.got = append(l.got, sc)
	l.mu.Unlock()
}

// take returns the changes delivered so far (after the bubble settled)
// and forgets them.
func (l *changeLog) take() []runtime.StateChange {
	simtest.Settle()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

var fleetHasher = func() *runtime.KeyHasher {
	h, err := runtime.NewKeyHasher([]byte("fleet-wide telemetry secret"))
	if err != nil {
		panic(err)
	}
	return h
}()

// wantChanges checks the changes of one handle, in order.
func wantChanges(t *testing.T, got []runtime.StateChange, h *runtime.Handle, want ...runtime.StateChange) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("state changes: got %v, want %v", got, want)
	}
	for i, g := range got {
		w := want[i]
		if g.From != w.From || g.To != w.To || g.Cause != w.Cause {
			t.Fatalf("change %d: got %v -> %v (cause %v), want %v -> %v (cause %v)", i, g.From, g.To, g.Cause, w.From, w.To, w.Cause)
		}
		if g.Token != h.Token() || g.KeyHash != fleetHasher.Hash(h.Key()) || g.At.IsZero() {
			t.Fatalf("change %d: got token %d, hash %q, at %v; want token %d, hash %q, a time", i, g.Token, g.KeyHash, g.At, h.Token(), fleetHasher.Hash(h.Key()))
		}
		for _, secret := range []string{h.Key().String(), h.Key().Name(), h.Owner()} {
			if containsFold(g.String()+g.KeyHash, secret) {
				t.Fatalf("change %q reveals %q", g, secret)
			}
		}
	}
}

func change(from, to leaseapi.State, cause error) runtime.StateChange {
	return runtime.StateChange{From: from, To: to, Cause: cause}
}

// regressing is a backend whose renewals answer with another token.
type regressing struct{ leaseapi.Backend }

func (r regressing) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	out, err := r.Backend.Renew(ctx, rec, ttl)
	out.Token++
	return out, err
}

// TestStateChangeEvents: each transition of the safety scenarios produces
// its event with the right cause, and the metrics count it, and the loss
// by its cause.
func TestStateChangeEvents(t *testing.T) {
	const (
		active    = leaseapi.StateActive
		uncertain = leaseapi.StateUncertain
		expired   = leaseapi.StateExpired
		lost      = leaseapi.StateLost
		released  = leaseapi.StateReleased
	)
	for _, tc := range []struct {
		name     string
		scenario func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy)
		want     []runtime.StateChange
		loss     runtime.LossCause
	}{
		{"renewal reply lost, then validated", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			b.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply)
			wantKind(t, "renew", h.Renew(t.Context()), leaseapi.ErrAmbiguousOutcome)
			if err := h.Validate(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, []runtime.StateChange{
			change(active, uncertain, leaseapi.ErrAmbiguousOutcome),
			change(uncertain, active, nil),
			change(active, released, nil),
		}, 0},
		{"deadline", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			simtest.Advance(p.TTL())
			<-h.Done()
		}, []runtime.StateChange{change(active, expired, leaseapi.ErrLost)}, runtime.LossExpired},
		{"deadline while unavailable", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			b.faulty.Inject(leaseapi.OperationRenew, simtest.FailBeforeSend)
			wantKind(t, "renew", h.Renew(t.Context()), leaseapi.ErrBackendUnavailable)
			simtest.Advance(p.TTL())
			<-h.Done()
		}, []runtime.StateChange{
			change(active, uncertain, leaseapi.ErrBackendUnavailable),
			change(uncertain, expired, leaseapi.ErrLost),
		}, runtime.LossUnavailable},
		{"deadline while ambiguous", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			b.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply)
			wantKind(t, "renew", h.Renew(t.Context()), leaseapi.ErrAmbiguousOutcome)
			simtest.Advance(p.TTL())
			<-h.Done()
		}, []runtime.StateChange{
			change(active, uncertain, leaseapi.ErrAmbiguousOutcome),
			change(uncertain, expired, leaseapi.ErrLost),
		}, runtime.LossAmbiguous},
		{"stale owner", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			b.faulty.Inject(leaseapi.OperationRenew, simtest.Stale)
			wantKind(t, "renew", h.Renew(t.Context()), leaseapi.ErrStaleOwner)
			<-h.Done()
		}, []runtime.StateChange{change(active, lost, leaseapi.ErrStaleOwner)}, runtime.LossStale},
		{"release", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			if err := h.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			<-h.Done()
		}, []runtime.StateChange{change(active, released, nil)}, 0},
		{"managed renewal keeps failing", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			if _, err := h.StartManaged(t.Context()); err != nil {
				t.Fatal(err)
			}
			b.faulty.SetMode(simtest.Down)
			simtest.Advance(p.TTL())
			<-h.Done()
		}, []runtime.StateChange{
			change(active, uncertain, leaseapi.ErrBackendUnavailable),
			change(uncertain, expired, leaseapi.ErrLost),
		}, runtime.LossUnavailable},
		{"client closed with the backend down", func(t *testing.T, b *bundle, h *runtime.Handle, p leaseapi.Policy) {
			b.faulty.SetMode(simtest.Down)
			wantKind(t, "Close with the backend down", b.client.Close(t.Context()), leaseapi.ErrBackendUnavailable)
			b.closeFailed = true
		}, []runtime.StateChange{change(active, lost, leaseapi.ErrLost)}, runtime.LossClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				var log changeLog
				o := runtimeOpts()
				o.OnStateChange, o.KeyHasher = log.hook, fleetHasher
				b := setup(t, o)
				p := basicPolicy(t)
				h := mustAcquire(t, b.client, testKey(t, "payroll-secret"), p)
				tc.scenario(t, b, h, p)
				wantChanges(t, log.take(), h, tc.want...)
				m := b.client.Metrics()
				for _, w := range tc.want {
					if got := m.StateChange(w.From, w.To); got != 1 {
						t.Errorf("metrics %v -> %v: got %d, want 1", w.From, w.To, got)
					}
				}
				if len(m.StateChanges) != len(tc.want) {
					t.Errorf("transition series: got %v, want %d", m.StateChanges, len(tc.want))
				}
				var losses uint64
				for _, l := range m.Losses {
					losses += l.N
				}
				if tc.loss != 0 && (m.Loss(tc.loss) != 1 || losses != 1) || tc.loss == 0 && losses != 0 {
					t.Errorf("losses: got %v, want one %v", m.Losses, tc.loss)
				}
				if m.StateChangesDropped != 0 {
					t.Errorf("dropped: got %d, want 0", m.StateChangesDropped)
				}
				b.faulty.SetMode(simtest.Pass)
			})
		})
	}
}

// TestStateChangeRegression: a renewal that changes the grant's token ends
// the handle Lost with ErrFencingRegression.
func TestStateChangeRegression(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := simtestStore(t)
		if err != nil {
			t.Fatal(err)
		}
		var log changeLog
		c, err := runtime.NewClient(regressing{store}, runtime.ClientOptions{OnStateChange: log.hook, KeyHasher: fleetHasher})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		h := mustAcquire(t, c, testKey(t, "ledger-7f3a"), basicPolicy(t))
		wantKind(t, "renew", h.Renew(t.Context()), leaseapi.ErrFencingRegression)
		<-h.Done()
		wantChanges(t, log.take(), h, change(leaseapi.StateActive, leaseapi.StateLost, leaseapi.ErrFencingRegression))
		if got := c.Metrics().Loss(runtime.LossRegression); got != 1 {
			t.Fatalf("regression losses: got %d, want 1", got)
		}
	})
}

// goexiting is a backend whose renewals end the calling goroutine (as a
// test backend's t.FailNow would; a panic does the same on its way out).
type goexiting struct{ leaseapi.Backend }

func (goexiting) Renew(context.Context, leaseapi.Record, time.Duration) (leaseapi.Record, error) {
	goruntime.Goexit()
	return leaseapi.Record{}, nil
}

// TestStateChangeForcedExpiry: a supervisor whose backend call never
// returns (it panicked or ended its goroutine) is forced Expired on its
// way out, and that transition is reported and counted like any other.
func TestStateChangeForcedExpiry(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store, err := simtestStore(t)
		if err != nil {
			t.Fatal(err)
		}
		var log changeLog
		c, err := runtime.NewClient(goexiting{store}, runtime.ClientOptions{OnStateChange: log.hook, KeyHasher: fleetHasher})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		h := mustAcquire(t, c, testKey(t, "forced"), basicPolicy(t))
		wantKind(t, "renew", h.Renew(t.Context()), leaseapi.ErrLost)
		<-h.Done()
		wantChanges(t, log.take(), h, change(leaseapi.StateActive, leaseapi.StateExpired, leaseapi.ErrLost))
		m := c.Metrics()
		if got := m.StateChange(leaseapi.StateActive, leaseapi.StateExpired); got != 1 {
			t.Fatalf("Active -> Expired: got %d, want 1", got)
		}
		if got := m.Loss(runtime.LossExpired); got != 1 {
			t.Fatalf("expired losses: got %d, want 1", got)
		}
	})
}
