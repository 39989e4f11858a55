package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

type spanKey struct{}

// recTracer records every call and puts a span id in the context, with
// its parent's id, so that nesting can be checked.
type recTracer struct {
	mu     sync.Mutex
	next   int
	events []string
}

type spanID struct{ id, parent int }

func (r *recTracer) TraceStart(ctx context.Context, s runtime.TraceStart) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	parent, _ := ctx.Value(spanKey{}).(spanID)
	r.events = append(r.events, fmt.Sprintf("start %d<%d %v tok=%d hash=%s", r.next, parent.id, s.Op, s.Token, s.KeyHash))
	return context.WithValue(ctx, spanKey{}, spanID{id: r.next, parent: parent.id})
}

func (r *recTracer) TraceEnd(ctx context.Context, e runtime.TraceEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sp, _ := ctx.Value(spanKey{}).(spanID)
	r.events = append(r.events, fmt.Sprintf("end %d %v tok=%d state=%v outcome=%v in %v", sp.id, e.Op, e.Token, e.State, outcomeLabel(e.Err), e.Duration))
}

func outcomeLabel(err error) string { return leaseapi.OutcomeOf(err).String() }

// ctxBackend checks that every backend call runs under a traced context.
type ctxBackend struct {
	leaseapi.Backend
	untraced int
	mu       sync.Mutex
}

func (b *ctxBackend) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	if _, ok := ctx.Value(spanKey{}).(spanID); !ok {
		b.mu.Lock()
		b.untraced++
		b.mu.Unlock()
	}
	return b.Backend.TryAcquire(ctx, k, owner, ttl)
}

func TestTracerWrapsPublicOperations(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		tr := &recTracer{}
		o := runtimeOpts()
		o.Tracer, o.KeyHasher = tr, fleetHasher
		store, _ := simtestStore(t)
		f := simtest.NewFaulty(store)
		cb := &ctxBackend{Backend: f}
		c, err := runtime.NewClient(cb, o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p := basicPolicy(t)
		k := testKey(t, "trace")
		hash := fleetHasher.Hash(k)

		h := mustAcquire(t, c, k, p)
		f.Inject(leaseapi.OperationRenew, simtest.LoseReply)
		_ = h.Renew(t.Context())
		_ = h.Validate(t.Context())
		_ = h.Release(t.Context())
		err = c.Run(t.Context(), k, p, func(ctx context.Context, h *runtime.Handle) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		tok := h.Token()
		want := []string{
			fmt.Sprintf("start 1<0 try_acquire tok=0 hash=%s", hash),
			fmt.Sprintf("end 1 try_acquire tok=%d state=active outcome=success in 0s", tok),
			fmt.Sprintf("start 2<0 renew tok=%d hash=%s", tok, hash),
			fmt.Sprintf("end 2 renew tok=%d state=uncertain outcome=ambiguous in 0s", tok),
			fmt.Sprintf("start 3<0 validate tok=%d hash=%s", tok, hash),
			fmt.Sprintf("end 3 validate tok=%d state=active outcome=success in 0s", tok),
			fmt.Sprintf("start 4<0 release tok=%d hash=%s", tok, hash),
			fmt.Sprintf("end 4 release tok=%d state=released outcome=success in 0s", tok),
			fmt.Sprintf("start 5<0 run tok=0 hash=%s", hash),
			fmt.Sprintf("start 6<5 acquire tok=0 hash=%s", hash),
			fmt.Sprintf("end 6 acquire tok=%d state=active outcome=success in 0s", tok+1),
			fmt.Sprintf("start 7<5 release tok=%d hash=%s", tok+1, hash),
			fmt.Sprintf("end 7 release tok=%d state=released outcome=success in 0s", tok+1),
			fmt.Sprintf("end 5 run tok=%d state=released outcome=success in 0s", tok+1),
		}
		tr.mu.Lock()
		got := tr.events
		tr.mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("trace: got\n%q\nwant\n%q", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("trace event %d: got %q, want %q", i, got[i], want[i])
			}
		}
		if cb.untraced != 0 {
			t.Fatalf("backend calls without the span's context: got %d, want 0", cb.untraced)
		}
	})
}

func TestTracersCombines(t *testing.T) {
	if runtime.Tracers(nil, nil) != nil {
		t.Fatal("Tracers of nils: want nil")
	}
	a, b := &recTracer{}, &recTracer{}
	tr := runtime.Tracers(a, nil, b)
	ctx := tr.TraceStart(context.Background(), runtime.TraceStart{Op: runtime.TraceRenew})
	tr.TraceEnd(ctx, runtime.TraceEnd{Op: runtime.TraceRenew})
	if sp := ctx.Value(spanKey{}).(spanID); sp.parent != 1 || len(a.events) != 2 || len(b.events) != 2 {
		t.Fatalf("combined: got span %+v, %d and %d events, want b's span under a's and 2 events each", sp, len(a.events), len(b.events))
	}
}

// strTracer renders every trace call as text, for the redaction test.
type strTracer struct {
	mu  sync.Mutex
	out []string
}

func (s *strTracer) TraceStart(ctx context.Context, st runtime.TraceStart) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out = append(s.out, fmt.Sprintf("%v %s %d", st.Op, st.KeyHash, st.Token))
	return ctx
}

func (s *strTracer) TraceEnd(ctx context.Context, e runtime.TraceEnd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := ""
	if e.Err != nil {
		msg = e.Err.Error()
	}
	s.out = append(s.out, fmt.Sprintf("%v %s %d %v %s", e.Op, e.KeyHash, e.Token, e.State, msg))
}

// TestTelemetryIsRedacted: no state change, trace call (error text
// included) or metric label names the key, its namespace or the owner id,
// through failures of every kind.
func TestTelemetryIsRedacted(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		const secretName, secretNS = "payroll-secret-key", "tenant-secret"
		var log changeLog
		tr := &strTracer{}
		o := runtimeOpts()
		o.OnStateChange, o.Tracer = log.hook, tr
		b := setup(t, o)
		p := basicPolicy(t)
		k := leaseapi.MustKey(secretNS, secretName)
		h := mustAcquire(t, b.client, k, p)
		_, _ = b.client.TryAcquire(t.Context(), k, p)
		b.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply, simtest.FailBeforeSend, simtest.Stale)
		_ = h.Renew(t.Context())
		_ = h.Renew(t.Context())
		_ = h.Validate(t.Context())
		_ = h.Renew(t.Context())
		_ = h.Release(t.Context())
		_ = b.client.Run(t.Context(), k, p, func(ctx context.Context, h *runtime.Handle) error { return nil })
		var texts []string
		for _, sc := range log.take() {
			texts = append(texts, sc.String()+" "+sc.KeyHash)
		}
		tr.mu.Lock()
		texts = append(texts, tr.out...)
		tr.mu.Unlock()
		m := b.client.Metrics()
		for _, h := range m.BackendCalls {
			texts = append(texts, h.Operation.String()+" "+h.Outcome.String())
		}
		for _, h := range m.Acquisitions {
			texts = append(texts, h.Outcome.String())
		}
		for _, c := range append(m.Renewals, m.Releases...) {
			texts = append(texts, c.Outcome.String())
		}
		for _, l := range m.Losses {
			texts = append(texts, l.Cause.String())
		}
		if len(texts) < 20 {
			t.Fatalf("only %d telemetry texts: %q", len(texts), texts)
		}
		for _, s := range texts {
			for _, secret := range []string{secretName, secretNS, h.Owner()} {
				if containsFold(s, secret) {
					t.Fatalf("telemetry %q reveals %q", s, secret)
				}
			}
		}
	})
}
