module github.com/leasekit/lease/otel

go 1.25.0

require (
	github.com/leasekit/lease v0.0.0
	go.opentelemetry.io/otel v1.43.0
	go.opentelemetry.io/otel/exporters/stdout/stdoutmetric v1.43.0
	go.opentelemetry.io/otel/sdk v1.43.0
	go.opentelemetry.io/otel/sdk/metric v1.43.0
	go.opentelemetry.io/otel/trace v1.43.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/metric v1.43.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

// Development inside the lease repository builds against the core module
// next to it. A replace directive applies only when this is the main
// module: users get this module with `go get github.com/leasekit/lease/otel`,
// and a release of it requires the core module's released version instead
// of v0.0.0 (both are tagged together: v1.x.y and otel/v1.x.y).
replace github.com/leasekit/lease => ../
