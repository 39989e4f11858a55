package leaseapi

import "time"

// Bounds enforced by [NewPolicy] and by the runtime.
const (
	// MaxTTL is the longest lease TTL.
	MaxTTL = 24 * time.Hour
	// MaxWait is the longest an Acquire may wait for a contended key.
	MaxWait = time.Hour
	// MaxAttempts is the most acquisition attempts one Acquire may make.
	MaxAttempts uint32 = 10_000
	// MaxOperationTimeout is the longest a single backend call may take.
	MaxOperationTimeout = time.Minute
	// MaxObservers is the most observers one observed backend accepts.
	MaxObservers = 16
)

// FailureBehavior says what a handle does when an operation has no reliable
// outcome. The only behaviour is [FailureFailClosed]; the type exists so
// that a later behaviour is an explicit opt-in. The zero value means
// FailureFailClosed too: [NewPolicy] turns it into FailureFailClosed.
type FailureBehavior uint8

const (
	// FailureFailClosed denies admission (StateUncertain) until a later
	// Renew or Validate succeeds before the deadline. It is 1, as in the
	// reference API; the zero value of the type means the same.
	FailureFailClosed FailureBehavior = 1
)

// String names the behaviour; the zero value is "fail-closed" too.
func (f FailureBehavior) String() string {
	if f == 0 || f == FailureFailClosed {
		return "fail-closed"
	}
	return "invalid"
}

// minTrust is the shortest trust window (TTL - SafetyMargin) a policy may
// leave: below it the renewal interval and the operation timeout, which
// must both be shorter than the window, have no room.
const minTrust = time.Microsecond

// PolicyOptions is the input of [NewPolicy]. Zero fields take the defaults
// documented on each field; TTL has none and must be set. The trust window
// is TTL - SafetyMargin: the longest a holder may act on one grant or
// renewal. The fields are in the reference API's order.
type PolicyOptions struct {
	// TTL is the lease duration requested from the backend. Required:
	// 1ms <= TTL <= MaxTTL.
	TTL time.Duration
	// Wait bounds how long Acquire waits for a contended key. Zero means one
	// attempt. At most MaxWait; requires Retry > 0.
	Wait time.Duration
	// Retry is the pause between acquisition attempts, and between failed
	// managed renewals. Zero means no retry (Wait must then be zero); failed
	// managed renewals are then retried after RenewEvery/4. At most MaxWait
	// and < TTL-SafetyMargin: a longer pause could never retry a failed
	// renewal before the deadline, so one failure would end the lease. A
	// failed renewal is retried before the deadline only when RenewEvery +
	// Retry < TTL-SafetyMargin; a Retry between that and the window is
	// accepted (acquisitions may want to poll slowly) but then one failed
	// renewal ends the lease.
	Retry time.Duration
	// Jitter adds a uniformly random [0, Jitter) to each acquisition retry
	// pause (the pause never exceeds what is left of Wait). At most MaxWait.
	Jitter time.Duration
	// RenewEvery is the managed renewal interval, measured from the send time
	// of the last successful renewal. Zero means (TTL-SafetyMargin)/3. Must be
	// < TTL-SafetyMargin.
	RenewEvery time.Duration
	// SafetyMargin is subtracted from the TTL to form the local deadline; it
	// absorbs clock rate differences. Zero means TTL/10. Must be < TTL and
	// leave a trust window TTL - SafetyMargin of at least 1µs.
	SafetyMargin time.Duration
	// MaxAttempts bounds the acquisition attempts of one Acquire. Zero means
	// the package bound MaxAttempts, which is also the largest value.
	MaxAttempts uint32
	// OperationTimeout bounds each backend call. Zero means
	// min(10s, (TTL-SafetyMargin)/2). Must be < TTL-SafetyMargin and at most
	// MaxOperationTimeout.
	OperationTimeout time.Duration
	// FailureBehavior is FailureFailClosed; zero means FailureFailClosed.
	FailureBehavior FailureBehavior
}

// Policy is a validated, immutable set of lease parameters. Build one with
// [NewPolicy]; the zero Policy is invalid and is rejected by Acquire. A
// Policy is a value, safe for concurrent use.
type Policy struct {
	o     PolicyOptions
	valid bool
}

