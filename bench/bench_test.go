package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Run with:
//
//	go test -run '^$' -bench . -count 6 -timeout 60m ./bench | tee /tmp/b.txt; benchstat /tmp/b.txt
//
// See the package doc for what each metric means and why every workload is
// one benchmark whose rounds interleave the layers.

func BenchmarkValkey(b *testing.B) { runAll(b, valkeyKit(needValkey(b))) }

func BenchmarkPostgres(b *testing.B) { runAll(b, postgresKit(needPostgres(b))) }

func BenchmarkMemory(b *testing.B) { runAll(b, memoryKit()) }

func runAll(b *testing.B, k kit) {
	for _, w := range workloads {
		b.Run(w.name, func(b *testing.B) {
			b.ReportAllocs()
			if err := w.run(context.Background(), benchB{b}, k, defaultSizes, b.N); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(0, "ns/op") // one round of every layer: not a figure of any of them
		})
	}
}

// bench is what a workload needs of a *testing.B; the smoke test passes a
// recorder instead.
type bench interface {
	ReportMetric(n float64, unit string)
	ResetTimer()
	Logf(format string, args ...any)
}

type benchB struct{ *testing.B }

type workload struct {
	name string
	run  func(ctx context.Context, b bench, k kit, sz sizes, rounds int) error
}

var workloads = []workload{
	{"seq", runSeq},
	{"par", runPar},
	{"renew", runRenew},
	{"handoff", runHandoff},
}

// rotation shifts the order of the layers by one every round, across
// benchmarks and runs.
var rotation atomic.Uint64

// order returns the indexes of n layers in this round's order.
func order(n int) []int {
	off := int(rotation.Add(1))
	idx := make([]int, n)
	for i := range idx {
		idx[i] = (i + off) % n
	}
	return idx
}

// reportAll reports every layer's tally in layer order, then the rate
// ratios: each layer over the floor (or, without one, over the store), and
// api over store.
//
// A layer whose operations failed more often than they succeeded fails
// the benchmark (tally.check); fewer failures are reported (tally.report).
func reportAll(b bench, names []string, ts map[string]*tally, unit, units string) error {
	for _, n := range names {
		if err := ts[n].check(n); err != nil {
			return err
		}
		ts[n].report(b, n, unit, units)
	}
	base := "floor"
	if ts[base] == nil {
		base = "store"
	}
	for _, n := range names {
		if n != base {
			ratio(b, ts, n, base)
		}
	}
	if base == "floor" {
		ratio(b, ts, "api", "store")
	}
	return nil
}

// reportRuntime reports what the runtime adds to a Store call per
// operation (api minus store): client CPU, allocations and, in seq, the
// p50 pair latency. The handoff workload has no such figure: its layers
// poll a different number of times per acquisition.
func reportRuntime(b bench, ts map[string]*tally, unit string) {
	a, s := ts["api"], ts["store"]
	if a == nil || s == nil || a.ops == 0 || s.ops == 0 {
		return
	}
	b.ReportMetric(perOp(a.cpu, a.ops)-perOp(s.cpu, s.ops), "runtime-client-us/"+unit)
	b.ReportMetric(float64(a.mallocs)/float64(a.ops)-float64(s.mallocs)/float64(s.ops), "runtime-allocs/"+unit)
	if len(a.lat) > 0 && len(s.lat) > 0 {
		b.ReportMetric(float64((p50(a.lat)-p50(s.lat)).Nanoseconds())/1e3, "runtime-p50-us")
	}
}

// withSingle builds k's single-client layers, runs f, and cleans up.
func withSingle(ctx context.Context, k kit, ttl time.Duration, f func(l *layers, tag string) error) error {
	tag := newTag()
	l, err := k.single(ctx, tag, ttl)
	if err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	err = f(l, tag)
	l.close()
	if cerr := k.cleanup(ctx, tag); err == nil && cerr != nil {
		err = fmt.Errorf("cleanup: %w", cerr)
	}
	return err
}

func names(l *layers) []string {
	out := make([]string, len(l.variants))
	for i, v := range l.variants {
		out[i] = v.name
	}
	return out
}

func newTallies(ns []string) map[string]*tally {
	ts := make(map[string]*tally, len(ns))
	for _, n := range ns {
		ts[n] = new(tally)
	}
	return ts
}

// keyNames returns n key names "prefix0" ... built before a slice, so that
// building them is not measured.
func keyNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// runSeq: per round, every layer does sz.seqPairs pairs on one goroutine.
func runSeq(ctx context.Context, b bench, k kit, sz sizes, rounds int) error {
	return withSingle(ctx, k, sz.ttl, func(l *layers, tag string) error {
		for _, v := range l.variants {
			var ec errCount
			if v.seq(ctx, keyNames("w", sz.warmup), make([]time.Duration, sz.warmup), &ec); ec.n.Load() > 0 {
				return fmt.Errorf("%s warm-up: %w", v.name, ec.first.get())
			}
		}
		ts := newTallies(names(l))
		b.ResetTimer()
		for r := range rounds {
			for _, i := range order(len(l.variants)) {
				v, t := l.variants[i], ts[l.variants[i].name]
				keys := keyNames("s"+strconv.Itoa(r)+":", sz.seqPairs)
				lat := make([]time.Duration, sz.seqPairs)
				var n int64
				if err := k.meter.measure(ctx, t, func() (int64, error) {
					n = v.seq(ctx, keys, lat, &t.errs)
					return n, nil
				}); err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				t.lat = append(t.lat, lat[:n]...)
			}
		}
		if err := reportAll(b, names(l), ts, "pair", "pairs"); err != nil {
			return err
		}
		reportRuntime(b, ts, "pair")
		return nil
	})
}

