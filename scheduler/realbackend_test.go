package scheduler_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/scheduler"
	"github.com/leasekit/lease/simtest"
)

// TestRealBackendFleet runs a shortened fleet scenario in real time on
// Valkey and on PostgreSQL: four servers, each with its own connection to
// the server, one 40ms ahead, one 120ms late (after the winner's run and
// release), one crashing halfway. Every OnOneServer slot runs at most
// once, and exactly once unless every server reported it Missed (woke
// after it passed: a loaded machine) or Failed; NonOverlap runs never
// overlap. Each half lasts until enough slots ran (about two seconds on
// an idle machine, longer on a loaded one, bounded), not for a fixed time,
// so a loaded machine makes the scenario longer, never thinner.
func TestRealBackendFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time scenario on real servers")
	}
	backendtest.ForEachReal(t, "schedtest", realFleet)
}

func realFleet(t *testing.T, backend backendtest.NewBackend) {
	p := backendtest.Policy(t, leaseapi.PolicyOptions{TTL: 2 * time.Second, SafetyMargin: 300 * time.Millisecond, RenewEvery: 400 * time.Millisecond,
		Retry: 50 * time.Millisecond, Wait: time.Second, OperationTimeout: 500 * time.Millisecond})
	const every = 200 * time.Millisecond
	var mu sync.Mutex
	progress := make(chan struct{}, 1) // a report or compact run ended
	signal := func() {
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	reports := map[time.Time][]string{}
	outcomes := map[time.Time]map[string]scheduler.Outcome{} // the report job's, per slot and server
	var spans []runSpan
	type srv struct {
		name   string
		faulty *simtest.Faulty
		sched  *scheduler.Scheduler
	}
	var servers []*srv
	for _, s := range []struct {
		name   string
		offset time.Duration
	}{{"a", 0}, {"b", 0}, {"ahead", 40 * time.Millisecond}, {"late", -120 * time.Millisecond}} {
		name := s.name
		clk := offsetClock{clock.New(), s.offset}
		f := simtest.NewFaulty(backend(t))
		c, err := runtime.NewClient(f, runtime.ClientOptions{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			f.SetMode(simtest.Pass)
			_ = c.Close(context.Background())
		})
		sc, err := scheduler.New(c, scheduler.Options{Clock: clk, OnEvent: func(ev scheduler.Event) {
			if ev.Job != "report" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if outcomes[ev.Slot] == nil {
				outcomes[ev.Slot] = map[string]scheduler.Outcome{}
			}
			outcomes[ev.Slot][name] = ev.Outcome
		}})
		if err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(sc.Add(scheduler.Job{Name: "report", Schedule: scheduler.Every(every), Mode: scheduler.OnOneServer, Policy: p,
			Run: func(ctx context.Context, _ leaseapi.Token) error {
				slot, _ := scheduler.Slot(ctx)
				mu.Lock()
				reports[slot] = append(reports[slot], name)
				mu.Unlock()
				signal()
				return backendtest.Pause(ctx, 50*time.Millisecond)
			}}))
		must(sc.Add(scheduler.Job{Name: "compact", Schedule: scheduler.Every(every), Mode: scheduler.NonOverlap, Policy: p,
			Run: func(ctx context.Context, token leaseapi.Token) error {
				slot, _ := scheduler.Slot(ctx)
				began := time.Now()
				err := backendtest.Pause(ctx, 300*time.Millisecond)
				mu.Lock()
				spans = append(spans, runSpan{name, slot, token, began, time.Now()})
				mu.Unlock()
				signal()
				return err
			}}))
		servers = append(servers, &srv{name: name, faulty: f, sched: sc})
	}
	startAt := time.Now()
	for _, s := range servers {
		if err := s.sched.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Real time: simulated time cannot wait for a real server's replies.
	// Each half waits until at least `reps` more report slots and `comps`
	// more compact runs have run (bounded by halfLimit).
	const halfLimit = 60 * time.Second
	waitRuns := func(reps, comps int) {
		t.Helper()
		mu.Lock()
		wantR, wantC := len(reports)+reps, len(spans)+comps
		mu.Unlock()
		limit := time.NewTimer(halfLimit)
		defer limit.Stop()
		for {
			mu.Lock()
			r, c := len(reports), len(spans)
			mu.Unlock()
			if r >= wantR && c >= wantC {
				return
			}
			select {
			case <-progress:
			case <-limit.C:
				t.Fatalf("only %d report slots and %d compact runs within %v, want %d and %d", r, c, halfLimit, wantR, wantC)
			}
		}
	}
	waitRuns(8, 3)
	servers[2].faulty.SetMode(simtest.Down)
	waitRuns(8, 3)
	stopAt := time.Now()
	for _, s := range servers {
		if err := s.sched.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	first := scheduler.Every(every).Next(startAt.Add(200 * time.Millisecond))
	last := scheduler.Every(every).Next(stopAt.Add(-2 * every))
	per := map[string]int{}
	for slot, who := range reports {
		for _, w := range who {
			per[w]++
		}
		if len(who) > 1 {
			t.Errorf("report slot %s ran on %v", slot.Format("15:04:05.000"), who)
		}
	}
	n, dropped := 0, 0
	for slot := first; !slot.After(last); slot = slot.Add(every) {
		n++
		if len(reports[slot]) == 1 {
			continue
		}
		// Not run. The scheduler does not run passed slots late: a slot
		// that every server woke too late for (a loaded machine) is
		// Missed by all, or Failed on the one whose backend is down. Any
		// other outcome (Taken, or no event at all) means it was lost.
		lost := len(outcomes[slot]) != len(servers)
		for _, o := range outcomes[slot] {
			if o != scheduler.Missed && o != scheduler.Failed {
				lost = true
			}
		}
		if lost {
			t.Errorf("report slot %s ran %d times, want once; outcomes %v", slot.Format("15:04:05.000"), len(reports[slot]), outcomes[slot])
			continue
		}
		dropped++
		t.Logf("report slot %s: every server late (%v)", slot.Format("15:04:05.000"), outcomes[slot])
	}
	// Slots every server woke too late for are correct behaviour (passed
	// slots are not run late) and only lengthen the scenario: waitRuns
	// waited for enough slots that did run.
	t.Logf("%d of %d report slots missed by every server", dropped, n)
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i-1].end.After(spans[i].start) {
			t.Errorf("compact runs overlap: %s until %s, %s from %s", spans[i-1].server, spans[i-1].end.Format("15:04:05.000"), spans[i].server, spans[i].start.Format("15:04:05.000"))
		}
		if spans[i].token <= spans[i-1].token {
			t.Errorf("compact tokens %d then %d", spans[i-1].token, spans[i].token)
		}
	}
	if n < 10 || len(spans) < 5 {
		t.Fatalf("scenario too thin: %d slots checked, %d compact runs", n, len(spans))
	}
	t.Logf("%d report slots checked, runs per server %v; %d compact runs", n, per, len(spans))
}
