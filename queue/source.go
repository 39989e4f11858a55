package queue

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// Item is one message of a queue. It is a value; the Worker does not
// modify Payload.
type Item struct {
	// ID identifies the item across redeliveries: two deliveries of one
	// item carry the same ID. It names the item's lease (it must be a valid
	// key name, see leaseapi.NewKey) and is as confidential as a key.
	ID string
	// Receipt identifies this delivery, for sources that distinguish
	// deliveries (an SQS receipt handle, a consumer name); opaque to the
	// Worker, passed back to Ack and Nack. May be empty.
	Receipt string
	// Payload is the message body.
	Payload []byte
}

// Source is an at-least-once queue: every item is delivered until it is
// acknowledged, possibly more than once and possibly to several workers at
// a time (a redelivery after a visibility timeout while the first worker
// still works on it). Implementations must be safe for concurrent use.
// See the package doc for Valkey Streams and PostgreSQL adapters.
type Source interface {
	// Receive blocks until an item is available and returns it, or returns
	// an error matching ErrCanceled/ErrTimeout when ctx ends. Other errors
	// are retried by the Worker after a pause.
	Receive(ctx context.Context) (Item, error)
	// Ack removes the item for good: it is never delivered again.
	Ack(ctx context.Context, it Item) error
	// Nack gives the delivery back: the item becomes available for
	// redelivery now (or after the source's own backoff).
	Nack(ctx context.Context, it Item) error
}

// MemoryOptions configures a [MemorySource]. The zero value is valid.
// The value is not kept.
type MemoryOptions struct {
	// Clock drives visibility timeouts. Nil is the real clock.
	Clock clock.Clock
	// Visibility is how long a delivered item stays invisible before it is
	// delivered again unless acknowledged. Zero means 30s.
	Visibility time.Duration
}

// MemorySource is an in-process at-least-once [Source] with visibility
// timeouts, like SQS or a Valkey Streams consumer group with XAUTOCLAIM:
// Receive delivers the oldest visible item and hides it for Visibility;
// an item not acknowledged by then is delivered again (to anyone) with a
// new Receipt. Ack removes an item whatever delivery it names; Nack makes
// the item visible at once only if it names the current delivery. It is
// for tests and examples, and is safe for concurrent use. Its goroutines:
// none (Receive waits on the caller's goroutine). The zero MemorySource
// (and a nil *MemorySource) is not usable: Put, Receive, Ack and Nack
// return ErrInvalidState, Len, Acked and Deliveries report 0.
type MemorySource struct {
	clk        clock.Clock
	visibility time.Duration

	// mu guards the fields below. changed is closed (and replaced) whenever
	// an item becomes visible, waking every waiting Receive.
	mu       sync.Mutex
	items    map[string]*memEntry
	order    []string // IDs in arrival order, acknowledged ones removed lazily
	changed  chan struct{}
	receipts uint64
	acked    int
}

type memEntry struct {
	item       Item
	visibleAt  time.Time
	deliveries int
}

// NewMemorySource returns an empty source. A negative Visibility is
// ErrInvalidState.
func NewMemorySource(o MemoryOptions) (*MemorySource, error) {
	if o.Visibility < 0 {
		return nil, leaseapi.NewError("new memory source", leaseapi.ErrInvalidState, "negative visibility")
	}
	s := &MemorySource{clk: o.Clock, visibility: o.Visibility, items: map[string]*memEntry{}, changed: make(chan struct{})}
	if s.clk == nil {
		s.clk = clock.New()
	}
	if s.visibility == 0 {
		s.visibility = 30 * time.Second
	}
	return s, nil
}

// built reports whether s was made by NewMemorySource.
func (s *MemorySource) built() bool { return s != nil && s.items != nil }

func errSourceNotBuilt(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "memory source not built by NewMemorySource")
}

