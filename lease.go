package lease

import (
	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// The model: keys, tokens, records, states. Each is an alias of the type
// in package leaseapi, the backend contract, so values pass freely between
// the two packages.
type (
	// Key is a validated, namespaced lease identity; see [NewKey]. A Key
	// is an immutable value, safe for concurrent use.
	Key = leaseapi.Key
	// Token is a fencing token: it strictly increases with every
	// successful acquisition of one key and is never reused. Pass it with
	// every protected write; the resource rejects tokens lower than the
	// highest it has accepted.
	Token = leaseapi.Token
	// Record is one grant as the backend stored it (backend times). It is
	// a value, safe for concurrent use.
	Record = leaseapi.Record
	// State is a handle's fail-closed lifecycle state. Only StateActive
	// admits ownership-dependent work.
	State = leaseapi.State
)

// States, numbered as in the reference API. The zero State is never Active.
const (
	// StateActive admits work until the handle's deadline.
	StateActive = leaseapi.StateActive
	// StateExpired: the local deadline passed without a confirmed renewal.
	StateExpired = leaseapi.StateExpired
	// StateLost: the backend proved that another grant replaced this one,
	// or the client closed before the lease could be released.
	StateLost = leaseapi.StateLost
	// StateUncertain: the last operation had no reliable outcome; no
	// admission until a Renew or Validate succeeds before the deadline.
	StateUncertain = leaseapi.StateUncertain
	// StateReleased: the holder released the lease.
	StateReleased = leaseapi.StateReleased
)

// MaxKeyBytes bounds the encoded form of a [Key] ("namespace/name").
const MaxKeyBytes = leaseapi.MaxKeyBytes

// NewKey validates namespace and name and returns the Key. Bad input
// (empty parts, '/' in the namespace, an empty name segment, control bytes,
// invalid UTF-8, more than MaxKeyBytes) is [ErrInvalidState]; the error
// never contains the rejected text.
func NewKey(namespace, name string) (Key, error) { return leaseapi.NewKey(namespace, name) }

// ParseKey parses the canonical "namespace/name" form produced by
// Key.String. Bad input is [ErrInvalidState].
func ParseKey(value string) (Key, error) { return leaseapi.ParseKey(value) }

// MustKey is NewKey for keys written in the program text: it panics on an
// invalid key and must not be used on input. An addition to the reference
// API.
func MustKey(namespace, name string) Key { return leaseapi.MustKey(namespace, name) }

// Policies.
type (
	// PolicyOptions is the input of [NewPolicy]; zero fields take the
	// documented defaults.
	PolicyOptions = leaseapi.PolicyOptions
	// Policy is a validated, immutable set of lease parameters, safe for
	// concurrent use. The zero Policy is rejected by Acquire.
	Policy = leaseapi.Policy
	// FailureBehavior says what a handle does after an operation without
	// a reliable outcome; the only behaviour is FailureFailClosed.
	FailureBehavior = leaseapi.FailureBehavior
)

// FailureFailClosed denies admission after every uncertain operation. It is
// 1, as in the reference API; the zero FailureBehavior means the same.
const FailureFailClosed = leaseapi.FailureFailClosed

// Policy bounds, enforced by [NewPolicy].
const (
	// MaxTTL bounds one lease's lifetime.
	MaxTTL = leaseapi.MaxTTL
	// MaxWait bounds how long Acquire waits (and Retry and Jitter).
	MaxWait = leaseapi.MaxWait
	// MaxAttempts bounds the attempts of one Acquire.
	MaxAttempts = leaseapi.MaxAttempts
	// MaxOperationTimeout bounds one backend call.
	MaxOperationTimeout = leaseapi.MaxOperationTimeout
)

// NewPolicy fills in the defaults of options' zero fields, checks every rule
// documented on [PolicyOptions] and returns the Policy. Invalid options are
// [ErrInvalidState] naming the field, never its value; NewPolicy never
// panics, and NewPolicy(p.Options()) returns p again.
func NewPolicy(options PolicyOptions) (Policy, error) { return leaseapi.NewPolicy(options) }

// Errors. Every error this module returns matches exactly one of them with
// errors.Is, and never contains a key, an owner id, a DSN or backend text.
// They are the sentinels of package leaseapi (the same values).
var (
	// ErrContended: another owner holds the requested lease.
	ErrContended = leaseapi.ErrContended
	// ErrTimeout: a bounded wait elapsed (Acquire's Wait, ctx's deadline;
	// then the error also matches context.DeadlineExceeded).
	ErrTimeout = leaseapi.ErrTimeout
	// ErrCanceled: the caller canceled (also matches context.Canceled).
	ErrCanceled = leaseapi.ErrCanceled
	// ErrLost: a formerly owned lease is no longer safely usable.
	ErrLost = leaseapi.ErrLost
	// ErrStaleOwner: the backend proved the owner or token is no longer
	// the key's current grant.
	ErrStaleOwner = leaseapi.ErrStaleOwner
	// ErrBackendUnavailable: a definite backend failure; nothing changed.
	ErrBackendUnavailable = leaseapi.ErrBackendUnavailable
	// ErrInvalidState: invalid input or an invalid state transition.
	ErrInvalidState = leaseapi.ErrInvalidState
	// ErrAmbiguousOutcome: a remote mutation may or may not have committed.
	ErrAmbiguousOutcome = leaseapi.ErrAmbiguousOutcome
	// ErrCapacity: a client bound (MaxWaiters, MaxManaged) is reached; the
	// call failed fast and changed nothing. An addition to the reference
	// API.
	ErrCapacity = leaseapi.ErrCapacity
	// ErrFencingRegression: the backend issued a token not higher than one
	// this client already saw for the key (it lost acknowledged writes).
	// An addition to the reference API.
	ErrFencingRegression = leaseapi.ErrFencingRegression
)

// Wrap returns err redacted and attributed to operation (fixed program
// text), keeping its classification: an error matching a sentinel keeps it,
// context errors become ErrCanceled or ErrTimeout, anything else
// ErrBackendUnavailable. nil stays nil.
func Wrap(err error, operation string) error { return leaseapi.Wrap(err, operation) }

// The backend contract and the sources a client can be given.
type (
	// Backend atomically persists one fenced lease record per key. The
	// backends of this module (backend/memory, backend/valkey,
	// backend/postgres) implement it; package leaseapi documents the
	// contract and its optional capabilities for backend authors.
	Backend = leaseapi.Backend
	// Clock supplies the time (only Now).
	Clock = leaseapi.Clock
	// OwnerSource makes owner ids; the default draws 128 random bits.
	OwnerSource = leaseapi.OwnerSource
	// Sleeper pauses an acquisition between attempts. Unlike the
	// reference's, its Sleep also takes a wake channel (a release
	// notification ends the pause early).
	Sleeper = leaseapi.Sleeper
	// RetrySource draws acquisition jitter in [0, max).
	RetrySource = leaseapi.RetrySource
)

// Observation.
type (
	// Event reports one backend call without key material (KeyHash is a
	// keyed hash) or error text.
	Event = leaseapi.Event
	// Operation names the backend operation of an Event.
	Operation = leaseapi.Operation
	// Outcome classifies an Event's result, one value per sentinel.
	Outcome = leaseapi.Outcome
	// Observer consumes events outside every lock; a busy observer misses
	// events rather than slowing a lease down.
	Observer = leaseapi.Observer
	// ObserverFunc adapts a function to an Observer.
	ObserverFunc = leaseapi.ObserverFunc
)

// Operations reported in events (the reference's values; Inspect and
// RenewBatch are additions).
const (
	OperationAcquire    = leaseapi.OperationAcquire
	OperationRenew      = leaseapi.OperationRenew
	OperationValidate   = leaseapi.OperationValidate
	OperationRelease    = leaseapi.OperationRelease
	OperationInspect    = leaseapi.OperationInspect
	OperationRenewBatch = leaseapi.OperationRenewBatch
)

// Outcomes reported in events (the reference's values; Timeout, Lost,
// Capacity and Regression are additions).
const (
	OutcomeSuccess     = leaseapi.OutcomeSuccess
	OutcomeContended   = leaseapi.OutcomeContended
	OutcomeStale       = leaseapi.OutcomeStale
	OutcomeCanceled    = leaseapi.OutcomeCanceled
	OutcomeUnavailable = leaseapi.OutcomeUnavailable
	OutcomeAmbiguous   = leaseapi.OutcomeAmbiguous
	OutcomeInvalid     = leaseapi.OutcomeInvalid
	OutcomeTimeout     = leaseapi.OutcomeTimeout
	OutcomeLost        = leaseapi.OutcomeLost
	OutcomeCapacity    = leaseapi.OutcomeCapacity
	OutcomeRegression  = leaseapi.OutcomeRegression
)

// NewObservedBackend wraps backend so that every call emits an Event to each
// observer (at most sixteen) after it returns. clock times the calls (nil is
// the real clock). A nil backend or observer is ErrInvalidState.
func NewObservedBackend(backend Backend, clock Clock, observers ...Observer) (Backend, error) {
	return runtime.NewObservedBackend(backend, clock, observers...)
}

// ObserveOptions configures NewObservedBackendWith (the clock, and a
// KeyHasher shared across a fleet). An addition to the reference API.
type ObserveOptions = runtime.ObserveOptions

// NewObservedBackendWith is NewObservedBackend with options.
func NewObservedBackendWith(backend Backend, options ObserveOptions, observers ...Observer) (Backend, error) {
	return runtime.NewObservedBackendWith(backend, options, observers...)
}

// The client. Each is an alias of the type in package runtime, which
// implements it.
type (
	// Client acquires leases on one backend and owns one supervisor
	// goroutine per held lease. It is safe for concurrent use.
	Client = runtime.Client
	// ClientOptions configures a Client; the zero value is valid. Its Clock
	// is a github.com/benbjohnson/clock Clock (the reference's has only
	// Now), which drives the timers of renewal and retries.
	ClientOptions = runtime.ClientOptions
	// Handle is a held lease, safe for concurrent use. Its read methods
	// never block; after the lease ends every method fails closed.
	Handle = runtime.Handle
	// Status is a consistent view of a handle (record, state, deadline,
	// managed flag, cause), read from one published view. An addition to
	// the reference API; Handle.Snapshot returns the Record alone.
	Status = runtime.Status
	// Managed is managed renewal of one handle, safe for concurrent use.
	Managed = runtime.Managed
	// Loss describes why managed renewal stopped admitting work.
	Loss = runtime.Loss
)

// Client bounds.
const (
	// MaxClientWaiters is the largest ClientOptions.MaxWaiters.
	MaxClientWaiters = runtime.MaxClientWaiters
	// MaxClientManaged is the largest ClientOptions.MaxManaged.
	MaxClientManaged = runtime.MaxClientManaged
	// MaxClientHeld is the largest ClientOptions.MaxHeld (an addition to
	// the reference API).
	MaxClientHeld = runtime.MaxClientHeld
	// DefaultMaxWaiters, DefaultMaxManaged and DefaultMaxHeld are the
	// bounds a zero ClientOptions field means.
	DefaultMaxWaiters = runtime.DefaultMaxWaiters
	DefaultMaxManaged = runtime.DefaultMaxManaged
	DefaultMaxHeld    = runtime.DefaultMaxHeld
)

// NewSleeper returns the default Sleeper on clk: a pause on its timers that
// a release notification ends early.
func NewSleeper(clk clock.Clock) Sleeper { return runtime.NewSleeper(clk) }

// NewClient returns a Client for backend with cryptographic owner ids and
// the real clock unless options say otherwise. It does no I/O and starts no
// goroutine. A nil (or typed-nil) backend or out-of-range bounds are
// ErrInvalidState.
func NewClient(backend Backend, options ClientOptions) (*Client, error) {
	return runtime.NewClient(backend, options)
}

// Telemetry of a client: exact metrics, state changes and tracing (see
// ClientOptions). Additions to the reference API.
type (
	// Metrics is a snapshot of one Client's exact metrics (Client.Metrics).
	Metrics = runtime.Metrics
	// MetricsReader is what exporters poll; a Client is one.
	MetricsReader = runtime.MetricsReader
	// StateChange is one handle transition, as ClientOptions.OnStateChange
	// receives it.
	StateChange = runtime.StateChange
	// LossCause is why a lease ended without being released.
	LossCause = runtime.LossCause
	// Tracer wraps every public operation (ClientOptions.Tracer).
	Tracer = runtime.Tracer
	// TraceStart describes an operation as it starts.
	TraceStart = runtime.TraceStart
	// TraceEnd describes an operation as it returns.
	TraceEnd = runtime.TraceEnd
	// TraceOp names a public operation in a Tracer's calls.
	TraceOp = runtime.TraceOp
	// KeyHasher hashes keys for state changes and traces; share one across
	// a fleet to follow a lease from process to process.
	KeyHasher = runtime.KeyHasher
)

// Loss causes.
const (
	LossExpired     = runtime.LossExpired
	LossStale       = runtime.LossStale
	LossRegression  = runtime.LossRegression
	LossUnavailable = runtime.LossUnavailable
	LossAmbiguous   = runtime.LossAmbiguous
	LossClosed      = runtime.LossClosed
)

// Traced operations.
const (
	TraceAcquire    = runtime.TraceAcquire
	TraceTryAcquire = runtime.TraceTryAcquire
	TraceRenew      = runtime.TraceRenew
	TraceValidate   = runtime.TraceValidate
	TraceRelease    = runtime.TraceRelease
	TraceRun        = runtime.TraceRun
)

// MinKeyHashSecret is the shortest secret NewKeyHasher accepts.
const MinKeyHashSecret = runtime.MinKeyHashSecret

// NewKeyHasher returns a KeyHasher keyed by secret (at least
// MinKeyHashSecret bytes; shorter is ErrInvalidState).
func NewKeyHasher(secret []byte) (*KeyHasher, error) { return runtime.NewKeyHasher(secret) }

// Tracers combines tracers into one that calls each in order.
func Tracers(ts ...Tracer) Tracer { return runtime.Tracers(ts...) }
