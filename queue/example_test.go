package queue_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/queue"
	"github.com/leasekit/lease/runtime"
)

func Example() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer client.Close(ctx)

	src, _ := queue.NewMemorySource(queue.MemoryOptions{Visibility: time.Minute})
	for _, id := range []string{"order-1", "order-2", "order-3"} {
		_ = src.Put(id, []byte("payload of "+id))
	}
	policy, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second})
	acked := make(chan struct{}, 3)
	w, _ := queue.New(client, src, queue.Options{
		Concurrency: 1,
		Policy:      policy,
		Handler: func(ctx context.Context, it queue.Item, token leaseapi.Token) error {
			fmt.Printf("%s with token %d\n", it.Payload, token) // fence writes with token
			return nil
		},
		OnEvent: func(e queue.Event) {
			if e.Outcome == queue.Acked {
				acked <- struct{}{}
			}
		},
	})
	_ = w.Start(ctx)
	for range 3 {
		<-acked
	}
	fmt.Println("stop:", w.Stop(ctx), "left:", src.Len())
	// Output:
	// payload of order-1 with token 1
	// payload of order-2 with token 1
	// payload of order-3 with token 1
	// stop: <nil> left: 0
}