// NewPolicy fills in the defaults of o's zero fields and validates the
// result against every rule documented on [PolicyOptions]. Invalid options
// return an error matching [ErrInvalidState] naming the field, never its
// value; NewPolicy never panics.
//
// The rules are checked on the effective options (defaults filled in), so
// every accepted Policy obeys them, and NewPolicy(p.Options()) returns p
// again.
func NewPolicy(o PolicyOptions) (Policy, error) {
	const op = "new policy"
	if o.TTL < time.Millisecond || o.TTL > MaxTTL {
		return Policy{}, invalid(op, "ttl out of range")
	}
	if o.SafetyMargin < 0 || o.SafetyMargin >= o.TTL {
		return Policy{}, invalid(op, "safety margin out of range")
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = o.TTL / 10
	}
	trust := o.TTL - o.SafetyMargin
	if trust < minTrust {
		return Policy{}, invalid(op, "safety margin leaves less than 1µs of the ttl")
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = max(trust/3, 1)
	}
	if o.RenewEvery < 0 || o.RenewEvery >= trust {
		return Policy{}, invalid(op, "renew interval out of range")
	}
	if o.Retry < 0 || o.Jitter < 0 || o.Wait < 0 {
		return Policy{}, invalid(op, "negative retry, jitter or wait")
	}
	if o.Wait > MaxWait {
		return Policy{}, invalid(op, "wait out of range")
	}
	if o.Retry > MaxWait || o.Retry >= trust {
		return Policy{}, invalid(op, "retry out of range")
	}
	if o.Jitter > MaxWait {
		return Policy{}, invalid(op, "jitter out of range")
	}
	if o.Wait > 0 && o.Retry == 0 {
		return Policy{}, invalid(op, "wait without retry")
	}
	if o.MaxAttempts > MaxAttempts {
		return Policy{}, invalid(op, "max attempts out of range")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = MaxAttempts
	}
	if o.OperationTimeout == 0 {
		o.OperationTimeout = min(10*time.Second, max(trust/2, 1))
	}
	if o.OperationTimeout < 0 || o.OperationTimeout > MaxOperationTimeout || o.OperationTimeout >= trust {
		return Policy{}, invalid(op, "operation timeout out of range")
	}
	if o.FailureBehavior == 0 {
		o.FailureBehavior = FailureFailClosed
	}
	if o.FailureBehavior != FailureFailClosed {
		return Policy{}, invalid(op, "unknown failure behavior")
	}
	return Policy{o: o, valid: true}, nil
}

// Check returns nil for a Policy built by [NewPolicy] and [ErrInvalidState]
// for the zero Policy.
func (p Policy) Check() error {
	if !p.valid {
		return invalid("policy", "zero policy")
	}
	return nil
}

// Options returns the effective options, defaults filled in.
func (p Policy) Options() PolicyOptions { return p.o }

// TTL returns the requested lease duration.
func (p Policy) TTL() time.Duration { return p.o.TTL }

// Wait returns how long Acquire waits for a contended key.
func (p Policy) Wait() time.Duration { return p.o.Wait }

// Retry returns the pause between attempts.
func (p Policy) Retry() time.Duration { return p.o.Retry }

// Jitter returns the bound of the random addition to each pause.
func (p Policy) Jitter() time.Duration { return p.o.Jitter }

// RenewEvery returns the managed renewal interval.
func (p Policy) RenewEvery() time.Duration { return p.o.RenewEvery }

// SafetyMargin returns the margin subtracted from the TTL for the deadline.
func (p Policy) SafetyMargin() time.Duration { return p.o.SafetyMargin }

// MaxAttempts returns the attempt bound of one Acquire.
func (p Policy) MaxAttempts() uint32 { return p.o.MaxAttempts }

// OperationTimeout returns the bound of one backend call.
func (p Policy) OperationTimeout() time.Duration { return p.o.OperationTimeout }

// FailureBehavior returns the failure behaviour.
func (p Policy) FailureBehavior() FailureBehavior { return p.o.FailureBehavior }

// RenewRetry returns the pause before retrying a failed managed renewal:
// Retry when set, otherwise RenewEvery/4.
func (p Policy) RenewRetry() time.Duration {
	if p.o.Retry > 0 {
		return p.o.Retry
	}
	return max(p.o.RenewEvery/4, 1)
}
