package leaseapi

import (
	"errors"
	"time"
)

// Operation names a backend operation in an [Event].
type Operation uint8

// Operations reported in events.
const (
	OpTryAcquire Operation = iota + 1
	OpRenew
	OpValidate
	OpRelease
	OpInspect
	OpRenewBatch
)

// String returns the operation name.
func (o Operation) String() string {
	switch o {
	case OpTryAcquire:
		return "try-acquire"
	case OpRenew:
		return "renew"
	case OpValidate:
		return "validate"
	case OpRelease:
		return "release"
	case OpInspect:
		return "inspect"
	case OpRenewBatch:
		return "renew-batch"
	}
	return "unknown"
}

// Outcome classifies the result of an operation in an [Event]; it maps one
// to one onto the sentinels.
type Outcome uint8

// Outcomes reported in events.
const (
	OutcomeOK Outcome = iota + 1
	OutcomeContended
	OutcomeTimeout
	OutcomeCanceled
	OutcomeLost
	OutcomeStale
	OutcomeUnavailable
	OutcomeInvalid
	OutcomeAmbiguous
	OutcomeCapacity
	OutcomeRegression
)

// String returns the outcome name.
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeContended:
		return "contended"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeCanceled:
		return "canceled"
	case OutcomeLost:
		return "lost"
	case OutcomeStale:
		return "stale"
	case OutcomeUnavailable:
		return "unavailable"
	case OutcomeInvalid:
		return "invalid"
	case OutcomeAmbiguous:
		return "ambiguous"
	case OutcomeCapacity:
		return "capacity"
	case OutcomeRegression:
		return "regression"
	}
	return "unknown"
}

// OutcomeOf maps an error to its Outcome (nil is OutcomeOK).
func OutcomeOf(err error) Outcome {
	switch k := Kind(err); {
	case k == nil:
		return OutcomeOK
	case errors.Is(k, ErrContended):
		return OutcomeContended
	case errors.Is(k, ErrTimeout):
		return OutcomeTimeout
	case errors.Is(k, ErrCanceled):
		return OutcomeCanceled
	case errors.Is(k, ErrLost):
		return OutcomeLost
	case errors.Is(k, ErrStaleOwner):
		return OutcomeStale
	case errors.Is(k, ErrInvalidState):
		return OutcomeInvalid
	case errors.Is(k, ErrAmbiguousOutcome):
		return OutcomeAmbiguous
	case errors.Is(k, ErrCapacity):
		return OutcomeCapacity
	case errors.Is(k, ErrFencingRegression):
		return OutcomeRegression
	}
	return OutcomeUnavailable
}

// Event reports one backend call. It carries no key, owner id or error
// text: KeyHash is a keyed hash of the key, stable for one observed backend.
type Event struct {
	// At is the local clock reading when the call returned.
	At time.Time
	// Duration is how long the call took on the local clock.
	Duration  time.Duration
	Operation Operation
	Outcome   Outcome
	// KeyHash is a keyed hash of the key (hex), never the key itself.
	KeyHash string
}

// String renders the event without any key material beyond its hash.
func (e Event) String() string {
	return e.Operation.String() + " " + e.Outcome.String() + " key=" + e.KeyHash + " in " + e.Duration.String()
}

// Observer receives events. Observe runs on the goroutine that made the
// backend call, outside every lock; an observer that is still busy with one
// event misses the next ones (they are counted as dropped), so a slow
// observer never slows a lease down.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
