// Package mailbox is a bounded, context-aware, close-safe actor mailbox with
// a request/reply primitive. It knows nothing about leases; the supervisor
// package builds its actors on it.
//
// One goroutine (the actor) receives; any number of goroutines send. A send
// waits for room while honouring its context and fails with [ErrClosed]
// once the mailbox is closed: it never panics, because the underlying
// channel is never closed. A message that raced Close into the buffer is
// simply never received; callers that wait for a reply therefore also wait
// on the actor's done channel ([Call.Wait]).
package mailbox

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by sends after Close, and by [Call.Wait] when the
// actor exited without replying.
var ErrClosed = errors.New("mailbox: closed")

// ErrFull is returned by TrySend when the mailbox has no room.
var ErrFull = errors.New("mailbox: full")

// Mailbox is a bounded FIFO queue for one receiving actor. It is safe for
// concurrent use by multiple goroutines.
type Mailbox[T any] struct {
	// ch carries messages: senders send, the actor receives. Its capacity is
	// the mailbox bound. It is never closed, so a send racing Close cannot
	// panic.
	ch chan T
	// closed is closed by Close (once) to fail pending and later sends.
	closed    chan struct{}
	closeOnce sync.Once
}

// New returns a mailbox holding up to capacity messages (at least 1).
func New[T any](capacity int) *Mailbox[T] {
	m := new(Mailbox[T])
	m.Init(capacity)
	return m
}

// Init prepares a zero Mailbox held by value (an actor embedding its
// mailbox saves an allocation); it must be called once, before any use.
func (m *Mailbox[T]) Init(capacity int) {
	m.ch = make(chan T, max(capacity, 1))
	m.closed = make(chan struct{})
}

// Send enqueues v, waiting for room. It returns ctx's error if ctx ends
// first and [ErrClosed] if the mailbox is or becomes closed.
func (m *Mailbox[T]) Send(ctx context.Context, v T) error {
	select {
	case <-m.closed:
		return ErrClosed
	default:
	}
	select {
	case m.ch <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closed:
		return ErrClosed
	}
}

// TrySend enqueues v without waiting: [ErrFull] if there is no room,
// [ErrClosed] after Close.
func (m *Mailbox[T]) TrySend(v T) error {
	select {
	case <-m.closed:
		return ErrClosed
	default:
	}
	select {
	case m.ch <- v:
		return nil
	default:
		return ErrFull
	}
}

// Receive returns the channel the actor receives from. Only the actor may
// receive from it.
func (m *Mailbox[T]) Receive() <-chan T { return m.ch }

// Close fails every pending and later Send with ErrClosed. It is idempotent
// and does not wait for anything; messages already queued stay receivable
// (see Drain).
func (m *Mailbox[T]) Close() { m.closeOnce.Do(func() { close(m.closed) }) }

// Closed returns a channel closed by Close.
func (m *Mailbox[T]) Closed() <-chan struct{} { return m.closed }

// Drain passes every message queued now to fn without waiting. The actor
// calls it after Close to answer requests that were already queued.
func (m *Mailbox[T]) Drain(fn func(T)) {
	for {
		select {
		case v := <-m.ch:
			fn(v)
		default:
			return
		}
	}
}
