package valkey_test

import (
	"context"
	"net"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// opAllocs returns the allocations of one TryAcquire+Release pair and of
// one Renew through s, with a deadline on ctx as the runtime gives every
// call (so the not-after bound is computed and sent). They count every
// goroutine of the process: valkey-go's reader too.
func opAllocs(t *testing.T, s *valkey.Store) (pair, renew float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := leaseapi.MustKey("allocs", "pair")
	pairFn := func() {
		rec, err := s.TryAcquire(ctx, k, ownerA, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := s.TryAcquire(ctx, leaseapi.MustKey("allocs", "renew"), ownerA, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	renewFn := func() {
		if rec, err = s.Renew(ctx, rec, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// valkey-go dials its connections lazily: warm them up first.
	for range 100 {
		pairFn()
		renewFn()
	}
	return testing.AllocsPerRun(200, pairFn), testing.AllocsPerRun(200, renewFn)
}

// TestOpAllocs guards what a Store allocates per operation: the one string
// that holds a call's key names and arguments (args.go) and the reply's
// text (valkey-go's reader). A pair is 4, a renewal 2 (they were 14 and 8
// when each name and number was a string of its own, 5 and 3 while each
// clock observation was an allocation of its own; clock.go).
//
// The client's connection must stay in valkey-go's synchronous mode, the
// one measured: once two requests overlap on it, valkey-go pipelines
// from then on, and a pipelined call under a ctx with a deadline costs
// the driver more (a pair 6 under -race with AlwaysPipelining, at the
// bound). Its keepalive PING, sent after a second without a reply (a
// pause of the test under load), could overlap a call and switch it
// mid-measurement (CI once: "7 allocations, want at most 6"), so this
// client sends none (Dialer.KeepAlive < 0).
func TestOpAllocs(t *testing.T) {
	c := newClientOpt(t, vk.ClientOption{InitAddress: []string{serverAddr(t)}, Dialer: net.Dialer{KeepAlive: -1}})
	s := newStore(t, c, valkey.Options{})
	pair, renew := opAllocs(t, s)
	if want := 4.0 + 2*raceAllocs; pair > want {
		t.Errorf("TryAcquire+Release: %v allocations, want at most %v", pair, want)
	}
	if want := 2.0 + raceAllocs; renew > want {
		t.Errorf("Renew: %v allocations, want at most %v", renew, want)
	}
}
