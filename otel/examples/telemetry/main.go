// Command telemetry runs a small fleet on the in-memory backend with the
// client's telemetry switched on, and prints what OpenTelemetry collected.
// Three workers compete for two jobs with Client.Run for about two
// seconds; each turn at a job holds its lease for 150ms under managed
// renewal, and on one worker's first turn its renewals are cut off until
// the lease expires, so another worker takes the job over. Each worker's
// metrics go through a leaseotel.Producer into an SDK ManualReader (the
// in-memory reader; -stdout also writes them with the SDK's stdout
// exporter), its operations become spans (recorded in memory and counted
// here), and its state changes and failures are logged with leaseslog.
//
//	cd otel && go run ./examples/telemetry
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/leaseslog"
	leaseotel "github.com/leasekit/lease/otel"
	"github.com/leasekit/lease/runtime"
)

// partition wraps a backend and, while cut, fails every renewal as a
// network partition would.
type partition struct {
	leaseapi.Backend
	cut atomic.Bool
}

func (p *partition) Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	if p.cut.Load() {
		return leaseapi.Record{}, leaseapi.NewError("renew", leaseapi.ErrBackendUnavailable, "partitioned")
	}
	return p.Backend.Renew(ctx, rec, ttl)
}

func main() {
	stdout := flag.Bool("stdout", false, "also write the metrics with the OpenTelemetry stdout exporter (JSON)")
	flag.Parse()
	if err := run(os.Stdout, os.Stderr, 2*time.Second, *stdout); err != nil {
		fmt.Fprintln(os.Stderr, "telemetry:", err)
		os.Exit(1)
	}
}

// worker is one member of the fleet: a client with its telemetry.
type worker struct {
	name string
	net  *partition
	// partitionOnce: cut the network on this worker's next turn, once.
	partitionOnce atomic.Bool
	client        *runtime.Client
	reader        *sdkmetric.ManualReader
	meters        *sdkmetric.MeterProvider
}

func run(out, logs io.Writer, d time.Duration, stdout bool) error {
	ctx := context.Background()
	store, err := memory.New(memory.Options{})
	if err != nil {
		return err
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)
	logger := leaseslog.New(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	// One secret for the fleet: every worker hashes a key the same way, so
	// the logs and spans of one job can be followed from worker to worker.
	hasher, err := runtime.NewKeyHasher([]byte("example fleet secret, from config"))
	if err != nil {
		return err
	}

	var fleet []*worker
	for i := range 3 {
		w := &worker{name: fmt.Sprint("worker-", i), net: &partition{Backend: store}}
		w.client, err = runtime.NewClient(w.net, runtime.ClientOptions{
			OnStateChange: logger.StateChange,
			Tracer:        runtime.Tracers(leaseotel.NewTracer(tp), logger),
			KeyHasher:     hasher,
		})
		if err != nil {
			return err
		}
		p := leaseotel.NewProducer(w.client, leaseotel.WithAttributes(attribute.String("worker", w.name)))
		w.reader = sdkmetric.NewManualReader(sdkmetric.WithProducer(p))
		w.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.reader))
		fleet = append(fleet, w)
	}

	policy, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{
		TTL: 300 * time.Millisecond, SafetyMargin: 50 * time.Millisecond, RenewEvery: 80 * time.Millisecond,
		Retry: 20 * time.Millisecond, Wait: 200 * time.Millisecond, OperationTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	jobs := []leaseapi.Key{leaseapi.MustKey("jobs", "report"), leaseapi.MustKey("jobs", "billing")}

	// The fleet: every worker runs every job in turn until the time is up;
	// a turn holds the lease for 150ms of work (renewed once on the way),
	// then the worker rests 20ms so that the others get their turn. On
	// worker-0's first turn a partition cuts its renewals off until the
	// lease expires under it (its Run then returns ErrLost).
	fleet[0].partitionOnce.Store(true)
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for _, w := range fleet {
		for _, job := range jobs {
			wg.Go(func() {
				for time.Now().Before(stop) {
					err := w.client.Run(ctx, job, policy, func(ctx context.Context, h *runtime.Handle) error {
						if w.partitionOnce.CompareAndSwap(true, false) {
							w.net.cut.Store(true)
							<-ctx.Done() // the lease expires: fn's ctx ends
							w.net.cut.Store(false)
							return nil
						}
						select {
						case <-time.After(150 * time.Millisecond):
							return nil
						case <-ctx.Done():
							return context.Cause(ctx)
						}
					})
					if err != nil && !errors.Is(err, leaseapi.ErrTimeout) && !errors.Is(err, leaseapi.ErrContended) && !errors.Is(err, leaseapi.ErrLost) {
						fmt.Fprintln(logs, w.name, "run:", err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()

	var exp sdkmetric.Exporter
	if stdout {
		if exp, err = stdoutmetric.New(stdoutmetric.WithWriter(out)); err != nil {
			return err
		}
	}
	for _, w := range fleet {
		if err := w.client.Close(ctx); err != nil {
			return err
		}
		var rm metricdata.ResourceMetrics
		if err := w.reader.Collect(ctx, &rm); err != nil {
			return err
		}
		fmt.Fprintf(out, "== %s\n", w.name)
		printMetrics(out, &rm)
		if exp != nil {
			if err := exp.Export(ctx, &rm); err != nil {
				return err
			}
		}
		if err := w.meters.Shutdown(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "== spans")
	byName := map[string]int{}
	for _, s := range spans.Ended() {
		byName[s.Name()]++
	}
	for _, name := range sortedKeys(byName) {
		fmt.Fprintf(out, "  %-18s %d\n", name, byName[name])
	}
	return nil
}

// printMetrics writes one line per data point of the lease instruments.
func printMetrics(out io.Writer, rm *metricdata.ResourceMetrics) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					mean := 0.0
					if p.Count > 0 {
						mean = p.Sum / float64(p.Count)
					}
					fmt.Fprintf(out, "  %-28s %-40s count=%d mean=%.6fs\n", m.Name, labels(p.Attributes), p.Count, mean)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					fmt.Fprintf(out, "  %-28s %-40s %d\n", m.Name, labels(p.Attributes), p.Value)
				}
			}
		}
	}
}

// labels renders the attributes other than the worker's name.
func labels(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		if kv.Key != "worker" {
			parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
