package service_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/service"
)

func Example() {
	ctx := context.Background()
	store, _ := memory.New(memory.Options{})
	client, _ := runtime.NewClient(store, runtime.ClientOptions{})
	defer client.Close(ctx)

	policy, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, Retry: time.Second, Wait: time.Minute})
	leading := make(chan struct{})
	s, _ := service.New(client, service.Options{
		Key:              leaseapi.MustKey("svc", "exporter"),
		Policy:           policy,
		OnStartedLeading: func(token leaseapi.Token) { fmt.Println("leading with token", token) },
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
		Run: func(ctx context.Context, h *runtime.Handle) error {
			close(leading)
			<-ctx.Done() // lead until the lease is lost or Stop is called
			return nil
		},
	})
	_ = s.Start(ctx) // e.g. fx.Hook{OnStart: s.Start, OnStop: s.Stop}
	<-leading
	fmt.Println("stop:", s.Stop(ctx))
	// Output:
	// leading with token 1
	// stopped leading
	// stop: <nil>
}
