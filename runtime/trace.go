package runtime

import (
	"context"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// TraceOp names a public operation in a [Tracer]'s calls.
type TraceOp uint8

// Traced operations.
const (
	TraceAcquire TraceOp = iota + 1
	TraceTryAcquire
	TraceRenew
	TraceValidate
	TraceRelease
	TraceRun
)

// String returns the operation's lower-case name, fit for a span name
// suffix or a log attribute.
func (o TraceOp) String() string {
	switch o {
	case TraceAcquire:
		return "acquire"
	case TraceTryAcquire:
		return "try_acquire"
	case TraceRenew:
		return "renew"
	case TraceValidate:
		return "validate"
	case TraceRelease:
		return "release"
	case TraceRun:
		return "run"
	}
	return "unknown"
}

// TraceStart describes an operation as it starts.
type TraceStart struct {
	Op TraceOp
	// KeyHash is the key's hash under the client's [KeyHasher].
	KeyHash string
	// Token is the handle's token (zero for Acquire, TryAcquire and Run,
	// which have no grant yet).
	Token leaseapi.Token
}

// TraceEnd describes an operation as it returns.
type TraceEnd struct {
	Op      TraceOp
	KeyHash string
	// Token is the grant's token: the handle's, or the one acquired (zero
	// if the acquisition failed).
	Token leaseapi.Token
	// State is the handle's state as the operation returned (zero if no
	// handle was acquired).
	State leaseapi.State
	// Err is the operation's error (nil on success). It is redacted like
	// every error of this module and matches exactly one sentinel; use
	// leaseapi.OutcomeOf(Err) for a label.
	Err error
	// Duration is the operation's duration on the client's clock, waits
	// included.
	Duration time.Duration
}

// Tracer is a hook around each public operation, in the spirit of pgx's
// QueryTracer: TraceStart runs before the operation and returns the context
// the operation (and everything it calls) runs with, so a span started
// there is the parent of the operation's own work (Run's acquisition and
// release are children of Run's span); TraceEnd runs when it returns, with
// that context. Both run on the caller's goroutine and must not block: the
// operation waits for them. The two calls of one operation are always
// paired. A Tracer must be safe for concurrent use. Set it in
// [ClientOptions]; a nil Tracer costs nothing.
type Tracer interface {
	TraceStart(ctx context.Context, s TraceStart) context.Context
	TraceEnd(ctx context.Context, e TraceEnd)
}

// Tracers returns a Tracer that calls each non-nil tracer in order
// (TraceStart threading the context through them), or nil if none is
// non-nil.
func Tracers(ts ...Tracer) Tracer {
	var out multiTracer
	for _, t := range ts {
		if t != nil {
			out = append(out, t)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

type multiTracer []Tracer

func (m multiTracer) TraceStart(ctx context.Context, s TraceStart) context.Context {
	for _, t := range m {
		ctx = t.TraceStart(ctx, s)
	}
	return ctx
}

func (m multiTracer) TraceEnd(ctx context.Context, e TraceEnd) {
	for i := len(m) - 1; i >= 0; i-- {
		m[i].TraceEnd(ctx, e)
	}
}

// span is one traced operation in progress; the zero span (no tracer)
// does nothing.
type span struct {
	t     Tracer
	ctx   context.Context
	op    TraceOp
	hash  string
	start time.Time
}

// startSpan starts tracing op on key; with no tracer it returns ctx
// unchanged and a zero span.
func (c *Client) startSpan(ctx context.Context, op TraceOp, key leaseapi.Key, tok leaseapi.Token) (context.Context, span) {
	if c.tracer == nil || ctx == nil {
		return ctx, span{}
	}
	sp := span{t: c.tracer, op: op, hash: c.hasher.Hash(key), start: c.clk.Now()}
	sp.ctx = c.tracer.TraceStart(ctx, TraceStart{Op: op, KeyHash: sp.hash, Token: tok})
	if sp.ctx == nil {
		sp.ctx = ctx
	}
	return sp.ctx, sp
}

// end ends the span with the operation's result: h is the handle operated
// on or acquired (nil if none).
func (sp span) end(c *Client, h *Handle, err error) {
	if sp.t == nil {
		return
	}
	e := TraceEnd{Op: sp.op, KeyHash: sp.hash, Err: err, Duration: c.clk.Now().Sub(sp.start)}
	if h != nil {
		e.Token = h.Token()
		e.State = h.State()
	}
	sp.t.TraceEnd(sp.ctx, e)
}

// observedAcquire is Acquire/TryAcquire with its metrics and trace.
func (c *Client) observedAcquire(ctx context.Context, key leaseapi.Key, p leaseapi.Policy, wait bool) (*Handle, error) {
	var a acquisition
	if !c.usable() {
		return c.acquire(ctx, key, p, wait, &a) // fails closed, untraced
	}
	op := TraceTryAcquire
	if wait {
		op = TraceAcquire
	}
	ctx, sp := c.startSpan(ctx, op, key, 0)
	h, err := c.acquire(ctx, key, p, wait, &a)
	if c.m != nil {
		// From the first request's send to the grant's receipt: clock
		// readings the acquisition takes anyway. A failure reads the clock
		// once more; one that sent nothing has no duration.
		var d time.Duration
		switch {
		case h != nil:
			d = h.s.View().RecvAt.Sub(a.first)
		case !a.first.IsZero():
			d = c.clk.Since(a.first)
		}
		c.m.acquired(&a, d, err)
	}
	sp.end(c, h, err)
	return h, err
}

// span starts tracing op on the handle (a zero span without a tracer).
func (h *Handle) span(ctx context.Context, op TraceOp) (context.Context, span) {
	if h.c.tracer == nil {
		return ctx, span{}
	}
	v := h.s.View()
	return h.c.startSpan(ctx, op, v.Record.Key, v.Record.Token)
}
