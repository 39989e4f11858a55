package leaseotel_test

import (
	"log/slog"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/leaseslog"
	leaseotel "github.com/leasekit/lease/otel"
)

// A client whose state changes go to slog, whose operations are traced
// through OpenTelemetry and logged, and whose metrics an SDK reader
// collects. The README's telemetry snippet is this function's body.
func Example_client() {
	var (
		store          lease.Backend        // memory.New, valkey.New or postgres.New
		tracerProvider trace.TracerProvider // the application's
		exporter       sdkmetric.Exporter   // the application's
	)
	l := leaseslog.New(slog.Default())
	c, err := lease.NewClient(store, lease.ClientOptions{
		OnStateChange: l.StateChange,
		Tracer:        lease.Tracers(leaseotel.NewTracer(tracerProvider), l),
	})
	if err != nil {
		panic(err)
	}
	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(leaseotel.NewProducer(c)))
	_ = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
}
