// Package watchhub is the release-watcher registry of the backends: the
// watches registered per key, their wake-ups, and the one optional
// background listener that feeds them, started on the first watch and
// stopped by Close. It knows nothing about leases or servers.
//
// # Channel semantics
//
// Every watch gets its own channel with buffer 1. A notification is a
// non-blocking send: a watch that already holds an unread wake-up is not
// woken twice (wake-ups coalesce), and a notifier never waits for a waiter.
// The channel is never closed, because a waiter may still be selecting on it
// after its stop function ran, or after [Hub.Close].
package watchhub

import (
	"context"
	"sync"
)

// Hub is a registry of watches keyed by K. Each watch carries a value V
// given by its owner (for example the text a hashed key was computed from),
// which [Hub.Values] reports; use struct{} when there is none.
//
// The zero Hub is ready to use and has no listener; [New] sets one. A Hub
// is safe for concurrent use: Watch, the stop functions, Notify, NotifyAll,
// Keys, Values and Close may be called from any goroutine, including the
// listener's own (all but Close, which waits for it).
type Hub[K comparable, V any] struct {
	// start is the listener, run on its own goroutine by the first Watch;
	// nil means none.
	start func(ctx context.Context)

	// mu guards watches, started, closed, cancel and done. No channel
	// operation blocks under it: watch channels are sent to without
	// blocking, and Close waits for the listener only after unlocking.
	mu      sync.Mutex
	watches map[K]map[*watch[V]]struct{} // nil until the first Watch, and after Close
	started bool                         // the listener goroutine was started
	closed  bool
	cancel  context.CancelFunc // cancels the listener's context; set when started
	// done is closed by the listener goroutine when start returns; nil
	// until it starts. Close waits on it.
	done chan struct{}
}

// watch is one registration. ch has buffer 1: notifiers send without
// blocking and coalesce; nobody closes it (a waiter may still be selecting
// on it after stop).
type watch[V any] struct {
	ch chan struct{}
	v  V
}

// New returns an empty Hub whose listener is start: the first [Hub.Watch]
// runs start(ctx) on a new goroutine, and [Hub.Close] cancels ctx and waits
// for start to return. start must return promptly once ctx is done; it
// typically holds a subscription and calls [Hub.Notify] or [Hub.NotifyAll].
// A nil start means no listener (the Hub then never starts a goroutine). New
// starts nothing itself.
func New[K comparable, V any](start func(ctx context.Context)) *Hub[K, V] {
	return &Hub[K, V]{start: start}
}

// Watch registers a watch of k carrying v and returns its channel and its
// stop function. The channel receives a value (buffer 1, coalescing) on each
// [Hub.Notify] of k and each [Hub.NotifyAll] while the watch is registered;
// it is never closed. stop removes the registration; it is idempotent and
// safe for concurrent use, and after it the channel receives nothing more
// (a wake-up already buffered stays readable).
//
// The first Watch of a Hub with a listener starts the listener goroutine,
// which exits when [Hub.Close] cancels its context. After Close, Watch
// registers nothing and starts nothing: the returned channel never receives
// and stop does nothing. Watch never blocks on I/O or on a channel.
func (h *Hub[K, V]) Watch(k K, v V) (<-chan struct{}, func()) {
	w := &watch[V]{ch: make(chan struct{}, 1), v: v}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return w.ch, func() {}
	}
	if h.watches == nil {
		h.watches = make(map[K]map[*watch[V]]struct{})
	}
	set := h.watches[k]
	if set == nil {
		set = make(map[*watch[V]]struct{})
		h.watches[k] = set
	}
	set[w] = struct{}{}
	if h.start != nil && !h.started {
		h.started = true
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		h.done = make(chan struct{})
		go h.run(ctx, h.done)
	}
	return w.ch, func() { h.remove(k, w) }
}

// run is the listener goroutine: it runs start and closes done when start
// returns, which it must do once ctx is canceled by Close.
func (h *Hub[K, V]) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	h.start(ctx)
}

// remove is a watch's stop function.
func (h *Hub[K, V]) remove(k K, w *watch[V]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.watches[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(h.watches, k)
		}
	}
}

// Notify wakes every watch of k, without blocking. It does nothing for a
// key nobody watches and after Close.
func (h *Hub[K, V]) Notify(k K) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if set := h.watches[k]; len(set) > 0 {
		wakeAll(set)
	}
}

// wakeAll wakes every watch in set. It is out of line, and Notify skips it
// for a key nobody watches, because a map iterator's frame is large: a
// backend calls Notify from a lease actor's small stack (see supervisor's
// callBackend), and should not grow it for a key with no watchers.
//
//go:noinline
func wakeAll[V any](set map[*watch[V]]struct{}) {
	for w := range set {
		wake(w.ch)
	}
}

// NotifyAll wakes every watch of every key, without blocking; for a
// listener that may have missed notifications (a dropped subscription). It
// does nothing after Close.
func (h *Hub[K, V]) NotifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.watches {
		for w := range set {
			wake(w.ch)
		}
	}
}

// Has reports whether k has at least one registered watch (false after
// Close).
func (h *Hub[K, V]) Has(k K) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watches[k]) > 0
}

// Len returns the number of keys that have at least one registered watch
// (0 after Close).
func (h *Hub[K, V]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watches)
}

// Keys returns the keys that have at least one registered watch, in no
// particular order: a snapshot, nil when there are none (and after Close).
func (h *Hub[K, V]) Keys() []K {
	h.mu.Lock()
	defer h.mu.Unlock()
	var keys []K
	for k := range h.watches {
		keys = append(keys, k)
	}
	return keys
}

// Values returns, for each key that has at least one registered watch, the
// value of one of its watches (any one), in no particular order: a
// snapshot, nil when there are none (and after Close).
func (h *Hub[K, V]) Values() []V {
	h.mu.Lock()
	defer h.mu.Unlock()
	var vals []V
	for _, set := range h.watches {
		for w := range set {
			vals = append(vals, w.v)
			break
		}
	}
	return vals
}

// Close drops every registration, so that no channel handed out by Watch
// receives again, and, if the listener was started, cancels its context and
// waits for it to return. Close is idempotent and safe for concurrent use
// (every call waits for the listener); it must not be called from the
// listener itself, which would wait for itself. After Close, Watch
// registers nothing and starts nothing.
func (h *Hub[K, V]) Close() {
	h.mu.Lock()
	h.closed = true
	h.watches = nil
	cancel, done := h.cancel, h.done
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// wake sends to ch without blocking: a wake-up already pending absorbs it.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
