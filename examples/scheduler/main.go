// Command scheduler shows scheduler.Scheduler on the in-memory backend, in
// about three seconds: three servers (three lease.Clients on one
// memory.Store, each with its own clock) run the same two jobs.
//
//   - "report" (OnOneServer, every 300ms): each slot runs on exactly one
//     server. Server B's clock is 50ms ahead, so it wins while it is up;
//     server C's clock is 150ms behind (more than the 100ms safety margin),
//     so it "wakes late" for every slot, after the winner has run and
//     released the slot's lease: its claim gets a token above 1 and it
//     skips the slot ("taken").
//   - "compact" (NonOverlap, every 300ms, each run 450ms): runs never
//     overlap in the fleet; slots that pass during a run are skipped
//     ("busy" on the other servers, "missed" on the one running).
//
// Halfway, server B crashes (its backend calls fail from then on): the
// others keep running every slot.
//
//	go run ./examples/scheduler
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/scheduler"
)

// skewed is a server clock that reads offset ahead of the real one.
type skewed struct {
	clock.Clock
	offset time.Duration
}

func (c skewed) Now() time.Time                  { return c.Clock.Now().Add(c.offset) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewed) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// network is one server's connection to the backend; crash cuts it for
// good: every call fails before reaching the store.
type network struct {
	lease.Backend
	crashed atomic.Bool
}

var errDown = lease.Wrap(errors.New("server crashed"), "call")

func (n *network) TryAcquire(ctx context.Context, k lease.Key, owner string, ttl time.Duration) (lease.Record, error) {
	if n.crashed.Load() {
		return lease.Record{}, errDown
	}
	return n.Backend.TryAcquire(ctx, k, owner, ttl)
}

func (n *network) Renew(ctx context.Context, rec lease.Record, ttl time.Duration) (lease.Record, error) {
	if n.crashed.Load() {
		return lease.Record{}, errDown
	}
	return n.Backend.Renew(ctx, rec, ttl)
}

func (n *network) Validate(ctx context.Context, rec lease.Record) (lease.Record, error) {
	if n.crashed.Load() {
		return lease.Record{}, errDown
	}
	return n.Backend.Validate(ctx, rec)
}

func (n *network) Release(ctx context.Context, rec lease.Record) error {
	if n.crashed.Load() {
		return errDown
	}
	return n.Backend.Release(ctx, rec)
}

// book records who ran what and prints it.
type book struct {
	mu      sync.Mutex
	start   time.Time
	reports map[time.Time][]string
	compact []span
	skipped map[string]map[string]int // server -> outcome -> count
}

type span struct {
	server     string
	start, end time.Time
}

func (b *book) say(server, format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Printf("%5dms  server %s: %s\n", time.Since(b.start).Milliseconds(), server, fmt.Sprintf(format, args...))
}

func (b *book) event(server string, e scheduler.Event) {
	switch e.Outcome {
	case scheduler.Ran:
		if e.Err != nil {
			b.say(server, "%s slot %s ran with token %d and failed: %v", e.Job, e.Slot.Format("15:04:05.000"), e.Token, e.Err)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.skipped[server] == nil {
		b.skipped[server] = map[string]int{}
	}
	b.skipped[server][e.Job+" "+e.Outcome.String()]++
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	store, err := memory.New(memory.Options{})
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:          time.Second,
		SafetyMargin: 100 * time.Millisecond,
		RenewEvery:   200 * time.Millisecond,
		Retry:        50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	b := &book{reports: map[time.Time][]string{}, skipped: map[string]map[string]int{}}
	const every = 300 * time.Millisecond

	type server struct {
		name  string
		net   *network
		sched *scheduler.Scheduler
	}
	var servers []*server
	for _, s := range []struct {
		name   string
		offset time.Duration
	}{{"A", 0}, {"B", 50 * time.Millisecond}, {"C", -150 * time.Millisecond}} {
		name := s.name
		clk := skewed{clock.New(), s.offset}
		net := &network{Backend: store}
		client, err := lease.NewClient(net, lease.ClientOptions{Clock: clk})
		if err != nil {
			return err
		}
		defer client.Close(ctx)
		sched, err := scheduler.New(client, scheduler.Options{
			Clock:   clk,
			OnEvent: func(e scheduler.Event) { b.event(name, e) },
		})
		if err != nil {
			return err
		}
		err = sched.Add(scheduler.Job{
			Name: "report", Schedule: scheduler.Every(every), Mode: scheduler.OnOneServer, Policy: policy,
			Run: func(ctx context.Context, token lease.Token) error {
				slot, _ := scheduler.Slot(ctx)
				b.say(name, "report  slot %s: ran (claim token %d)", slot.Format("15:04:05.000"), token)
				b.mu.Lock()
				b.reports[slot] = append(b.reports[slot], name)
				b.mu.Unlock()
				return nil
			},
		})
		if err != nil {
			return err
		}
		err = sched.Add(scheduler.Job{
			Name: "compact", Schedule: scheduler.Every(every), Mode: scheduler.NonOverlap, Policy: policy,
			Run: func(ctx context.Context, token lease.Token) error {
				slot, _ := scheduler.Slot(ctx)
				began := time.Now()
				b.say(name, "compact slot %s: started, job token %d", slot.Format("15:04:05.000"), token)
				t := time.NewTimer(450 * time.Millisecond)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					b.say(name, "compact canceled: %v", context.Cause(ctx))
				}
				b.mu.Lock()
				b.compact = append(b.compact, span{name, began, time.Now()})
				b.mu.Unlock()
				return nil
			},
		})
		if err != nil {
			return err
		}
		servers = append(servers, &server{name: name, net: net, sched: sched})
	}
	// Start 200ms after a slot boundary, so that the three clocks agree on
	// the first slot (a server whose clock is a slot behind would otherwise
	// claim one slot nobody else considers).
	time.Sleep(time.Until(scheduler.Every(every).Next(time.Now()).Add(200 * time.Millisecond)))
	b.start = time.Now()
	for _, s := range servers {
		if err := s.sched.Start(ctx); err != nil {
			return err
		}
	}
	time.Sleep(1500 * time.Millisecond)
	b.say("B", "-- crashes: every backend call fails from now on --")
	servers[1].net.crashed.Store(true)
	time.Sleep(1500 * time.Millisecond)
	b.say("A, B, C", "-- every server stops --")
	for _, s := range servers {
		if err := s.sched.Stop(ctx); err != nil {
			if !s.net.crashed.Load() {
				return err
			}
			// A crashed server cannot release what it still held: Stop
			// says so, and the lease ends at its TTL.
			b.say(s.name, "stop: %v", err)
		}
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Println("summary:")
	names := []string{"A", "B", "C"}
	for _, n := range names {
		var parts []string
		for k, v := range b.skipped[n] {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(parts)
		fmt.Printf("  server %s skipped: %s\n", n, strings.Join(parts, ", "))
	}
	for slot, who := range b.reports {
		if len(who) != 1 {
			return fmt.Errorf("report slot %s ran on %v", slot.Format("15:04:05.000"), who)
		}
	}
	fmt.Printf("  %d report slots, each ran exactly once\n", len(b.reports))
	sort.Slice(b.compact, func(i, j int) bool { return b.compact[i].start.Before(b.compact[j].start) })
	for i := 1; i < len(b.compact); i++ {
		if b.compact[i-1].end.After(b.compact[i].start) {
			return errors.New("compact runs overlapped")
		}
	}
	fmt.Printf("  %d compact runs, none overlapping\n", len(b.compact))
	return nil
}
