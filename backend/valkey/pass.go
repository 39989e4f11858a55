package valkey

import (
	"context"
	"maps"
	"slices"
	"time"
)

// Passing a turn on.
//
// A release pops the Store queued longest and wakes it alone, so the entry
// of a Store whose waiters gave up while the key was held (their Acquire
// ended by ctx or MaxWait) would swallow that release: the Stores queued
// behind it would learn of it only from their retry timers. A live Store
// therefore passes on a turn it receives for a key it no longer watches,
// as the release would have given it had the Store not been queued
// (srcPassTurn): the next queued Store is woken, one round trip later. It
// does so on a goroutine of its own, the passer, so that the subscriber
// goroutine never waits on the network.

// passTimeout bounds one pass: a pass that fails (the server unreachable
// meanwhile) is dropped, and the next queued Store then acquires on its
// retry timer, as behind a Store that is gone.
const passTimeout = 5 * time.Second

// passTurn asks the passer to pass on the turn the Store was given for
// ident, a key it does not watch. It never blocks: it is called by the
// subscriber's message callback. Turns of one key not passed yet coalesce
// (one pass pops one entry; a second turn for the key needs a second
// release, which pops an entry of its own).
func (s *Store) passTurn(ident string) {
	s.turnsMu.Lock()
	if s.passes == nil {
		s.passes = make(map[string]struct{})
	}
	s.passes[ident] = struct{}{}
	s.turnsMu.Unlock()
	select {
	case s.passWake <- struct{}{}:
	default:
	}
}

// passer is the goroutine that passes turns on, one at a time. subscribe
// runs it, with its own ctx, and waits for it to return once Close
// cancels ctx; the turns not passed by then are dropped (the Store is
// gone, as far as the queue is concerned).
func (s *Store) passer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.passWake:
		}
		s.turnsMu.Lock()
		idents := slices.Collect(maps.Keys(s.passes))
		clear(s.passes)
		s.turnsMu.Unlock()
		for _, ident := range idents {
			if s.passHook != nil {
				s.passHook(ctx, ident)
			}
			if ctx.Err() != nil {
				return
			}
			// Watched again since the turn came: the new watch's first
			// attempt follows its registration and so the release; it
			// takes the free key, or marks the grant and queues, and the
			// release of that grant wakes the next Store.
			if s.watches.Has(ident) {
				continue
			}
			s.pass(ctx, ident)
		}
	}
}

// pass runs srcPassTurn for ident. Its reply is not read: the pass is best
// effort, and a failed or lost one leaves the next Store its retry timer.
func (s *Store) pass(ctx context.Context, ident string) {
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	lease := s.prefix + ":{" + ident + leaseSuffix
	_, ida := newRequestID()
	_ = s.run(ctx, fnPassTurn, []string{lease, waitKeyOf(lease)}, []string{s.channel + ":", ident, ida})
}
