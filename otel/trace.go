package leaseotel

import (
	"context"
	"errors"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Tracer is a runtime.Tracer that makes one OpenTelemetry span per public
// operation (see the package doc). It is safe for concurrent use.
type Tracer struct {
	t trace.Tracer
}

// NewTracer returns a Tracer using tp (nil: a no-op provider's tracer).
func NewTracer(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = noopProvider()
	}
	return &Tracer{t: tp.Tracer(ScopeName)}
}

var _ runtime.Tracer = (*Tracer)(nil)

// spanKey finds this tracer's span in the context it returned, even if
// another tracer set a span after it.
type spanKey struct{}

// TraceStart implements runtime.Tracer: it starts the operation's span as
// a child of ctx's.
func (t *Tracer) TraceStart(ctx context.Context, s runtime.TraceStart) context.Context {
	attrs := []attribute.KeyValue{attribute.String("lease.key_hash", s.KeyHash)}
	if s.Token != 0 {
		attrs = append(attrs, tokenAttr(s.Token))
	}
	ctx, span := t.t.Start(ctx, "lease."+s.Op.String(), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, spanKey{}, span)
}

// TraceEnd implements runtime.Tracer: it records the outcome and ends the
// span.
func (t *Tracer) TraceEnd(ctx context.Context, e runtime.TraceEnd) {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	outcome := leaseapi.OutcomeOf(e.Err).String()
	attrs := []attribute.KeyValue{attribute.String("lease.outcome", outcome)}
	if e.Token != 0 {
		attrs = append(attrs, tokenAttr(e.Token))
	}
	if e.State != 0 {
		attrs = append(attrs, attribute.String("lease.state", e.State.String()))
	}
	span.SetAttributes(attrs...)
	if e.Err != nil && !errors.Is(e.Err, leaseapi.ErrContended) {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// tokenAttr reports a token as an int64 attribute (OpenTelemetry has no
// unsigned integers); a token beyond int64 is clamped, never wrapped.
func tokenAttr(t leaseapi.Token) attribute.KeyValue {
	return attribute.Int64("lease.token", int64(min(uint64(t), math.MaxInt64)))
}
