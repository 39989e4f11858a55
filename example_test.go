package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/scheduler"
	"github.com/leasekit/lease/service"
)

// The README's five-minute start: acquire, renew in the background, write
// with the fencing token, release and check the result.
func Example() {
	ctx := context.Background()
	store, err := memory.New(memory.Options{}) // one process; valkey.New or postgres.New across servers
	if err != nil {
		log.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL: 30 * time.Second, RenewEvery: 10 * time.Second,
		SafetyMargin: 5 * time.Second, Retry: 100 * time.Millisecond,
		Wait: 2 * time.Second, MaxAttempts: 20,
		OperationTimeout: 2 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	key, err := lease.NewKey("jobs", "nightly-report")
	if err != nil {
		log.Fatal(err)
	}

	handle, err := client.Acquire(ctx, key, policy)
	if err != nil {
		log.Fatal(err) // errors.Is(err, lease.ErrTimeout): another owner kept it for Wait
	}
	managed, err := handle.StartManaged(ctx) // renews every RenewEvery until Stop or Release
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", key, "with token", handle.Token(), "state", handle.State())

	// Pass the token with every protected write; the resource rejects
	// tokens lower than the highest it has accepted.
	fmt.Println("writing the report with fencing token", handle.Token())

	if err := managed.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	if err := handle.Release(ctx); err != nil {
		log.Fatal(err) // never assume a release happened: the lease may be held until its TTL
	}
	fmt.Println("state", handle.State())
	// Output:
	// holding jobs/nightly-report with token 1 state active
	// writing the report with fencing token 1
	// state released
}

// Errors match exactly one sentinel; a second acquisition of a held key is
// contended, and every acquisition gets a higher token.
func Example_errors() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := lease.NewClient(store, lease.ClientOptions{})
	defer client.Close(ctx)
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	key := lease.MustKey("jobs", "cleanup")

	first, _ := client.TryAcquire(ctx, key, policy)
	_, err := client.TryAcquire(ctx, key, policy)
	fmt.Println("contended:", errors.Is(err, lease.ErrContended))
	_ = first.Release(ctx)
	second, _ := client.TryAcquire(ctx, key, policy)
	fmt.Println("tokens:", first.Token(), second.Token())

	_, err = lease.NewKey("jobs/nightly", "x")
	fmt.Println("bad key:", errors.Is(err, lease.ErrInvalidState))
	// Output:
	// contended: true
	// tokens: 1 2
	// bad key: true
}

// Client.Run is the one-call form: fn's ctx is canceled if the lease is
// lost, and the lease is released when fn returns.
func ExampleClient_Run() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := lease.NewClient(store, lease.ClientOptions{})
	defer client.Close(ctx)

	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Minute})
	err := client.Run(ctx, lease.MustKey("reports", "daily"), policy, func(ctx context.Context, h *lease.Handle) error {
		fmt.Println("running with token", h.Token())
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// running with token 1
	// run: <nil>
}

// Valkey (or Redis 7+): one Lua script per operation, the server's clock.
func Example_valkey() {
	ctx := context.Background()
	vc, err := valkeygo.NewClient(valkeygo.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer vc.Close()
	store, err := valkey.New(vc, valkey.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	err = client.Run(ctx, lease.MustKey("reports", "daily"), policy, func(ctx context.Context, h *lease.Handle) error {
		fmt.Println("writing the report with fencing token", h.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// PostgreSQL 13+: one statement per operation on the server's clock;
// Migrate creates the tables once.
func Example_postgres() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, postgres.Options{}); err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	err = client.Run(ctx, lease.MustKey("reports", "daily"), policy, func(ctx context.Context, h *lease.Handle) error {
		fmt.Println("writing the report with fencing token", h.Token())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Leader election: one candidate of a fleet runs the service at a time.
func Example_leaderElection() {
	ctx := context.Background()
	store, err := memory.New(memory.Options{}) // valkey.New or postgres.New across servers
	if err != nil {
		log.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second, Retry: time.Second, Wait: time.Minute})
	if err != nil {
		log.Fatal(err)
	}

	leading := make(chan struct{})
	leader, err := service.New(client, service.Options{
		Key:              lease.MustKey("svc", "exporter"),
		Policy:           policy,
		OnStartedLeading: func(token lease.Token) { fmt.Println("leading with token", token) },
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
		OnError:          func(err error) { log.Println("leader election:", err) },
		Run: func(ctx context.Context, h *lease.Handle) error {
			close(leading)
			<-ctx.Done() // lead until the lease is lost or Stop is called
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := leader.Start(ctx); err != nil { // e.g. fx.Hook{OnStart: leader.Start, OnStop: leader.Stop}
		log.Fatal(err)
	}
	<-leading
	if err := leader.Stop(ctx); err != nil {
		log.Fatal(err) // the lease may still be held until its TTL
	}
	// Output:
	// leading with token 1
	// stopped leading
}

// A scheduled job: each slot runs on one server of the fleet.
func Example_scheduledJob() {
	ctx := context.Background()
	store, err := memory.New(memory.Options{}) // valkey.New or postgres.New across servers
	if err != nil {
		log.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	policy, err := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}

	jobs, err := scheduler.New(client, scheduler.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	err = jobs.Add(scheduler.Job{
		Name:     "cleanup",
		Schedule: scheduler.Every(50 * time.Millisecond), // slots aligned to the epoch, in UTC
		Mode:     scheduler.OnOneServer,
		Policy:   policy,
		Run: func(ctx context.Context, token lease.Token) error {
			select {
			case ran <- struct{}{}:
				fmt.Println("cleanup ran with token", token)
			default:
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := jobs.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ran
	if err := jobs.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// cleanup ran with token 1
}
