package valkey

import (
	"context"
	"time"
)

// Script sources for the raw baseline benchmarks, which run the same
// scripts through valkey-go directly.
var (
	SrcAcquire = srcAcquire
	SrcRelease = srcRelease
	SrcRenew   = srcRenew
)

// SHA1Hex is the digest EVALSHA names a script's source by.
var SHA1Hex = sha1hex

// Classify exposes classify to the table test of real driver errors.
var Classify = classify

// BoundAt returns the not-after bound (server µs; 0 for none) s would send
// now for a call whose deadline is dl. Later calls return larger values
// until s learns a new observation, so a test can take it as an upper bound
// of what an earlier call sent.
func BoundAt(s *Store, dl time.Time) int64 {
	now, wall := s.clock.now()
	return notAfter(s.clock.latest(), now, dl.Sub(wall))
}

// SkewClock shifts s's latest observation of the server's clock by d, as a
// step of the server's clock by -d would leave it. s must have one.
func SkewClock(s *Store, d time.Duration) {
	for {
		obs, _, seq := s.clock.load()
		if s.clock.publish(seq, serverClock{server: obs.server + d.Microseconds(), sent: obs.sent}) {
			return
		}
	}
}

// Settings returns what New made of a Store's Options.
func Settings(s *Store) (prefix, channel string, waitReplicas int, waitTimeout time.Duration) {
	return s.prefix, s.channel, s.waitReplicas, s.waitTimeout
}

// LibraryID is the name of the Store's function library.
var LibraryID = libraryID

// StoreID is the id s queues under in the wait sets of the keys it
// waits for.
func StoreID(s *Store) string { return s.id }

// SetPassHook makes s run f on its passer goroutine before each pass of a
// turn for a key it does not watch, with the passer's ctx (canceled by
// Close). Call it before s's first WatchRelease.
func SetPassHook(s *Store, f func(ctx context.Context, ident string)) { s.passHook = f }