// runPar: per round, every layer runs sz.conc goroutines of pairs for
// sz.parSlice.
func runPar(ctx context.Context, b bench, k kit, sz sizes, rounds int) error {
	return withSingle(ctx, k, sz.ttl, func(l *layers, tag string) error {
		for _, v := range l.variants {
			// Warm up as many connections as there are goroutines.
			var ec errCount
			_ = forEach(sz.conc*sz.warmup, sz.conc, func(i int) error {
				v.seq(ctx, []string{"pw" + strconv.Itoa(i)}, make([]time.Duration, 1), &ec)
				return nil
			})
			if ec.n.Load() > 0 {
				return fmt.Errorf("%s warm-up: %w", v.name, ec.first.get())
			}
		}
		ts := newTallies(names(l))
		b.ResetTimer()
		for r := range rounds {
			for _, i := range order(len(l.variants)) {
				v := l.variants[i]
				base := "p" + strconv.Itoa(r) + ":"
				t := ts[v.name]
				if err := k.meter.measure(ctx, t, func() (int64, error) {
					return v.par(ctx, sz.conc, sz.parSlice, base, &t.errs), nil
				}); err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
			}
		}
		if err := reportAll(b, names(l), ts, "pair", "pairs"); err != nil {
			return err
		}
		reportRuntime(b, ts, "pair")
		return nil
	})
}

// runRenew: per round, every layer renews sz.leases held leases once, and
// the API's managed renewal runs for sz.window.
func runRenew(ctx context.Context, b bench, k kit, sz sizes, rounds int) error {
	return withSingle(ctx, k, sz.renewTTL, func(l *layers, tag string) error {
		ns := append(names(l), "managed")
		ts, rel := newTallies(ns), newTallies(names(l))
		uncertain := 0
		b.ResetTimer()
		for r := range rounds {
			keys := keyNames("r"+strconv.Itoa(r)+":", sz.leases)
			for _, i := range order(len(ns)) {
				var err error
				if i == len(l.variants) {
					var u int
					u, err = managedSlice(ctx, k.meter, ts["managed"], l.managed, l.count, l.ns, sz, keys)
					uncertain += u
				} else {
					err = l.variants[i].renew(ctx, k.meter, ts[ns[i]], rel[ns[i]], sz.conc, keys)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", ns[i], err)
				}
			}
		}
		if err := reportAll(b, ns, ts, "renewal", "renewals"); err != nil {
			return err
		}
		reportRuntime(b, ts, "renewal")
		// The teardown's releases (10,000 from 64 goroutines): rates, CPU
		// and ratios named apart from the renewals'.
		for _, n := range names(l) {
			if err := rel[n].check(n); err != nil {
				return err
			}
			rel[n].report(b, n, "release", "releases")
		}
		for _, n := range names(l) {
			if base := names(l)[0]; n != base {
				ratioAs(b, rel, n, base, n+"/"+base+"-releases")
			}
		}
		// Leases left uncertain at the end of a window, per round: managed
		// renewal on purpose asks more than the backend can do.
		b.ReportMetric(float64(uncertain)/float64(max(rounds, 1)), "managed-uncertain")
		return nil
	})
}

// runHandoff: per round, every layer's contenders pass one key around for
// sz.handSlice.
func runHandoff(ctx context.Context, b bench, k kit, sz sizes, rounds int) error {
	tag := newTag()
	cs, closeAll, err := k.handoff(ctx, tag, sz)
	if err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	defer func() { _ = k.cleanup(ctx, tag) }()
	defer closeAll()
	// Warm every contender up (connections, scripts, statements) on a key
	// of its own, so that setting up is not counted as waiting.
	warm := sz
	warm.handSlice = 50 * time.Millisecond
	for _, c := range cs {
		var ec errCount
		if _, err := c.run(ctx, warm, "hw", &ec); err != nil {
			return fmt.Errorf("%s warm-up: %w", c.name, err)
		}
		if ec.n.Load() > 0 {
			return fmt.Errorf("%s warm-up: %w", c.name, ec.first.get())
		}
	}
	ns := make([]string, len(cs))
	for i, c := range cs {
		ns[i] = c.name
	}
	ts := newTallies(ns)
	b.ResetTimer()
	for r := range rounds {
		key := "h" + strconv.Itoa(r)
		for _, i := range order(len(cs)) {
			c, t := cs[i], ts[cs[i].name]
			var res handoffResult
			if err := k.meter.measure(ctx, t, func() (int64, error) {
				var err error
				res, err = c.run(ctx, sz, key, &t.errs)
				return res.acquisitions, err
			}); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			t.hand = append(t.hand, res.hand...)
			t.waitMax = max(t.waitMax, res.waitMax)
		}
	}
	return reportAll(b, ns, ts, "acq", "acq")
}
