package valkey

import (
	"context"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/internal/watchhub"
	"github.com/leasekit/lease/leaseapi"
)

// Subscriber back-off after the subscription fails, doubling up to the max.
const (
	resubscribeMin = 20 * time.Millisecond
	resubscribeMax = time.Second
)

// WatchRelease implements [leaseapi.ReleaseWatcher]. The returned channel
// receives a value (buffer 1, coalescing) after key is released through
// this Store, or through any Store with the same prefix on the same server
// or cluster once this Store's TryAcquire, made while the watch is
// registered, found the key held: that attempt marks the grant and queues
// this Store, and the release of a marked grant wakes the Store queued
// longest (see "Release notification" in the package doc). The runtime's
// waiting Acquire watches before its first attempt, so it is told of the
// releases it waits for in its Store's turn. stop removes the
// registration; it is safe to call more than once. A Store queued for a
// key it no longer watches passes on the turn a release gives it, so that
// a waiter that gives up delays no other Store.
//
// The first call starts the Store's single subscription (SUBSCRIBE to the
// prefix's release channel) in a background goroutine, which exits only
// when [Store.Close] is called; WatchRelease itself does no I/O. Delivery is
// best effort, so the channel also receives a value whenever the
// subscription is (re)confirmed by the server or drops: a release may have
// gone unseen in that gap, and a spurious wake only costs the waiter one
// TryAcquire. Expiry is never notified. After Close, the channel never
// receives (waiters fall back to their retry timers).
func (s *Store) WatchRelease(key leaseapi.Key) (<-chan struct{}, func()) {
	if key.IsZero() || s.zero() {
		return make(chan struct{}, 1), func() {}
	}
	return s.watches.Watch(ident(key), struct{}{})
}

// Close stops the release subscription, if one was started, and waits for
// its goroutine to exit. It does not close the valkey-go client (the caller
// owns it) and does not release any lease: the Backend methods keep working
// after Close, only release notifications stop. Close is idempotent and safe
// for concurrent use.
func (s *Store) Close() {
	if s.zero() {
		return
	}
	s.watches.Close()
}

// subscribe is the subscriber goroutine: it holds one SUBSCRIBE to the
// release channel and fans messages out to the watches of their key. When
// the subscription ends (connection lost, server restart) it wakes every
// watch, since a release may have been missed, and subscribes again after a
// back-off. It is the listener of s.watches, run on the goroutine the
// first WatchRelease starts; it returns when ctx is canceled by Close.
//
// The subscription has a connection of its own (Dedicate: one from
// valkey-go's blocking pool, given back when the subscription ends), never
// the pipelined connection the scripts share. valkey-go (v1.0.79) can
// mismatch replies when subscribe confirmations and command replies
// interleave on one connection across reconnections: the safety suite's
// nemesis soak saw a committed acquisition answered as "not applied", and
// a "protocol bug, message handled out of order" panic. The request ids
// (reqid.go) make a mismatched reply harmless; the dedicated connection
// keeps it from happening. Dedicate waits for a free connection when the
// blocking pool is exhausted (ClientOption.BlockingPoolSize), and Close
// then waits with it.
func (s *Store) subscribe(ctx context.Context) {
	// The hook runs on valkey-go's pipeline goroutine for every subscribe
	// confirmation, including the ones after a reconnection: waking is a
	// non-blocking send, as the hook must not block. The first confirmation
	// wakes nobody (a spurious wake of every watch of a fresh Store is
	// worse than the small window it would cover, and releases through
	// this Store are delivered locally anyway); every later one follows a
	// gap in which a release may have been missed. Each SUBSCRIBE names two
	// channels (the broadcast one and the Store's own) and is confirmed
	// once per channel: the broadcast channel's confirmation counts.
	var confirmed atomic.Int64
	hctx := vk.WithOnSubscriptionHook(ctx, func(sub vk.PubSubSubscription) {
		if sub.Kind != "subscribe" {
			return
		}
		if sub.Channel == s.own {
			s.listening.Store(true)
		}
		if sub.Channel == s.channel && confirmed.Add(1) > 1 {
			s.watches.NotifyAll()
		}
	})
	passing := make(chan struct{})
	go func() {
		defer close(passing)
		s.passer(ctx)
	}()
	defer func() { <-passing }()
	backoff := watchhub.Backoff{Min: resubscribeMin, Max: resubscribeMax}
	for {
		start := time.Now()
		dc, done := s.client.Dedicate()
		_ = dc.Receive(hctx, dc.B().Subscribe().Channel(s.channel, s.own).Build(), func(m vk.PubSubMessage) {
			if m.Channel == s.own {
				if !s.watches.Has(m.Message) {
					s.passTurn(m.Message) // its waiters gave up: the next Store's turn
					return
				}
				s.giveTurn(m.Message) // before the wake-up, which its attempt follows
			}
			s.watches.Notify(m.Message)
		})
		s.listening.Store(false)
		done()
		if ctx.Err() != nil {
			return
		}
		confirmed.Store(1) // the next confirmation follows a gap
		s.watches.NotifyAll()
		if time.Since(start) > resubscribeMax {
			backoff.Reset()
		}
		if !backoff.Wait(ctx) {
			return
		}
	}
}
