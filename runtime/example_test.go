package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

func Example() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer client.Close(ctx)

	key := leaseapi.MustKey("jobs", "nightly")
	policy, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second})

	h, err := client.TryAcquire(ctx, key, policy)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	fmt.Println("token", h.Token(), h.State())

	_, err = client.TryAcquire(ctx, key, policy)
	fmt.Println("second acquire contended:", errors.Is(err, leaseapi.ErrContended))

	_ = h.Release(ctx)
	fmt.Println(h.State())

	h2, _ := client.TryAcquire(ctx, key, policy)
	fmt.Println("next token", h2.Token())
	// Output:
	// token 1 active
	// second acquire contended: true
	// released
	// next token 2
}

func ExampleClient_Run() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer client.Close(ctx)

	policy, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second, Retry: time.Second, Wait: time.Minute})
	err := client.Run(ctx, leaseapi.MustKey("reports", "daily"), policy, func(ctx context.Context, h *runtime.Handle) error {
		// ctx is canceled if the lease is lost; pass h.Token() with every
		// protected write.
		fmt.Println("running with token", h.Token())
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// running with token 1
	// run: <nil>
}

func ExampleHandle_StartManaged() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer client.Close(ctx)

	policy, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 30 * time.Second})
	h, _ := client.TryAcquire(ctx, leaseapi.MustKey("svc", "leader"), policy)
	m, _ := h.StartManaged(ctx)

	// ... lead; select on m.Loss() to step down when the lease is lost.

	_ = m.Stop(ctx) // stops renewal; never releases
	_, lost := <-m.Loss()
	fmt.Println("loss delivered:", lost)
	_ = h.Release(ctx)
	fmt.Println(h.State())
	// Output:
	// loss delivered: false
	// released
}
