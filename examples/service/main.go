// Command service shows leader election with service.Singleton on the
// in-memory backend, in about three seconds: three servers (three
// lease.Clients on one memory.Store) campaign for one lease; the leader
// works while it leads; it crashes (its backend calls fail from then on
// and it never releases) and another server takes over once the lease has
// expired; that leader stops cleanly (Stop releases the lease) and the
// third server takes over at once.
//
//	go run ./examples/service
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/service"
)

// network is one server's connection to the backend; crash cuts it for
// good: every call fails before reaching the store, so the server can
// neither renew nor release.
type network struct {
	store   *memory.Store
	crashed atomic.Bool
}

var errDown = lease.Wrap(errors.New("server crashed"), "call")

func (n *network) TryAcquire(ctx context.Context, k lease.Key, owner string, ttl time.Duration) (lease.Record, error) {
	if n.crashed.Load() {
		return lease.Record{}, errDown
	}
	return n.store.TryAcquire(ctx, k, owner, ttl)
}

func (n *network) Renew(ctx context.Context, rec lease.Record, ttl time.Duration) (lease.Record, error) {
	if n.crashed.Load() {
		return lease.Record{}, errDown
	}
	return n.store.Renew(ctx, rec, ttl)
}

func (n *network) Validate(ctx context.Context, rec lease.Record) (lease.Record, error) {
	if n.crashed.Load() {
		return lease.Record{}, errDown
	}
	return n.store.Validate(ctx, rec)
}

func (n *network) Release(ctx context.Context, rec lease.Record) error {
	if n.crashed.Load() {
		return errDown
	}
	return n.store.Release(ctx, rec)
}

// WatchRelease forwards the store's release notifications: waiting
// candidates wake as soon as a leader releases.
func (n *network) WatchRelease(k lease.Key) (<-chan struct{}, func()) {
	return n.store.WatchRelease(k)
}

// printer serialises the servers' output and stamps it with the time
// since the start.
type printer struct {
	mu    sync.Mutex
	start time.Time
}

func (p *printer) say(server, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Printf("%5dms  server %s: %s\n", time.Since(p.start).Milliseconds(), server, fmt.Sprintf(format, args...))
}

type server struct {
	name   string
	net    *network
	client *lease.Client
	single *service.Singleton
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	store, err := memory.New(memory.Options{})
	if err != nil {
		return err
	}
	key, err := lease.NewKey("services", "billing-exporter")
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:          time.Second,
		SafetyMargin: 100 * time.Millisecond,
		RenewEvery:   300 * time.Millisecond,
		Retry:        100 * time.Millisecond,
		Wait:         2 * time.Second,
	})
	if err != nil {
		return err
	}
	out := &printer{start: time.Now()}
	changed := make(chan string, 16) // names of new leaders, in order

	var servers []*server
	for _, name := range []string{"A", "B", "C"} {
		srv := &server{name: name, net: &network{store: store}}
		srv.client, err = lease.NewClient(srv.net, lease.ClientOptions{})
		if err != nil {
			return err
		}
		defer srv.client.Close(ctx)
		srv.single, err = service.New(srv.client, service.Options{
			Key: key, Policy: policy,
			OnStartedLeading: func(token lease.Token) {
				out.say(name, "started leading (fencing token %d)", token)
				changed <- name
			},
			OnStoppedLeading: func() { out.say(name, "stopped leading") },
			Run: func(ctx context.Context, h *lease.Handle) error {
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				for batch := 1; ; batch++ {
					select {
					case <-ctx.Done():
						out.say(name, "work canceled: %v", context.Cause(ctx))
						return nil
					case <-tick.C:
						if h.State() == lease.StateActive {
							out.say(name, "exported batch %d with token %d", batch, h.Token())
						}
					}
				}
			},
		})
		if err != nil {
			return err
		}
		servers = append(servers, srv)
	}
	byName := map[string]*server{}
	for _, srv := range servers {
		byName[srv.name] = srv
		if err := srv.single.Start(ctx); err != nil {
			return err
		}
	}
	defer func() {
		for _, srv := range servers {
			_ = srv.single.Stop(ctx)
		}
	}()

	nextLeader := func(timeout time.Duration) (*server, error) {
		select {
		case name := <-changed:
			return byName[name], nil
		case <-time.After(timeout):
			return nil, errors.New("no leader in time")
		}
	}
	first, err := nextLeader(time.Second)
	if err != nil {
		return err
	}
	time.Sleep(800 * time.Millisecond)

	out.say(first.name, "-- crashes: every backend call fails from now on, nothing is released --")
	crashedAt := time.Now()
	first.net.crashed.Store(true)
	second, err := nextLeader(3 * time.Second)
	if err != nil {
		return err
	}
	out.say(second.name, "took over %dms after the crash (TTL 1s, retry 100ms)", time.Since(crashedAt).Milliseconds())
	time.Sleep(600 * time.Millisecond)

	out.say(second.name, "-- stops cleanly: Stop cancels the work, waits, releases --")
	stoppedAt := time.Now()
	if err := second.single.Stop(ctx); err != nil {
		return err
	}
	third, err := nextLeader(time.Second)
	if err != nil {
		return err
	}
	out.say(third.name, "took over %dms after the clean stop", time.Since(stoppedAt).Milliseconds())
	time.Sleep(400 * time.Millisecond)
	if first == second || second == third || first == third {
		return errors.New("a server led twice")
	}
	return nil
}
