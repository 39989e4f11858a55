package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// TestRenewBatchAllocs guards the client side of a batched renewal: per
// element only the expiry, which the batch script returns as a bulk
// string that valkey-go allocates; per script call (256 elements), one
// string for all the key names and values (the TTL's text is made once
// per batch), the argument slices, the command and the reply array.
func TestRenewBatchAllocs(t *testing.T) {
	s := newStore(t, newClient(t, serverAddr(t)), valkey.Options{})
	ctx := context.Background()
	const n = 256
	reqs := make([]leaseapi.RenewRequest, n)
	for i := range reqs {
		rec, err := s.TryAcquire(ctx, leaseapi.MustKey("allocs", "k"+itoa(i)), ownerA, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = leaseapi.RenewRequest{Record: rec, TTL: time.Minute}
	}
	per := testing.AllocsPerRun(20, func() {
		for i, r := range s.RenewBatch(ctx, reqs) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			reqs[i].Record = r.Record
		}
	}) / n
	if want := 1.25; per > want {
		t.Errorf("got %.2f allocations per batched renewal, want at most %v", per, want)
	}
}
