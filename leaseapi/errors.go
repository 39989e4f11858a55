package leaseapi

import (
	"context"
	"errors"
	"strings"
)

// ErrContended means the key is held by another owner.
var ErrContended = errors.New("lease: held by another owner")

// ErrTimeout means a wait or a deadline ran out: Acquire's Wait, the
// caller's context deadline (the error then also matches
// context.DeadlineExceeded), or a Close that could not finish in time.
var ErrTimeout = errors.New("lease: timed out")

// ErrCanceled means the caller's context was canceled; the error also
// matches context.Canceled.
var ErrCanceled = errors.New("lease: canceled")

// ErrLost means the handle no longer holds its lease: it expired, was
// proven lost, or its client was closed. Returned by operations on a handle
// in a terminal state other than Released.
var ErrLost = errors.New("lease: lease lost")

// ErrStaleOwner means the backend proved that the record is no longer the
// key's current grant (another owner or a newer token holds it, or it
// expired or was released). The handle becomes StateLost.
var ErrStaleOwner = errors.New("lease: stale owner or token")

// ErrBackendUnavailable means the backend could not be reached, or a read
// failed; nothing was changed by this call.
var ErrBackendUnavailable = errors.New("lease: backend unavailable")

// ErrInvalidState means invalid input (a bad key, policy, TTL or record, a
// nil argument) or an operation the handle's state does not allow.
var ErrInvalidState = errors.New("lease: invalid state or input")

// ErrAmbiguousOutcome means a mutation was sent but its outcome is unknown:
// it may or may not have been applied. The handle becomes StateUncertain.
var ErrAmbiguousOutcome = errors.New("lease: ambiguous outcome")

// ErrCapacity means a bound of the client (MaxWaiters, MaxManaged) is
// reached. The call failed fast and changed nothing.
var ErrCapacity = errors.New("lease: capacity exceeded")

// ErrFencingRegression means the backend issued a token that is not higher
// than one this client already saw for the key (or changed a lease's
// token on renewal): the backend lost acknowledged writes (a restart
// without durable persistence, a failover to a lagging replica). The grant
// is never handed out as Active; see the backends' durability notes.
var ErrFencingRegression = errors.New("lease: fencing token regression")

// sentinels lists every kind in the order Wrap tests them.
var sentinels = [...]error{
	ErrContended, ErrTimeout, ErrCanceled, ErrLost, ErrStaleOwner,
	ErrBackendUnavailable, ErrInvalidState, ErrAmbiguousOutcome, ErrCapacity,
	ErrFencingRegression,
}

// opError is every error this module returns: an operation name, one
// sentinel kind, an optional fixed detail and, for ErrCanceled and
// ErrTimeout, the context error. It holds no user or backend text.
type opError struct {
	op     string
	kind   error
	detail string
	ctxErr error
	// cause is the driver's error behind a backend failure, reachable
	// with errors.As for callers who ask; never part of Error(). See
	// [WithCause].
	cause error
}

func (e *opError) Error() string {
	var b strings.Builder
	b.WriteString("lease: ")
	if e.op != "" {
		b.WriteString(e.op)
		b.WriteString(": ")
	}
	b.WriteString(strings.TrimPrefix(e.kind.Error(), "lease: "))
	if e.detail != "" {
		b.WriteString(": ")
		b.WriteString(e.detail)
	}
	return b.String()
}

func (e *opError) Unwrap() []error {
	errs := []error{e.kind}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

// WithCause returns err carrying cause, the driver's error behind it, so
// that a caller who asks can reach it with errors.As (for example a
// *pgconn.PgError and its SQLSTATE), while err's Error() stays exactly as
// redacted as before: the cause's text never appears in the message. The
// cause survives [Wrap]. err must be an error of this package (else err is
// returned as it is); a cause that itself matches one of this package's
// sentinels or a context error is not attached, so that the result still
// matches exactly one kind.
func WithCause(err, cause error) error {
	var oe *opError
	if cause == nil || !errors.As(err, &oe) || ctxCause(cause) != nil {
		return err
	}
	for _, s := range sentinels {
		if errors.Is(cause, s) {
			return err
		}
	}
	c := *oe
	c.cause = cause
	return &c
}

// NewError returns an error of the given kind for operation op. op and
// detail must be fixed text from the program (an operation name, a reason),
// never user input or backend text. A kind that is not one of this
// package's sentinels is classified by [Wrap].
func NewError(op string, kind error, detail string) error {
	for _, s := range sentinels {
		if kind == s {
			e := &opError{op: op, kind: kind, detail: detail}
			return e
		}
	}
	return Wrap(kind, op)
}

// Wrap returns err redacted and attributed to operation op (fixed text):
//
//   - nil stays nil;
//   - an error that matches one of this package's sentinels keeps that kind
//     (and its context error, if any) under the new operation name;
//   - context.Canceled becomes [ErrCanceled], context.DeadlineExceeded
//     [ErrTimeout], each still matching the context error;
//   - anything else becomes [ErrBackendUnavailable].
//
// The result's message contains only op and the kind; err's text is dropped.
func Wrap(err error, op string) error {
	if err == nil {
		return nil
	}
	var oe *opError
	if errors.As(err, &oe) {
		return &opError{op: op, kind: oe.kind, detail: oe.detail, ctxErr: oe.ctxErr, cause: oe.cause}
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			e := &opError{op: op, kind: s}
			if s == ErrCanceled || s == ErrTimeout {
				e.ctxErr = ctxCause(err)
			}
			return e
		}
	}
	if ctxErr := ctxCause(err); ctxErr != nil {
		return ContextError(op, ctxErr)
	}
	return &opError{op: op, kind: ErrBackendUnavailable}
}

// ContextError maps a context error to [ErrCanceled] or [ErrTimeout]; the
// result still matches ctxErr. Any other error is passed to [Wrap].
func ContextError(op string, ctxErr error) error {
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return &opError{op: op, kind: ErrTimeout, ctxErr: context.DeadlineExceeded}
	case errors.Is(ctxErr, context.Canceled):
		return &opError{op: op, kind: ErrCanceled, ctxErr: context.Canceled}
	}
	return Wrap(ctxErr, op)
}

// LateError is the error of a mutation that a backend executed past its
// not-after bound and that therefore wrote nothing (see [Backend]): it is
// definite, so [ErrBackendUnavailable] with the detail "not applied: ran
// past its deadline", never [ErrAmbiguousOutcome]. op is the operation name
// (fixed text). Every backend that reports a late statement uses it, so the
// answer reads the same whatever the backend.
func LateError(op string) error {
	return &opError{op: op, kind: ErrBackendUnavailable, detail: "not applied: ran past its deadline"}
}

// ContextCause returns context.DeadlineExceeded or context.Canceled if err
// matches one of them (through any wrapping), and nil otherwise: the test
// backends use to tell a context ending from any other failure.
func ContextCause(err error) error { return ctxCause(err) }

// ctxCause returns the context error err matches, or nil.
func ctxCause(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return context.Canceled
	}
	return nil
}

// Kind returns the sentinel err matches, or nil for nil. An error from
// outside this module is classified as [Wrap] would.
func Kind(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return Kind(Wrap(err, ""))
}

// invalid builds an ErrInvalidState with a fixed reason.
func invalid(op, detail string) error {
	return &opError{op: op, kind: ErrInvalidState, detail: detail}
}
