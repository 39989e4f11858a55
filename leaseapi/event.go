package leaseapi

import (
	"errors"
	"time"
)

// Operation names a backend operation in an [Event]. Its values are the
// reference API's ("acquire", "renew", "validate", "release") plus this
// module's two additions, so string(op) is the name itself.
type Operation string

// Operations reported in events.
const (
	// OperationAcquire is one acquisition attempt ([Backend.TryAcquire]).
	OperationAcquire Operation = "acquire"
	// OperationRenew is one renewal ([Backend.Renew]).
	OperationRenew Operation = "renew"
	// OperationValidate is one validation ([Backend.Validate]).
	OperationValidate Operation = "validate"
	// OperationRelease is one release ([Backend.Release]).
	OperationRelease Operation = "release"
	// OperationInspect is one read of a key ([Inspector.Inspect]); an
	// addition to the reference API.
	OperationInspect Operation = "inspect"
	// OperationRenewBatch is one batched renewal ([BatchRenewer.RenewBatch]);
	// an addition to the reference API.
	OperationRenewBatch Operation = "renew-batch"
)

// String returns the operation name.
func (o Operation) String() string { return string(o) }

// Outcome classifies the result of an operation in an [Event]; it maps one
// to one onto the sentinels. Its values are the reference API's
// ("success", "contended", "stale", "canceled", "unavailable", "ambiguous",
// "invalid") plus one per sentinel the reference does not have ("timeout",
// "lost", "capacity", "regression"), so string(outcome) is the name itself.
type Outcome string

// Outcomes reported in events.
const (
	// OutcomeSuccess is a nil error.
	OutcomeSuccess Outcome = "success"
	// OutcomeContended is [ErrContended].
	OutcomeContended Outcome = "contended"
	// OutcomeStale is [ErrStaleOwner].
	OutcomeStale Outcome = "stale"
	// OutcomeCanceled is [ErrCanceled].
	OutcomeCanceled Outcome = "canceled"
	// OutcomeUnavailable is [ErrBackendUnavailable] (and any error from
	// outside this module, which [Wrap] classifies so).
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomeAmbiguous is [ErrAmbiguousOutcome].
	OutcomeAmbiguous Outcome = "ambiguous"
	// OutcomeInvalid is [ErrInvalidState].
	OutcomeInvalid Outcome = "invalid"
	// OutcomeTimeout is [ErrTimeout]; an addition to the reference API.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeLost is [ErrLost]; an addition to the reference API.
	OutcomeLost Outcome = "lost"
	// OutcomeCapacity is [ErrCapacity]; an addition to the reference API.
	OutcomeCapacity Outcome = "capacity"
	// OutcomeRegression is [ErrFencingRegression]; an addition to the
	// reference API.
	OutcomeRegression Outcome = "regression"
)

// String returns the outcome name.
func (o Outcome) String() string { return string(o) }

// OutcomeOf maps an error to its Outcome (nil is OutcomeSuccess).
func OutcomeOf(err error) Outcome {
	switch k := Kind(err); {
	case k == nil:
		return OutcomeSuccess
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
// text: KeyHash is a keyed hash of the key, stable for one observed backend
// (or, with a shared hash key, across a fleet).
type Event struct {
	// At is the local clock reading when the call returned.
	At        time.Time
	Operation Operation
	Outcome   Outcome
	// KeyHash is a keyed hash of the key (hex), never the key itself.
	KeyHash string
	// Duration is how long the call took on the local clock (an addition
	// to the reference API, after its fields).
	Duration time.Duration
}

// String renders the event without any key material beyond its hash.
func (e Event) String() string {
	return e.Operation.String() + " " + e.Outcome.String() + " key=" + e.KeyHash + " in " + e.Duration.String()
}

// Observer receives events. Observe never runs on the goroutine that made
// the backend call: the observed backend hands each event to the observer
// on a goroutine of its own, outside every lock, and an observer that is
// still busy with one event misses the next ones (they are counted as
// dropped), so a slow observer never slows a lease down. A panic in
// Observe is recovered and counted; the event is dropped.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }
