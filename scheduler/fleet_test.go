package scheduler_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/scheduler"
	"github.com/leasekit/lease/simtest"
)

// runLog records, in true (simulated) time, which server ran which slot.
type runLog struct {
	mu   sync.Mutex
	runs map[time.Time][]string // slot -> servers that started a run
	ivs  []runSpan
}

type runSpan struct {
	server     string
	slot       time.Time
	token      leaseapi.Token
	start, end time.Time
}

func newRunLog() *runLog { return &runLog{runs: map[time.Time][]string{}} }

func (l *runLog) begin(server string, slot time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[slot] = append(l.runs[slot], server)
}

func (l *runLog) span(iv runSpan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ivs = append(l.ivs, iv)
}

// admitAndWrite records an admission and a fenced write if the run's
// lease is Active now, as a careful job would before a protected action.
func admitAndWrite(ctx context.Context, hist *simtest.History, res *simtest.Resource) {
	h := scheduler.HandleFrom(ctx)
	if h == nil || h.State() != leaseapi.StateActive {
		return
	}
	now := time.Now()
	hist.Admit(h.Key(), h.Owner(), h.Token(), now)
	if res != nil {
		_ = res.Write(h.Owner(), h.Token(), "v", now)
	}
}

// TestOnOneServerFleet: five servers share one backend, each on its own
// fault wrapper and clock, for three hours of one-minute slots: two on
// time, one 1s ahead and one 1s behind (less than the 2s safety margin),
// and one that wakes 30s late for every slot (after the winner's run has
// ended and its slot lease was released). The server ahead crashes after
// an hour (every backend call fails from then on; it never releases) and
// an on-time server is partitioned for ten minutes later. Every slot must
// run exactly once; the late server must never run a slot.
func TestOnOneServerFleet(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store := backendtest.MemoryStore(t)
		hist := simtest.NewHistory()
		log := newRunLog()
		p := jobPolicy(t)
		const interval = time.Minute
		offsets := []struct {
			name   string
			offset time.Duration
		}{{"a", 0}, {"b", 0}, {"ahead", time.Second}, {"behind", -time.Second}, {"late", -30 * time.Second}}
		var servers []*server
		for _, o := range offsets {
			srv := newServer(t, store, o.name, o.offset)
			err := srv.sched.Add(scheduler.Job{
				Name: "report", Schedule: scheduler.Every(interval), Mode: scheduler.OnOneServer, Policy: p,
				Run: func(ctx context.Context, token leaseapi.Token) error {
					slot, _ := scheduler.Slot(ctx)
					log.begin(srv.name, slot)
					h := scheduler.HandleFrom(ctx)
					hist.Grant(h.Key(), h.Owner(), h.Token(), time.Now())
					if token != 1 {
						t.Errorf("OnOneServer run with token %d, want 1", token)
					}
					for range 3 { // a 15s job, longer than the TTL
						admitAndWrite(ctx, hist, nil)
						if err := backendtest.Pause(ctx, 5*time.Second); err != nil {
							return err
						}
					}
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			servers = append(servers, srv)
		}
		simtest.Advance(40 * time.Second) // every server, even the late one, starts at the same slot
		first := scheduler.Every(interval).Next(time.Now())
		for _, srv := range servers {
			backendtest.Start(t, srv.sched)
		}
		simtest.Advance(time.Hour)
		servers[2].faulty.SetMode(simtest.Down) // "ahead" crashes
		simtest.Advance(30 * time.Minute)
		servers[0].faulty.SetMode(simtest.Down) // "a" partitioned for 10 minutes
		simtest.Advance(10 * time.Minute)
		servers[0].faulty.SetMode(simtest.Pass)
		simtest.Advance(80 * time.Minute)
		last := scheduler.Every(interval).Next(time.Now().Add(-interval - 30*time.Second))

		slots := 0
		for slot := first; !slot.After(last); slot = slot.Add(interval) {
			slots++
			if got := log.runs[slot]; len(got) != 1 {
				t.Errorf("slot %s ran on %v, want exactly one server", slot.Format(time.TimeOnly), got)
			}
		}
		if slots < 170 {
			t.Fatalf("only %d slots checked", slots)
		}
		for slot := range log.runs {
			if slot.Before(first) || slot.After(last.Add(interval)) {
				t.Errorf("run of unexpected slot %s", slot)
			}
		}
		perServer := map[string]int{}
		for _, who := range log.runs {
			for _, s := range who {
				perServer[s]++
			}
		}
		if perServer["late"] != 0 {
			t.Errorf("the late server ran %d slots, want 0", perServer["late"])
		}
		if n := servers[4].count(scheduler.Taken); n < slots-1 {
			t.Errorf("the late server saw %d slots taken, want about %d", n, slots)
		}
		if perServer["ahead"] < 55 || perServer["a"]+perServer["b"]+perServer["behind"] < 100 {
			t.Errorf("runs per server %v: the server ahead should win until it crashes, then the others", perServer)
		}
		if n := servers[0].count(scheduler.Failed); n < 5 {
			t.Errorf("partitioned server reported %d failed claims", n)
		}
		if vs := hist.Check(); len(vs) > 0 {
			t.Fatalf("%d history violations, first: %v", len(vs), vs[0])
		}
		t.Logf("%d slots, runs per server %v", slots, perServer)
	})
}

// TestNonOverlapFleet: three servers run a NonOverlap job every minute for
// three hours; some runs take 150s (longer than the interval and the TTL:
// managed renewal keeps the job's lease). One server crashes mid-run.
// Runs never overlap in true time, no slot runs twice, slots that pass
// during a run are not run later, and the history (grants, admissions,
// fenced writes by the job lease's token) is clean.
func TestNonOverlapFleet(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		store := backendtest.MemoryStore(t)
		hist := simtest.NewHistory()
		res := simtest.NewResource("ledger", hist)
		log := newRunLog()
		p := jobPolicy(t)
		const interval = time.Minute
		var servers []*server
		var crashOnce sync.Once
		offsets := []time.Duration{0, 700 * time.Millisecond, -1500 * time.Millisecond}
		for i, off := range offsets {
			srv := newServer(t, store, fmt.Sprint("s", i), off)
			err := srv.sched.Add(scheduler.Job{
				Name: "compact", Schedule: scheduler.Every(interval), Mode: scheduler.NonOverlap, Policy: p,
				Run: func(ctx context.Context, token leaseapi.Token) error {
					slot, _ := scheduler.Slot(ctx)
					h := scheduler.HandleFrom(ctx)
					if h.Token() != token {
						t.Errorf("token %d, handle token %d", token, h.Token())
					}
					startAt := time.Now()
					hist.Grant(h.Key(), h.Owner(), token, startAt)
					log.begin(srv.name, slot)
					defer func() { log.span(runSpan{srv.name, slot, token, startAt, time.Now()}) }()
					steps := 2 // 20s
					if slot.Unix()/60%7 == 3 {
						steps = 15 // 150s: two and a half intervals
					}
					for i := range steps {
						if slot.Unix()/60%29 == 11 && i == 5 {
							crashOnce.Do(func() { srv.faulty.SetMode(simtest.Down) })
						}
						admitAndWrite(ctx, hist, res)
						if err := backendtest.Pause(ctx, 10*time.Second); err != nil {
							return err
						}
					}
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			servers = append(servers, srv)
		}
		for _, srv := range servers {
			backendtest.Start(t, srv.sched)
		}
		simtest.Advance(3 * time.Hour)
		for _, srv := range servers {
			if err := srv.sched.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
		}

		ivs := append([]runSpan(nil), log.ivs...)
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].start.Before(ivs[j].start) })
		long := 0
		for i, iv := range ivs {
			if iv.end.Sub(iv.start) > interval {
				long++
			}
			if i > 0 && ivs[i-1].end.After(iv.start) {
				t.Errorf("runs overlap: %s %s [%s,%s] and %s %s [%s,%s]",
					ivs[i-1].server, ivs[i-1].slot.Format(time.TimeOnly), ivs[i-1].start.Format(time.TimeOnly), ivs[i-1].end.Format(time.TimeOnly),
					iv.server, iv.slot.Format(time.TimeOnly), iv.start.Format(time.TimeOnly), iv.end.Format(time.TimeOnly))
			}
			if i > 0 && iv.token <= ivs[i-1].token {
				t.Errorf("run tokens not increasing: %d then %d", ivs[i-1].token, iv.token)
			}
			// Skipped, not queued: a run starts within its slot's
			// clock difference, never a whole interval late.
			if late := iv.start.Sub(iv.slot); late < -2*time.Second || late > 2*time.Second {
				t.Errorf("slot %s started %v off its time", iv.slot.Format(time.TimeOnly), late)
			}
		}
		for slot, who := range log.runs {
			if len(who) != 1 {
				t.Errorf("slot %s ran on %v", slot.Format(time.TimeOnly), who)
			}
		}
		if long < 10 || len(ivs) < 100 {
			t.Fatalf("scenario too thin: %d runs, %d long", len(ivs), long)
		}
		crashed := 0
		for _, srv := range servers {
			crashed += srv.count(scheduler.Failed)
		}
		if crashed == 0 {
			t.Fatalf("no server crashed")
		}
		var busy, missed int
		for _, srv := range servers {
			busy += srv.count(scheduler.Busy)
			missed += srv.count(scheduler.Missed)
		}
		if busy == 0 || missed == 0 {
			t.Fatalf("long runs should make others busy and the runner miss slots: busy %d missed %d", busy, missed)
		}
		if vs := hist.Check(); len(vs) > 0 {
			t.Fatalf("%d history violations, first: %v", len(vs), vs[0])
		}
		_, _, accepted := res.Value()
		t.Logf("%d runs (%d long), %d fenced writes accepted, busy %d, missed %d", len(ivs), long, accepted, busy, missed)
	})
}
