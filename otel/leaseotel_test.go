package leaseotel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	leaseotel "github.com/leasekit/lease/otel"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secretNS, secretName = "tenant-secret", "payroll-secret-key"

type fixture struct {
	client *runtime.Client
	faulty *simtest.Faulty
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	policy leaseapi.Policy
	key    leaseapi.Key
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{faulty: simtest.NewFaulty(store), spans: tracetest.NewSpanRecorder(), key: leaseapi.MustKey(secretNS, secretName)}
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.spans))
	f.client, err = runtime.NewClient(f.faulty, runtime.ClientOptions{Tracer: leaseotel.NewTracer(f.tp)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.Close(context.Background())
		_ = f.tp.Shutdown(context.Background())
	})
	f.reader = sdkmetric.NewManualReader(sdkmetric.WithProducer(leaseotel.NewProducer(f.client, leaseotel.WithAttributes(attribute.String("client", "test")))))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	f.policy, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: time.Second, OperationTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != leaseotel.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func attrsOf(s attribute.Set) string {
	var b []string
	for _, kv := range s.ToSlice() {
		b = append(b, string(kv.Key)+"="+kv.Value.Emit())
	}
	return strings.Join(b, ",")
}

// sumPoints maps a counter's points by their attributes.
func sumPoints(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: got %T, want Sum[int64]", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, p := range s.DataPoints {
		out[attrsOf(p.Attributes)] = p.Value
	}
	return out
}

func histPoints(t *testing.T, m metricdata.Metrics) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: got %T, want Histogram[float64]", m.Name, m.Data)
	}
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, p := range h.DataPoints {
		out[attrsOf(p.Attributes)] = p
	}
	return out
}

// TestMetricsThroughManualReader performs a known set of operations and
// reads every instrument back through the SDK.
func TestMetricsThroughManualReader(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		f := newFixture(t)
		ctx := t.Context()
		const n = 5
		for range n {
			h, err := f.client.TryAcquire(ctx, f.key, f.policy)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.client.TryAcquire(ctx, f.key, f.policy); leaseapi.Kind(err) != leaseapi.ErrContended {
				t.Fatalf("got %v, want ErrContended", err)
			}
			f.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply)
			_ = h.Renew(ctx)
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			<-h.Done()
		}
		h, err := f.client.TryAcquire(ctx, f.key, f.policy) // held, managed at the collection
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.StartManaged(ctx); err != nil {
			t.Fatal(err)
		}
		simtest.Settle()

		ms := f.collect(t)
		acq := histPoints(t, ms["lease.acquire.duration"])
		if ms["lease.acquire.duration"].Unit != "s" {
			t.Errorf("acquire unit: got %q, want s", ms["lease.acquire.duration"].Unit)
		}
		if since := f.client.Metrics().Since; since.IsZero() || !acq["client=test,outcome=success"].StartTime.Equal(since) {
			t.Errorf("start time: got %v, want the client's creation %v", acq["client=test,outcome=success"].StartTime, since)
		}
		if got := acq["client=test,outcome=success"].Count; got != n+1 {
			t.Errorf("acquisitions ok: got %d, want %d", got, n+1)
		}
		if got := acq["client=test,outcome=contended"].Count; got != n {
			t.Errorf("acquisitions contended: got %d, want %d", got, n)
		}
		calls := histPoints(t, ms["lease.backend.duration"])
		for attrs, want := range map[string]uint64{
			"client=test,operation=acquire,outcome=success":   n + 1,
			"client=test,operation=acquire,outcome=contended": n,
			"client=test,operation=renew,outcome=ambiguous":   n,
			"client=test,operation=release,outcome=success":   n,
		} {
			p := calls[attrs]
			if p.Count != want {
				t.Errorf("backend calls %s: got %d, want %d", attrs, p.Count, want)
			}
			if len(p.BucketCounts) != len(p.Bounds)+1 || p.Bounds[0] != 5e-6 {
				t.Errorf("backend calls %s: %d buckets for %d bounds starting %v", attrs, len(p.BucketCounts), len(p.Bounds), p.Bounds)
			}
		}
		for name, want := range map[string]map[string]int64{
			"lease.renewals":              {"client=test,outcome=ambiguous": n},
			"lease.releases":              {"client=test,outcome=success": n},
			"lease.state_changes":         {"client=test,from=active,to=uncertain": n, "client=test,from=uncertain,to=released": n},
			"lease.state_changes.dropped": {"client=test": 0},
			"lease.held":                  {"client=test": 1},
			"lease.managed":               {"client=test": 1},
			"lease.waiting":               {"client=test": 0},
		} {
			got := sumPoints(t, ms[name])
			if len(got) != len(want) {
				t.Errorf("%s: got %v, want %v", name, got, want)
			}
			for attrs, v := range want {
				if got[attrs] != v {
					t.Errorf("%s{%s}: got %d, want %d", name, attrs, got[attrs], v)
				}
			}
		}
		if s := ms["lease.renewals"].Data.(metricdata.Sum[int64]); !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
			t.Error("lease.renewals: want a cumulative monotonic counter")
		}
		if s := ms["lease.held"].Data.(metricdata.Sum[int64]); s.IsMonotonic {
			t.Error("lease.held: want an up-down counter")
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		<-h.Done()
		ms = f.collect(t)
		if got := sumPoints(t, ms["lease.held"])["client=test"]; got != 0 {
			t.Errorf("held after release: got %d, want 0", got)
		}
		// Redaction: no attribute of any point names the key or an owner.
		redacted(t, ms, h.Owner())
	})
}

