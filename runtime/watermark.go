package runtime

import (
	"hash/maphash"
	"sync"

	"github.com/leasekit/lease/leaseapi"
)

// maxWatermarks bounds the keys a client remembers tokens for.
const maxWatermarks = 1 << 16

// watermarks remembers, per key, the highest token this client was granted,
// so that a backend that lost acknowledged grants (a restart without
// durable persistence, a failover to a lagging replica) is caught when it
// hands out a token again: such a grant fails with ErrFencingRegression and
// is never returned as Active. It is per client and bounded: with more than
// maxWatermarks keys an arbitrary key is forgotten, and a new process
// starts with none, so detection is best effort; the protected resource's
// own high-water mark is what keeps a regressed token from doing harm.
//
// Keys are remembered by a 64-bit seeded hash, which keeps 100,000 managed
// leases small. Two keys sharing a hash (about 2^-64 per pair) could only
// make a grant fail with ErrFencingRegression: it fails closed, never
// open. Safe for concurrent use.
type watermarks struct {
	mu   sync.Mutex
	seed maphash.Seed
	m    map[uint64]leaseapi.Token
}

func (w *watermarks) hash(k leaseapi.Key) uint64 {
	var h maphash.Hash
	h.SetSeed(w.seed)
	h.WriteString(k.Namespace())
	h.WriteByte('/')
	h.WriteString(k.Name())
	return h.Sum64()
}

// admit records t for k and reports whether it is higher than every token
// seen for k before.
func (w *watermarks) admit(k leaseapi.Key, t leaseapi.Token) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.seed = maphash.MakeSeed()
		w.m = make(map[uint64]leaseapi.Token)
	}
	hk := w.hash(k)
	high, seen := w.m[hk]
	if seen && t <= high {
		return false
	}
	if !seen && len(w.m) >= maxWatermarks {
		for old := range w.m {
			delete(w.m, old)
			break
		}
	}
	w.m[hk] = t
	return true
}
