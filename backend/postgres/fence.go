package postgres

import (
	"context"
	"errors"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/leaseapi"
)

// MaxResourceBytes bounds a protected-resource name given to
// [Store.AdvanceFence] and [Store.FencedWrite].
const MaxResourceBytes = leaseapi.MaxKeyBytes

// Fence checks, inside the caller's transaction tx, that rec is the key's
// current live grant, and locks the lease row FOR SHARE until tx ends. Any
// write the caller makes in tx therefore commits together with a still-valid
// check: renewal, release and, crucially, a successor's acquisition of the
// key wait for tx to commit or roll back, so no successor can act between
// the check and the commit. (FOR SHARE rather than FOR UPDATE: several
// fenced transactions of the same grant do not serialise on each other.)
// Keep fenced transactions short: while one is open, the holder's renewal
// waits too.
//
// tx must be a read-write transaction (FOR SHARE is refused in a read-only
// one) on the database that holds the Store's tables. Fence returns
// nil on success; leaseapi.ErrStaleOwner if rec is not the live grant (the
// caller must roll back); leaseapi.ErrInvalidState for a bad record, nil tx
// or nil ctx; leaseapi.ErrBackendUnavailable or the context's error if the
// check failed (tx is then aborted; roll it back). Under REPEATABLE READ or
// SERIALIZABLE a concurrent change of the lease row surfaces as a
// serialization failure (leaseapi.ErrBackendUnavailable): retry the whole
// transaction. Fence changes no lease state.
func (s *Store) Fence(ctx context.Context, tx pgx.Tx, rec leaseapi.Record) error {
	const op = "fence"
	if err := s.ready(op); err != nil {
		return err
	}
	if err := leaseapi.CheckContext(ctx, op); err != nil {
		return err
	}
	if tx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil transaction")
	}
	if err := rec.Check(); err != nil {
		return leaseapi.Wrap(err, op)
	}
	if !storable(rec.Token) {
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	var one int32
	err := tx.QueryRow(ctx, s.q.fence, rec.Key.String(), rec.Owner, int64(rec.Token)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	if err != nil {
		return leaseapi.Wrap(classify(err, false), op)
	}
	return nil
}

// AdvanceFence is the protected-resource helper: inside the caller's
// transaction tx, it accepts token for resource only if token is not lower
// than the highest token accepted for resource so far, and records it as the
// new high-water mark in the same transaction (the fence row stays locked
// until tx ends, so concurrent writers of one resource are serialised and
// the loser sees the winner's mark). The caller then makes its write in tx
// and commits; a rolled-back transaction advances nothing.
//
// Unlike [Store.Fence] it needs no lease row: the resource itself remembers
// the last token it accepted, which is what stops a paused former holder
// whose lease expired long ago. Tokens of different keys must not be mixed
// on one resource.
//
// It returns nil when accepted; leaseapi.ErrStaleOwner when a higher token
// was already accepted (roll back); leaseapi.ErrInvalidState for an empty,
// over-long (MaxResourceBytes) or non-text resource, a zero token, a nil tx
// or ctx; leaseapi.ErrBackendUnavailable or the context's error when the
// statement failed (tx is then aborted).
func (s *Store) AdvanceFence(ctx context.Context, tx pgx.Tx, resource string, token leaseapi.Token) error {
	const op = "advance fence"
	if err := s.ready(op); err != nil {
		return err
	}
	if err := leaseapi.CheckContext(ctx, op); err != nil {
		return err
	}
	if tx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil transaction")
	}
	if err := checkResource(resource); err != nil {
		return leaseapi.Wrap(err, op)
	}
	if token == 0 {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "zero token")
	}
	if !storable(token) {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "token beyond 2^63-1")
	}
	var got int64
	err := tx.QueryRow(ctx, s.q.advance, resource, int64(token)).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
	}
	if err != nil {
		return leaseapi.Wrap(classify(err, false), op)
	}
	return nil
}

// TxBeginner starts a transaction: *pgxpool.Pool, *pgx.Conn and pgx.Tx
// (a savepoint) satisfy it.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// FencedWrite runs write in a new transaction on db that is accepted only
// with token: it begins, calls [Store.AdvanceFence] for resource and token,
// then write, then commits. If rec is non-nil it also calls [Store.Fence]
// with *rec first (the write then also requires the lease to be live at
// commit). Any failure rolls back.
//
// It returns nil when committed; leaseapi.ErrStaleOwner when the fence
// refused token (or Fence refused rec) — nothing was written; write's own
// error unchanged, after a rollback (it is the caller's: FencedWrite adds
// nothing to it, like pgx.BeginFunc); leaseapi.ErrAmbiguousOutcome
// when the commit reply was lost; leaseapi.ErrBackendUnavailable or the
// context's error for other failures. ctx bounds everything.
func (s *Store) FencedWrite(ctx context.Context, db TxBeginner, resource string, token leaseapi.Token, rec *leaseapi.Record, write func(ctx context.Context, tx pgx.Tx) error) error {
	const op = "fenced write"
	if err := s.ready(op); err != nil {
		return err
	}
	if err := leaseapi.CheckContext(ctx, op); err != nil {
		return err
	}
	if isNil(db) || write == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil argument")
	}
	if err := checkResource(resource); err != nil {
		return leaseapi.Wrap(err, op)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return leaseapi.Wrap(classify(err, false), op)
	}
	defer rollback(ctx, tx)
	if rec != nil {
		if err := s.Fence(ctx, tx, *rec); err != nil {
			return leaseapi.Wrap(err, op)
		}
	}
	if err := s.AdvanceFence(ctx, tx, resource, token); err != nil {
		return leaseapi.Wrap(err, op)
	}
	if err := write(ctx, tx); err != nil {
		return err // the caller's own error, unchanged (after the rollback)
	}
	if err := tx.Commit(ctx); err != nil {
		return leaseapi.Wrap(classify(err, true), op)
	}
	return nil
}

// isNil reports a nil TxBeginner, including the typed nil pointers of the
// common implementations (which would otherwise panic in Begin).
func isNil(db TxBeginner) bool {
	switch v := db.(type) {
	case nil:
		return true
	case *pgxpool.Pool:
		return v == nil
	case *pgx.Conn:
		return v == nil
	}
	return false
}

func checkResource(r string) error {
	if r == "" || len(r) > MaxResourceBytes || !utf8.ValidString(r) {
		return leaseapi.NewError("resource", leaseapi.ErrInvalidState, "invalid resource name")
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; c < 0x20 || c == 0x7f {
			return leaseapi.NewError("resource", leaseapi.ErrInvalidState, "invalid resource name")
		}
	}
	return nil
}

// rollback ends tx (a no-op after Commit), bounded even if ctx has ended.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeWait)
	defer cancel()
	_ = tx.Rollback(rctx)
}
