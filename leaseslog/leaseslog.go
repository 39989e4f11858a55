// Package leaseslog logs what a lease client does through log/slog: every
// state change of a handle and every public operation that failed, at
// levels that page nobody for the ordinary (contention, a release) and
// flag what needs a look (a lease gone Uncertain, lost or expired).
//
//	l := leaseslog.New(slog.Default())
//	c, err := lease.NewClient(store, lease.ClientOptions{
//		OnStateChange: l.StateChange,
//		Tracer:        l, // or lease.Tracers(l, otherTracer)
//	})
//
// Log records carry only what the library's telemetry carries: the key's
// keyed hash, the fencing token, states, the operation, and the outcome or
// cause as a fixed label. Never a key, an owner id, a DSN or backend text:
// an error is logged as its outcome label, not its message.
//
// # Levels
//
// State changes: to Uncertain → Warn; to Lost → Error; to Expired → Warn
// (an unmanaged lease that was simply not renewed expires too); back to
// Active → Info; to Released → Debug.
//
// Failed operations: contended → Debug (waiting is normal); canceled or
// timed out → Info; unavailable, ambiguous, capacity, invalid → Warn; lost,
// stale owner, fencing regression → Error. Successful operations are not
// logged.
package leaseslog

import (
	"context"
	"errors"
	"log/slog"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Logger logs state changes (its StateChange method is a
// ClientOptions.OnStateChange hook) and failed operations (it is a
// runtime.Tracer). It is safe for concurrent use.
type Logger struct {
	l *slog.Logger
}

// New returns a Logger writing to l (nil: slog.Default()).
func New(l *slog.Logger) *Logger {
	if l == nil {
		l = slog.Default()
	}
	return &Logger{l: l}
}

// StateChange logs one transition; use it as ClientOptions.OnStateChange.
// It runs on the client's delivery goroutine, never a supervisor's.
func (g *Logger) StateChange(sc runtime.StateChange) {
	attrs := []slog.Attr{
		slog.String("from", sc.From.String()),
		slog.String("to", sc.To.String()),
		slog.String("key_hash", sc.KeyHash),
		slog.Uint64("token", uint64(sc.Token)),
	}
	if sc.Cause != nil {
		attrs = append(attrs, slog.String("cause", leaseapi.OutcomeOf(sc.Cause).String()))
	}
	g.l.LogAttrs(context.Background(), stateLevel(sc.To), "lease state changed", attrs...)
}

func stateLevel(to leaseapi.State) slog.Level {
	switch to {
	case leaseapi.StateLost:
		return slog.LevelError
	case leaseapi.StateUncertain, leaseapi.StateExpired:
		return slog.LevelWarn
	case leaseapi.StateActive:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// TraceStart implements runtime.Tracer; it logs nothing and returns ctx.
func (g *Logger) TraceStart(ctx context.Context, _ runtime.TraceStart) context.Context { return ctx }

// TraceEnd implements runtime.Tracer: it logs the operation if it failed,
// with ctx (so a handler can add the caller's trace id).
func (g *Logger) TraceEnd(ctx context.Context, e runtime.TraceEnd) {
	if e.Err == nil {
		return
	}
	lvl := errLevel(e.Err)
	if !g.l.Enabled(ctx, lvl) {
		return
	}
	attrs := []slog.Attr{
		slog.String("op", e.Op.String()),
		slog.String("outcome", leaseapi.OutcomeOf(e.Err).String()),
		slog.String("key_hash", e.KeyHash),
		slog.Duration("duration", e.Duration),
	}
	if e.Token != 0 {
		attrs = append(attrs, slog.Uint64("token", uint64(e.Token)))
	}
	if e.State != 0 {
		attrs = append(attrs, slog.String("state", e.State.String()))
	}
	g.l.LogAttrs(ctx, lvl, "lease operation failed", attrs...)
}

func errLevel(err error) slog.Level {
	switch {
	case errors.Is(err, leaseapi.ErrContended):
		return slog.LevelDebug
	case errors.Is(err, leaseapi.ErrCanceled), errors.Is(err, leaseapi.ErrTimeout):
		return slog.LevelInfo
	case errors.Is(err, leaseapi.ErrLost), errors.Is(err, leaseapi.ErrStaleOwner), errors.Is(err, leaseapi.ErrFencingRegression):
		return slog.LevelError
	}
	return slog.LevelWarn
}

var _ runtime.Tracer = (*Logger)(nil)
