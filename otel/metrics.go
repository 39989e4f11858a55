package leaseotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasekit/lease/runtime"
)

// ScopeName is the instrumentation scope of the metrics and spans.
const ScopeName = "github.com/leasekit/lease/otel"

// Producer reports one client's metrics to the OpenTelemetry SDK (see the
// package doc). It is safe for concurrent use.
type Producer struct {
	r     runtime.MetricsReader
	attrs []attribute.KeyValue
	start time.Time
	now   func() time.Time
}

// Option configures a Producer.
type Option func(*Producer)

// WithAttributes adds constant attributes to every data point, for
// instance to tell the clients of one process apart.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(p *Producer) { p.attrs = append(p.attrs, kv...) }
}

// NewProducer returns a Producer reading r (a *runtime.Client). Its data
// points start at the client's creation (Metrics.Since), or at the
// Producer's when the client reports none.
func NewProducer(r runtime.MetricsReader, opts ...Option) *Producer {
	p := &Producer{r: r, now: time.Now}
	for _, o := range opts {
		o(p)
	}
	p.start = p.now()
	return p
}

var _ sdkmetric.Producer = (*Producer)(nil)

// bounds are the histograms' bucket bounds in seconds.
var bounds = func() []float64 {
	b := runtime.HistogramBounds()
	out := make([]float64, len(b))
	for i, d := range b {
		out[i] = d.Seconds()
	}
	return out
}()

// Produce implements sdkmetric.Producer: one snapshot of the client's
// metrics, as cumulative data.
func (p *Producer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	m := p.r.Metrics()
	now := p.now()
	start := p.start
	if !m.Since.IsZero() && !m.Since.After(now) {
		start = m.Since // the counters are cumulative from the client's creation
	}
	set := func(kv ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(kv, p.attrs...)...)
	}
	hist := func(h runtime.Histogram, attrs attribute.Set) metricdata.HistogramDataPoint[float64] {
		counts := make([]uint64, len(h.Counts))
		copy(counts, h.Counts[:])
		return metricdata.HistogramDataPoint[float64]{
			Attributes: attrs, StartTime: start, Time: now,
			Count: h.Count(), Bounds: bounds, BucketCounts: counts, Sum: h.Sum.Seconds(),
		}
	}
	point := func(n uint64, attrs attribute.Set) metricdata.DataPoint[int64] {
		return metricdata.DataPoint[int64]{Attributes: attrs, StartTime: start, Time: now, Value: int64(n)}
	}
	counter := func(name, desc, unit string, pts []metricdata.DataPoint[int64]) metricdata.Metrics {
		return metricdata.Metrics{Name: name, Description: desc, Unit: unit, Data: metricdata.Sum[int64]{
			DataPoints: pts, Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
		}}
	}
	gauge := func(name, desc, unit string, v int64) metricdata.Metrics {
		return metricdata.Metrics{Name: name, Description: desc, Unit: unit, Data: metricdata.Sum[int64]{
			DataPoints:  []metricdata.DataPoint[int64]{{Attributes: set(), StartTime: start, Time: now, Value: v}},
			Temporality: metricdata.CumulativeTemporality, IsMonotonic: false,
		}}
	}

	var acq []metricdata.HistogramDataPoint[float64]
	for _, h := range m.Acquisitions {
		acq = append(acq, hist(h.Histogram, set(attribute.String("outcome", h.Outcome.String()))))
	}
	var calls []metricdata.HistogramDataPoint[float64]
	for _, h := range m.BackendCalls {
		calls = append(calls, hist(h.Histogram, set(attribute.String("operation", h.Operation.String()), attribute.String("outcome", h.Outcome.String()))))
	}
	outcomes := func(cs []runtime.OutcomeCount) []metricdata.DataPoint[int64] {
		var out []metricdata.DataPoint[int64]
		for _, c := range cs {
			out = append(out, point(c.N, set(attribute.String("outcome", c.Outcome.String()))))
		}
		return out
	}
	var losses []metricdata.DataPoint[int64]
	for _, l := range m.Losses {
		losses = append(losses, point(l.N, set(attribute.String("cause", l.Cause.String()))))
	}
	var changes []metricdata.DataPoint[int64]
	for _, t := range m.StateChanges {
		changes = append(changes, point(t.N, set(attribute.String("from", t.From.String()), attribute.String("to", t.To.String()))))
	}

	ms := []metricdata.Metrics{
		{Name: "lease.acquire.duration", Description: "Duration of Acquire and TryAcquire calls, waits included.", Unit: "s",
			Data: metricdata.Histogram[float64]{DataPoints: acq, Temporality: metricdata.CumulativeTemporality}},
		{Name: "lease.backend.duration", Description: "Duration of backend calls.", Unit: "s",
			Data: metricdata.Histogram[float64]{DataPoints: calls, Temporality: metricdata.CumulativeTemporality}},
		counter("lease.renewals", "Renewals sent to the backend.", "{renewal}", outcomes(m.Renewals)),
		counter("lease.releases", "Releases sent to the backend.", "{release}", outcomes(m.Releases)),
		counter("lease.losses", "Leases that ended expired or lost.", "{lease}", losses),
		counter("lease.state_changes", "Handle state transitions.", "{change}", changes),
		counter("lease.state_changes.dropped", "State-change events not delivered to the hook.", "{change}",
			[]metricdata.DataPoint[int64]{point(m.StateChangesDropped, set())}),
		gauge("lease.held", "Leases held (with a live supervisor).", "{lease}", m.Held),
		gauge("lease.managed", "Leases under managed renewal.", "{lease}", m.Managed),
		gauge("lease.waiting", "Acquisitions in flight.", "{acquisition}", m.Waiting),
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: ScopeName}, Metrics: ms}}, nil
}
