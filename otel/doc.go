// Package leaseotel exports what a lease client counts and does to
// OpenTelemetry: its exact metrics through a metric Producer, and its
// public operations as spans through a runtime.Tracer.
//
// It is a module of its own (github.com/leasekit/lease/otel; import it as
// leaseotel), the way valkey-go ships valkeyotel, so that the core module
// pulls in no telemetry dependency. Get it with
//
//	go get github.com/leasekit/lease/otel
//
// # Metrics
//
// A [Producer] reads a client's [runtime.Metrics] at each collection and
// hands them to the SDK as they are: counters and histograms are exact
// (counted by the client, not sampled from events), cumulative since the
// client was made. Register it on the reader that exports them:
//
//	p := leaseotel.NewProducer(client)
//	reader := sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithProducer(p))
//	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
//
// A Producer is used rather than observable instruments because the
// client's histograms are already aggregated, which no asynchronous
// instrument of the metric API can report. The instruments, in
// OpenTelemetry's semantic-convention style:
//
//	lease.acquire.duration       histogram, s          outcome
//	lease.backend.duration       histogram, s          operation, outcome
//	lease.renewals               counter, {renewal}    outcome
//	lease.releases               counter, {release}    outcome
//	lease.losses                 counter, {lease}      cause
//	lease.state_changes          counter, {change}     from, to
//	lease.state_changes.dropped  counter, {change}
//	lease.held                   up-down counter, {lease}
//	lease.managed                up-down counter, {lease}
//	lease.waiting                up-down counter, {acquisition}
//
// Attribute values are fixed labels (outcome names such as "success" or
// "contended", operation names, state names, loss causes); no key, owner
// id, DSN or backend text can reach them. [WithAttributes] adds constant
// attributes (say, a client name) to every point.
//
// # Traces
//
// [NewTracer] returns a runtime.Tracer for ClientOptions.Tracer: one
// span per public operation (lease.acquire, lease.try_acquire,
// lease.renew, lease.validate, lease.release, lease.run), a child of the
// span in the caller's context; Run's acquisition and release are
// children of Run's span. Attributes: lease.key_hash (the client's keyed
// hash, never the key), lease.token, lease.outcome and lease.state. A
// failed operation sets the span's status to Error with the outcome name
// as description (never the error's text); contention is not an error.
package leaseotel