func redacted(t *testing.T, ms map[string]metricdata.Metrics, owner string) {
	t.Helper()
	for name, m := range ms {
		var sets []attribute.Set
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				sets = append(sets, p.Attributes)
			}
		}
		for _, s := range sets {
			a := strings.ToLower(attrsOf(s))
			for _, secret := range []string{secretNS, secretName, owner} {
				if strings.Contains(a, strings.ToLower(secret)) {
					t.Errorf("%s: attributes %q reveal %q", name, a, secret)
				}
			}
		}
	}
}

// TestSpans: one span per operation, Run's acquisition and release under
// Run's span, which is under the caller's; outcome and status; no key or
// owner in any attribute.
func TestSpans(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		f := newFixture(t)
		parentCtx, parent := f.tp.Tracer("caller").Start(t.Context(), "caller")
		var owner string
		err := f.client.Run(parentCtx, f.key, f.policy, func(ctx context.Context, h *runtime.Handle) error {
			owner = h.Owner()
			f.faulty.Inject(leaseapi.OperationRenew, simtest.FailBeforeSend)
			_ = h.Renew(ctx)
			return h.Validate(ctx)
		})
		if err != nil {
			t.Fatal(err)
		}
		parent.End()
		spans := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range f.spans.Ended() {
			spans[s.Name()] = s
		}
		for _, name := range []string{"lease.run", "lease.acquire", "lease.renew", "lease.validate", "lease.release", "caller"} {
			if spans[name] == nil {
				t.Fatalf("no span %q among %d", name, len(spans))
			}
		}
		run := spans["lease.run"]
		if run.Parent().SpanID() != spans["caller"].SpanContext().SpanID() {
			t.Error("lease.run is not a child of the caller's span")
		}
		for _, name := range []string{"lease.acquire", "lease.renew", "lease.validate", "lease.release"} {
			if spans[name].Parent().SpanID() != run.SpanContext().SpanID() {
				t.Errorf("%s is not a child of lease.run", name)
			}
		}
		renew := spans["lease.renew"]
		if renew.Status().Code != codes.Error || renew.Status().Description != "unavailable" {
			t.Errorf("renew status: got %v %q, want Error \"unavailable\"", renew.Status().Code, renew.Status().Description)
		}
		if spans["lease.release"].Status().Code == codes.Error {
			t.Error("release: want no error status")
		}
		want := map[string]string{"lease.outcome": "unavailable", "lease.state": "uncertain", "lease.token": "1"}
		for _, kv := range renew.Attributes() {
			if w, ok := want[string(kv.Key)]; ok && kv.Value.Emit() != w {
				t.Errorf("renew %s: got %q, want %q", kv.Key, kv.Value.Emit(), w)
			}
			delete(want, string(kv.Key))
		}
		if len(want) != 0 {
			t.Errorf("renew lacks attributes %v", want)
		}
		for _, s := range f.spans.Ended() {
			for _, kv := range s.Attributes() {
				v := strings.ToLower(string(kv.Key) + "=" + kv.Value.Emit())
				for _, secret := range []string{secretNS, secretName, owner} {
					if strings.Contains(v, strings.ToLower(secret)) {
						t.Errorf("span %s attribute %q reveals %q", s.Name(), v, secret)
					}
				}
			}
			if strings.Contains(strings.ToLower(s.Status().Description), strings.ToLower(secretName)) {
				t.Errorf("span %s status reveals the key", s.Name())
			}
		}
	})
}

func TestNilProviderIsNoop(t *testing.T) {
	tr := leaseotel.NewTracer(nil)
	ctx := tr.TraceStart(context.Background(), runtime.TraceStart{Op: runtime.TraceRenew})
	tr.TraceEnd(ctx, runtime.TraceEnd{Op: runtime.TraceRenew})
	tr.TraceEnd(context.Background(), runtime.TraceEnd{Op: runtime.TraceRenew}) // no span: ignored
}
