package runtime

import (
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// StateChange reports one transition of a handle (after suture's
// EventHook): Active → Uncertain, Uncertain → Active, and into each
// terminal state. It carries no key, owner id or error text, so it is safe
// for logs, metric labels and trace attributes.
type StateChange struct {
	// At is the local clock reading when the supervisor applied it.
	At time.Time
	// From and To are the states before and after.
	From, To leaseapi.State
	// Cause is the sentinel (one of leaseapi's Err values, compare with
	// errors.Is or ==) that explains To: ErrAmbiguousOutcome or
	// ErrBackendUnavailable for Uncertain, ErrStaleOwner or
	// ErrFencingRegression for Lost, ErrLost for Expired and for a lease
	// lost when its client closed; nil for Active and Released.
	Cause error
	// Token is the grant's fencing token.
	Token leaseapi.Token
	// KeyHash is the key's hash under the client's [KeyHasher].
	KeyHash string
}

// String renders the change with no key material beyond its hash.
func (e StateChange) String() string {
	s := e.From.String() + " -> " + e.To.String() + " key=" + e.KeyHash
	if e.Cause != nil {
		s += " cause=" + leaseapi.OutcomeOf(e.Cause).String()
	}
	return s
}

// stateQueueSize bounds the state changes waiting for the hook; more are
// dropped and counted. 1,024 absorbs a burst of transitions (a backend
// outage turning every lease Uncertain at once) while the hook catches up.
const stateQueueSize = 1024

// pendingChange is a queued state change; the key is hashed by the
// delivery goroutine, off the supervisor's path.
type pendingChange struct {
	key leaseapi.Key
	sc  StateChange
}

// stateQueue delivers state changes to the client's hook without ever
// blocking the supervisor that reports them: push appends to a bounded
// queue (dropping, and counting, when it is full) and starts a delivery
// goroutine if none runs. That goroutine calls the hook for each queued
// change in order, one at a time, and exits when the queue is empty, so
// an idle client keeps no goroutine; wait blocks until it has, unless a
// hook called it. Safe for concurrent use.
type stateQueue struct {
	hook   func(StateChange)
	hasher *KeyHasher
	m      *clientMetrics

	// mu guards q and running; the hook never runs under it.
	mu      sync.Mutex
	q       []pendingChange
	running bool
	// idle is signalled (closed, then replaced) each time the delivery
	// goroutine exits; it is nil while none runs.
	idle chan struct{}
}

func newStateQueue(hook func(StateChange), hasher *KeyHasher, m *clientMetrics) *stateQueue {
	return &stateQueue{hook: hook, hasher: hasher, m: m}
}

// push queues one change; it never blocks beyond the queue's lock.
func (q *stateQueue) push(key leaseapi.Key, sc StateChange) {
	q.mu.Lock()
	if len(q.q) >= stateQueueSize {
		q.mu.Unlock()
		q.m.dropped()
		return
	}
	q.q = append(q.q, pendingChange{key: key, sc: sc})
	start := !q.running
	if start {
		q.running = true
		q.idle = make(chan struct{})
	}
	q.mu.Unlock()
	if start {
		go q.deliver()
	}
}

// deliver runs on the delivery goroutine until the queue is empty.
func (q *stateQueue) deliver() {
	for {
		q.mu.Lock()
		if len(q.q) == 0 {
			q.q = nil // give a burst's backing array back
			q.running = false
			close(q.idle)
			q.idle = nil
			q.mu.Unlock()
			return
		}
		p := q.q[0]
		q.q[0] = pendingChange{}
		q.q = q.q[1:]
		q.mu.Unlock()
		p.sc.KeyHash = q.hasher.Hash(p.key)
		q.call(p.sc)
	}
}

// call runs the hook once; a panicking hook loses its event (counted as
// dropped), not the process.
func (q *stateQueue) call(sc StateChange) {
	defer func() {
		if recover() != nil {
			q.m.dropped()
		}
	}()
	q.hook(sc)
}

// wait returns once no delivery goroutine runs. Close calls it after the
// last supervisor exited, when no more changes can be pushed. Called on a
// hook's goroutine (Close from OnStateChange, see inHook), it returns at
// once instead of waiting, possibly for itself; the delivery goroutine
// goes on with what is queued once the hook returns, then exits.
func (q *stateQueue) wait() {
	q.mu.Lock()
	idle := q.idle
	q.mu.Unlock()
	if idle == nil || inHook() {
		return
	}
	<-idle
}

// stateChanged is a supervisor's OnStateChange hook, called on its
// goroutine for every transition of its lease: it counts the transition
// (and a loss, by cause) exactly and queues the event for the hook, if
// any. sc.Cause is the error of the new state, sc.Prev the error the
// handle held before (the reason it was Uncertain, if it was).
func (c *Client) stateChanged(sc supervisor.StateChange) {
	if sc.From == sc.To {
		return
	}
	c.m.transitioned(sc.From, sc.To, lossCause(sc.To, sc.Cause, sc.Prev))
	if c.events != nil {
		c.events.push(sc.Key, StateChange{At: sc.At, From: sc.From, To: sc.To, Cause: leaseapi.Kind(sc.Cause), Token: sc.Token})
	}
}
