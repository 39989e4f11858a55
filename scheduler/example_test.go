package scheduler_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/scheduler"
)

func Example() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer client.Close(ctx)

	policy, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second})
	s, _ := scheduler.New(client, scheduler.Options{})
	ran := make(chan struct{}, 1)
	_ = s.Add(scheduler.Job{
		Name:     "cleanup",
		Schedule: scheduler.Every(50 * time.Millisecond), // slots aligned to the epoch
		Mode:     scheduler.OnOneServer,
		Policy:   policy,
		Run: func(ctx context.Context, token leaseapi.Token) error {
			select {
			case ran <- struct{}{}:
				fmt.Println("cleanup ran with token", token)
			default:
			}
			return nil
		},
	})
	_ = s.Start(ctx)
	<-ran
	fmt.Println("stop:", s.Stop(ctx))
	// Output:
	// cleanup ran with token 1
	// stop: <nil>
}
