package runtime

import (
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
// Safe for concurrent use.
type watermarks struct {
	mu sync.Mutex
	m  map[leaseapi.Key]leaseapi.Token
}

// admit records t for k and reports whether it is higher than every token
// seen for k before.
func (w *watermarks) admit(k leaseapi.Key, t leaseapi.Token) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[leaseapi.Key]leaseapi.Token)
	}
	if high, ok := w.m[k]; ok && t <= high {
		return false
	}
	if _, ok := w.m[k]; !ok && len(w.m) >= maxWatermarks {
		for old := range w.m {
			delete(w.m, old)
			break
		}
	}
	w.m[k] = t
	return true
}
