package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
)

// TestRenewBatchAllocs guards the client side of a batched renewal:
// nothing per element (the batch script answers with one line, one expiry
// and a status byte per key); per script call (256 elements), one string
// for all the key names, values and the id (its buffer sized once), the
// argument slices, the command, the reply and the result slices: 16 in
// all, 1.14 per element with the former array reply.
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
	if want := 20.0 / n; per > want {
		t.Errorf("got %.2f allocations per batched renewal, want at most %v", per, want)
	}
}