// Put enqueues an item, visible at once. An empty ID or one already queued
// is ErrInvalidState.
func (s *MemorySource) Put(id string, payload []byte) error {
	if !s.built() {
		return errSourceNotBuilt("put")
	}
	if id == "" {
		return leaseapi.NewError("put", leaseapi.ErrInvalidState, "empty id")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.items[id]; dup {
		return leaseapi.NewError("put", leaseapi.ErrInvalidState, "duplicate id")
	}
	s.items[id] = &memEntry{item: Item{ID: id, Payload: payload}, visibleAt: s.clk.Now()}
	s.order = append(s.order, id)
	s.signal()
	return nil
}

// signal wakes every waiting Receive; called with mu held.
func (s *MemorySource) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Receive implements [Source]: it returns the oldest visible item, waiting
// on the source's clock for one to be put or to become visible again.
func (s *MemorySource) Receive(ctx context.Context) (Item, error) {
	const op = "receive"
	if !s.built() {
		return Item{}, errSourceNotBuilt(op)
	}
	if ctx == nil {
		return Item{}, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	for {
		if err := ctx.Err(); err != nil {
			return Item{}, leaseapi.ContextError(op, err)
		}
		it, wait, changed, ok := s.take()
		if ok {
			return it, nil
		}
		var tm *clock.Timer
		var timer <-chan time.Time
		if wait > 0 {
			tm = s.clk.Timer(wait)
			timer = tm.C
		}
		select {
		case <-changed:
		case <-timer:
		case <-ctx.Done():
		}
		if tm != nil {
			tm.Stop()
		}
	}
}

// take delivers the oldest visible item, or says how long until the next
// one becomes visible (0: none pending) and which channel signals a change.
func (s *MemorySource) take() (it Item, wait time.Duration, changed <-chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	live := s.order[:0]
	var next time.Time
	for _, id := range s.order {
		e := s.items[id]
		if e == nil {
			continue // acknowledged
		}
		live = append(live, id)
		if ok {
			continue
		}
		if !e.visibleAt.After(now) {
			s.receipts++
			e.item.Receipt = strconv.FormatUint(s.receipts, 10)
			e.visibleAt = now.Add(s.visibility)
			e.deliveries++
			it, ok = e.item, true
			continue
		}
		if next.IsZero() || e.visibleAt.Before(next) {
			next = e.visibleAt
		}
	}
	clear(s.order[len(live):])
	s.order = live
	if !ok && !next.IsZero() {
		wait = max(next.Sub(now), time.Nanosecond)
	}
	return it, wait, s.changed, ok
}

// Ack implements [Source]: it removes the item, whichever delivery it
// names. An item that is not queued (acknowledged before) is
// ErrStaleOwner.
func (s *MemorySource) Ack(_ context.Context, it Item) error {
	if !s.built() {
		return errSourceNotBuilt("ack")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.items[it.ID]; !ok {
		return leaseapi.NewError("ack", leaseapi.ErrStaleOwner, "not queued")
	}
	delete(s.items, it.ID)
	s.acked++
	return nil
}

// Nack implements [Source]: the item becomes visible at once if it names
// the current delivery; a stale delivery (the item was redelivered since,
// or acknowledged) is ErrStaleOwner and changes nothing.
func (s *MemorySource) Nack(_ context.Context, it Item) error {
	if !s.built() {
		return errSourceNotBuilt("nack")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.items[it.ID]
	if !ok || e.item.Receipt != it.Receipt {
		return leaseapi.NewError("nack", leaseapi.ErrStaleOwner, "stale delivery")
	}
	e.visibleAt = s.clk.Now()
	s.signal()
	return nil
}

// Len returns how many items are queued (not yet acknowledged).
func (s *MemorySource) Len() int {
	if !s.built() {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// Acked returns how many items were acknowledged.
func (s *MemorySource) Acked() int {
	if !s.built() {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Deliveries returns how many times the queued item id was delivered.
func (s *MemorySource) Deliveries(id string) int {
	if !s.built() {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.items[id]; e != nil {
		return e.deliveries
	}
	return 0
}
