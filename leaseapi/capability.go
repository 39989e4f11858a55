package leaseapi

// Capabilities are a backend's positive claims beyond the four [Backend]
// methods. The zero value claims nothing and is the safe answer: it is what
// [CapabilitiesOf] returns for a backend without a Capabilities method. It
// is a plain value, safe to copy and to share.
//
// Optional capabilities follow one rule: anything that weakens a safety
// check (adopting a grant read back after a lost reply, skipping the
// operation timer) is opt-in, and an unknown answer is the safe one.
//
// The mechanism is one explicit method, [Capable.Capabilities], returning
// positive claims, read through [CapabilitiesOf]. A method's mere presence
// is never a claim: a backend (or a wrapper) may have an Inspect method and
// still not claim [Capabilities.Inspect]. Wrappers never inherit claims by
// accident: a wrapper that forwards only the four Backend methods (a user's
// logging or metrics wrapper, written before or without knowing of
// capabilities) has no Capabilities method and so claims nothing, which is
// the safe answer for every capability: no adoption, no batching, no
// release notifications (waiters fall back to their retry timer), and every
// call bounded by the policy's OperationTimeout. A wrapper that knows of
// capabilities forwards them in one line,
//
//	func (w *W) Capabilities() leaseapi.Capabilities { return leaseapi.CapabilitiesOf(w.inner) }
//
// and [CapabilitiesOf] then drops every claim whose method the wrapper does
// not itself implement. A wrapper that changes a property (one that can
// block must clear NeverBlocks; one whose reads are not the store's reads
// must clear Adopt) edits the forwarded value before returning it.
//
// Unwrap chains are deliberately not consulted: walking into the wrapped
// store would let a wrapper that knows nothing of a claim pass it on, which
// is exactly the fail-open shape this rule exists to prevent.
type Capabilities struct {
	// Inspect claims that the backend implements [Inspector] and that its
	// Inspect reads the key's current state on the backend itself.
	Inspect bool

	// Adopt claims that a live grant read back with Inspect, carrying the
	// acquirer's owner id, proves that the acquisition was applied as
	// durably as one whose reply arrived. Only then does the runtime adopt
	// a grant whose acquisition reply was lost; otherwise that acquisition
	// fails with [ErrAmbiguousOutcome] and the grant, if any, expires at
	// its TTL. Requires Inspect. The memory and PostgreSQL backends claim
	// it; Valkey claims it only without WaitReplicas (with it, a grant read
	// back from the primary may be on no replica).
	Adopt bool

	// WatchRelease claims that the backend implements [ReleaseWatcher], so
	// that waiting acquisitions wake at a release instead of their retry
	// timer. Unclaimed costs latency, never safety.
	WatchRelease bool

	// RenewBatch claims that the backend implements [BatchRenewer] natively
	// (many renewals in one round trip), so the runtime coalesces renewals
	// into batches. Unclaimed, every renewal is its own [Backend.Renew].
	RenewBatch bool

	// NeverBlocks claims that every operation completes in process without
	// waiting on I/O or on anything a timeout would have to end (the memory
	// backend), so the runtime skips the OperationTimeout timer around its
	// calls. Context cancellation is still honoured. Anything that can wait
	// (a network, a lock held by a slow caller, a hook) must not claim it:
	// unclaimed means "may block", and every call is bounded.
	NeverBlocks bool
}

// Capable is implemented by a backend that makes claims. Capabilities must
// be cheap, do no I/O and return the same answer for the life of the
// backend (the runtime reads it once, in NewClient).
type Capable interface {
	Capabilities() Capabilities
}

// CapabilitiesOf returns what b claims, by the rule above: the zero
// Capabilities if b is nil or has no Capabilities method, and otherwise b's
// claims with every claim dropped whose method b does not implement
// (Inspect without [Inspector], WatchRelease without [ReleaseWatcher],
// RenewBatch without [BatchRenewer]) and Adopt dropped without Inspect.
// Every consumer of capabilities (the runtime, the conformance suite) reads
// them through this function and nothing else.
func CapabilitiesOf(b Backend) Capabilities {
	cb, ok := b.(Capable)
	if !ok {
		return Capabilities{}
	}
	c := cb.Capabilities()
	if _, ok := b.(Inspector); !ok {
		c.Inspect = false
	}
	c.Adopt = c.Adopt && c.Inspect
	if _, ok := b.(ReleaseWatcher); !ok {
		c.WatchRelease = false
	}
	if _, ok := b.(BatchRenewer); !ok {
		c.RenewBatch = false
	}
	return c
}
