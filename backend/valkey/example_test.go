package valkey_test

import (
	"context"
	"log"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/valkey"
)

// The usual setup: one valkey-go client, one Store, one lease.Client on it.
// Closing in LIFO order stops the client first (it releases what it holds),
// then the Store's release subscription, then the connection.
func ExampleNew() {
	ctx := context.Background()
	client, err := vk.NewClient(vk.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := valkey.New(client, valkey.Options{Prefix: "myapp"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	leases, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer leases.Close(ctx)
}
