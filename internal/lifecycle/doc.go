// Package lifecycle holds the start–stop bookkeeping the integrations
// (scheduler, queue, service) share, so that each states its contract once
// and implements it in one place.
//
// # Guarantees
//
// A [Life] is idle, running (goroutines from Start, or a Serve call on the
// caller's goroutine) or stopped, and stopped is terminal. Start succeeds
// at most once; Serve may run again after it returned, never concurrently
// with Start's goroutines or another Serve. Stop returns the channel that
// closes when what runs has returned, so the caller can wait under its own
// context. [WatchLoss] cancels protected work as soon as its lease is lost,
// and its watcher has exited when the caller learns the outcome.
//
// # What this package does not do
//
// It knows nothing about leases, errors or contexts' meaning: the caller
// cancels its own contexts on Stop, builds its own errors (the sentinels
// live in leaseapi) and decides what a loss is. It never logs.
package lifecycle
