package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasekit/lease/leaseapi"
)

// classify maps a pgx error to exactly one leaseapi sentinel, with a fixed
// detail and no driver text. mutation says whether the failed call was an
// autocommit statement that changes state (acquire, renew, release, batch
// renew, commit); reads and statements inside a caller's still-open
// transaction pass false, because nothing of theirs can have committed.
//
// The rules, in order:
//
//   - A *pgconn.PgError of severity ERROR reports that the statement failed,
//     and with it its implicit transaction, so nothing was applied:
//     40001 (serialization_failure) and 40P01 (deadlock_detected) are
//     ErrBackendUnavailable ("not applied", safe to retry); the
//     configuration failures above; the rest of class 42 "schema
//     mismatch" (a bug or a schema changed by hand);
//     class 23 (constraint) and 22 (data, e.g. the 2^63 token bound) are
//     ErrInvalidState; anything else is ErrBackendUnavailable. The exception
//     is 57014 (query_canceled: statement_timeout or a cancel request):
//     for a mutation it is ErrAmbiguousOutcome, so that it classifies the
//     same way as the context-cancel race it is indistinguishable from.
//   - A FATAL or PANIC PgError, or class 08 / 57P (the session was
//     terminated, e.g. pg_terminate_backend or shutdown), may arrive after
//     the statement completed: ErrAmbiguousOutcome for a mutation,
//     ErrBackendUnavailable for a read.
//   - pgconn.SafeToRetry: nothing was sent. The context's error if it ended
//     (ErrCanceled / ErrTimeout), else ErrBackendUnavailable.
//   - A context error or pgconn.Timeout after sending: ErrAmbiguousOutcome
//     for a mutation; for a read the context error (ErrTimeout /
//     ErrCanceled), or ErrBackendUnavailable for a network timeout.
//   - Anything else (connection reset, EOF mid-reply): ErrAmbiguousOutcome
//     for a mutation, ErrBackendUnavailable for a read.
//
// Configuration failures come first, whatever the severity, because they
// cannot follow a statement that ran (they are raised at connection start
// or before a statement executes) and retrying does not help: the detail
// starts with "configuration:" so that an operator tells them from an
// outage, and names the fix where there is one. 28P01 and 28000
// (authentication failed, no pg_hba entry), 3D000 (no such database),
// 42501 (permission denied), 42P01 and class 3F (undefined table, schema:
// "run postgres.Migrate"), 42703 (undefined column: an older schema, "run
// postgres.Migrate"). All are ErrBackendUnavailable: nothing was applied.
//
// The result carries an empty operation name; callers pass it through
// leaseapi.Wrap with theirs. It carries err as its cause
// ([leaseapi.WithCause]): errors.As reaches the *pgconn.PgError (or the
// driver's other error types) while the message stays redacted. Context
// errors are not attached: the result matches them through its kind.
func classify(err error, mutation bool) error {
	if err == nil {
		return nil
	}
	return leaseapi.WithCause(classifyKind(err, mutation), err)
}

// classifyKind is classify without the cause.
func classifyKind(err error, mutation bool) error {
	var pgErr *pgconn.PgError
	ctxErr := leaseapi.ContextCause(err)
	if errors.As(err, &pgErr) {
		if pgErr.Code == "57014" && ctxErr != nil && !mutation {
			return leaseapi.ContextError("", ctxErr) // our own cancel request
		}
		return classifyPg(pgErr, mutation)
	}
	if pgconn.SafeToRetry(err) {
		if ctxErr != nil {
			return leaseapi.ContextError("", ctxErr)
		}
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "not sent")
	}
	if ctxErr != nil || pgconn.Timeout(err) {
		if mutation {
			return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "deadline or cancel after send")
		}
		if ctxErr != nil {
			return leaseapi.ContextError("", ctxErr)
		}
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "network timeout")
	}
	if mutation {
		return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "connection lost after send")
	}
	return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "connection failed")
}

func classifyPg(e *pgconn.PgError, mutation bool) error {
	sev := e.SeverityUnlocalized
	if sev == "" {
		sev = e.Severity
	}
	code := e.Code
	class := ""
	if len(code) >= 2 {
		class = code[:2]
	}
	if detail := configuration(code); detail != "" {
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, detail)
	}
	terminated := sev == "FATAL" || sev == "PANIC" || class == "08" || (len(code) >= 3 && code[:3] == "57P")
	switch {
	case terminated:
		if mutation {
			return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "session terminated")
		}
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "session terminated")
	case code == "57014":
		if mutation {
			return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "statement canceled")
		}
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "statement canceled")
	case code == "40001":
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "serialization failure, not applied")
	case code == "40P01":
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "deadlock, not applied")
	case class == "42":
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "schema mismatch")
	case class == "23":
		return leaseapi.NewError("", leaseapi.ErrInvalidState, "constraint violation")
	case class == "22":
		return leaseapi.NewError("", leaseapi.ErrInvalidState, "value out of range")
	}
	return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "statement failed, not applied")
}

// The fixed details of the configuration failures.
const (
	detailAuth       = "configuration: authentication failed"
	detailNoDatabase = "configuration: database does not exist"
	detailDenied     = "configuration: permission denied"
	detailNoSchema   = "configuration: schema missing: run postgres.Migrate"
	detailOldSchema  = "configuration: schema out of date: run postgres.Migrate"
	detailDropped    = "configuration: table dropped after migration: see postgres.Migrate"
)

// configuration returns the detail of a SQLSTATE that reports a
// configuration failure rather than an outage, or "".
func configuration(code string) string {
	switch {
	case code == "28P01" || code == "28000":
		return detailAuth
	case code == "3D000":
		return detailNoDatabase
	case code == "42501":
		return detailDenied
	case code == "42P01" || len(code) == 5 && code[:2] == "3F":
		return detailNoSchema
	case code == "42703":
		return detailOldSchema
	}
	return ""
}
