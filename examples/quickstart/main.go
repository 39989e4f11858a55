// Command quickstart shows lease end to end on the in-memory backend, in
// about two seconds: acquire a lease, keep it with managed renewal, write
// to a resource fenced by the lease's token, lose the lease when renewals
// stop getting through, watch the next holder take over with a higher
// token, see the old holder's late write refused, and release.
//
//	go run ./examples/quickstart
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
)

// ledger is a protected resource: it accepts a write only with a token at
// least as high as the highest it has seen, so a holder that lost its lease
// (paused, partitioned) cannot overwrite the work of the next holder.
type ledger struct {
	mu      sync.Mutex
	highest lease.Token
	lines   []string
}

func (l *ledger) write(token lease.Token, line string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token < l.highest {
		return fmt.Errorf("ledger: token %d is older than %d: write refused", token, l.highest)
	}
	l.highest = token
	l.lines = append(l.lines, line)
	return nil
}

// partition wraps a backend and, while cut, fails every renewal as a
// network partition would: the holder cannot prove it still holds the lease.
type partition struct {
	lease.Backend
	cut atomic.Bool
}

func (p *partition) Renew(ctx context.Context, rec lease.Record, ttl time.Duration) (lease.Record, error) {
	if p.cut.Load() {
		return lease.Record{}, lease.Wrap(errors.New("partitioned"), "renew")
	}
	return p.Backend.Renew(ctx, rec, ttl)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	store, err := memory.New(memory.Options{})
	if err != nil {
		return err
	}

	// Two "servers" share the backend; the first one's network can be cut.
	net := &partition{Backend: store}
	serverA, err := lease.NewClient(net, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer serverA.Close(ctx)
	serverB, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		return err
	}
	defer serverB.Close(ctx)

	key, err := lease.NewKey("jobs", "nightly-report")
	if err != nil {
		return err
	}
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL:          time.Second,
		SafetyMargin: 100 * time.Millisecond,
		RenewEvery:   300 * time.Millisecond,
		Retry:        100 * time.Millisecond,
		Wait:         5 * time.Second,
	})
	if err != nil {
		return err
	}
	book := &ledger{}

	a, err := serverA.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	fmt.Printf("server A acquired %s with fencing token %d; state %s\n", key, a.Token(), a.State())
	managed, err := a.StartManaged(ctx)
	if err != nil {
		return err
	}
	fmt.Println("server A renews the lease in the background (every 300ms, TTL 1s)")

	if _, err := serverB.TryAcquire(ctx, key, policy); errors.Is(err, lease.ErrContended) {
		fmt.Println("server B tried too and was refused: the key is held")
	}
	time.Sleep(1200 * time.Millisecond) // longer than the TTL: renewal keeps it
	if a.State() != lease.StateActive {
		return fmt.Errorf("lease not kept by renewal: %s", a.State())
	}
	if err := book.write(a.Token(), "A: report part 1"); err != nil {
		return err
	}
	fmt.Printf("server A still holds it after 1.2s and wrote to the ledger with token %d\n", a.Token())

	// Server B waits for the key in the background.
	type result struct {
		h   *lease.Handle
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		h, err := serverB.Acquire(ctx, key, policy)
		waiting <- result{h, err}
	}()

	fmt.Println("-- the network of server A is cut: its renewals fail --")
	net.cut.Store(true)
	loss := <-managed.Loss()
	fmt.Printf("server A was told it lost the lease: state %s (%v)\n", loss.State, loss.Err)
	fmt.Printf("server A's handle now reports %s: it must stop working\n", a.State())

	got := <-waiting
	if got.err != nil {
		return got.err
	}
	b := got.h
	fmt.Printf("server B acquired %s after the TTL ran out, with token %d\n", key, b.Token())
	if err := book.write(b.Token(), "B: report part 1"); err != nil {
		return err
	}
	fmt.Printf("server B wrote to the ledger with token %d\n", b.Token())

	// Server A was paused or slow and tries to write anyway: the fence holds.
	if err := book.write(a.Token(), "A: report part 2 (late)"); err != nil {
		fmt.Println("server A's late write was refused:", err)
	} else {
		return errors.New("a stale write was accepted")
	}

	if err := b.Release(ctx); err != nil {
		return err
	}
	fmt.Printf("server B released the lease: state %s\n", b.State())
	fmt.Println("ledger:", book.lines)
	return nil
}
