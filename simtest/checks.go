package simtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// LedgerOp is one backend operation as a [Ledger] saw it: once on the
// caller's side (what the caller sent and what it was told) and, if the
// call reached the backend, once on the backend's side (what really
// happened). In a simulation both sides are known, so every ambiguous
// outcome can be matched to committed or not committed (checker C4).
type LedgerOp struct {
	ID     int                `json:"id"`
	Client string             `json:"client"`
	Op     leaseapi.Operation `json:"op"`
	Key    string             `json:"key"`
	Owner  string             `json:"owner"`
	// Token is the token of the record the call carried (Renew, Validate,
	// Release), or the token the backend granted (TryAcquire).
	Token leaseapi.Token `json:"token"`
	// SentAt and ReturnedAt are the caller's local times around the call.
	SentAt     time.Time `json:"sent_at"`
	ReturnedAt time.Time `json:"returned_at"`
	// Seen is the sentinel the caller got ("" for success).
	Seen string `json:"seen"`
	// Returned is the record the caller got (TryAcquire, Renew, Inspect).
	Returned leaseapi.Record `json:"returned"`
	// Applied reports whether the call reached the backend; AppliedAt is
	// the caller-clock instant it did, Result the sentinel the backend
	// answered ("" for success) and Record the record it returned.
	Applied   bool            `json:"applied"`
	AppliedAt time.Time       `json:"applied_at"`
	Result    string          `json:"result"`
	Record    leaseapi.Record `json:"record"`

	seen, result error
	done         bool // the caller's side has returned
}

// Mutation reports whether the operation changes the backend's state.
func (o LedgerOp) Mutation() bool {
	return o.Op == leaseapi.OperationAcquire || o.Op == leaseapi.OperationRenew || o.Op == leaseapi.OperationRelease
}

// Committed reports whether the backend applied the operation and it
// changed state: a grant, a renewal or a release that succeeded.
func (o LedgerOp) Committed() bool { return o.Mutation() && o.Applied && o.result == nil }

// Ambiguous reports whether the caller was told ErrAmbiguousOutcome.
func (o LedgerOp) Ambiguous() bool { return o.seen == leaseapi.ErrAmbiguousOutcome }

// SeenKind returns the sentinel the caller got (nil for success).
func (o LedgerOp) SeenKind() error { return o.seen }

// Ledger records every operation of a scenario on both sides of the fault
// layer. Build the chain as
//
//	client → l.Client(name, faults) → faults (Faulty, Deferred) → l.Server(store) → store
//
// The caller side stamps each call's context with an id; fault wrappers
// pass the context's values on (they apply with context.WithoutCancel), so
// the server side can attribute what it applies. A call that reaches the
// server without an id (a test calling the store directly) is recorded as
// a server-only operation of client "direct". Times are read from the time
// package (simulated inside [Simulate]). A Ledger is safe for concurrent
// use.
type Ledger struct {
	mu  sync.Mutex
	ops []*LedgerOp
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{} }

type ledgerID struct{}

func (l *Ledger) begin(client string, op leaseapi.Operation, key leaseapi.Key, owner string, token leaseapi.Token) (*LedgerOp, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := &LedgerOp{ID: len(l.ops), Client: client, Op: op, Key: key.String(), Owner: owner, Token: token, SentAt: time.Now()}
	l.ops = append(l.ops, o)
	return o, o.ID
}

func (l *Ledger) end(id int, rec leaseapi.Record, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.ops[id]
	o.ReturnedAt, o.done = time.Now(), true
	o.seen = leaseapi.Kind(err)
	o.Seen = kindName(o.seen)
	if err == nil {
		o.Returned = rec
		if o.Op == leaseapi.OperationAcquire {
			o.Token = rec.Token
		}
	}
}

func (l *Ledger) applied(ctx context.Context, op leaseapi.Operation, key leaseapi.Key, owner string, token leaseapi.Token, rec leaseapi.Record, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, ok := ctx.Value(ledgerID{}).(int)
	var o *LedgerOp
	if ok && id < len(l.ops) {
		o = l.ops[id]
	} else {
		o = &LedgerOp{ID: len(l.ops), Client: "direct", Op: op, Key: key.String(), Owner: owner, Token: token, SentAt: time.Now(), done: true}
		l.ops = append(l.ops, o)
	}
	o.Applied, o.AppliedAt = true, time.Now()
	o.result = leaseapi.Kind(err)
	o.Result = kindName(o.result)
	if err == nil {
		o.Record = rec
		if op == leaseapi.OperationAcquire {
			o.Token = rec.Token
		}
	}
}

func kindName(k error) string {
	if k == nil {
		return ""
	}
	return k.Error()
}

// Ops returns a copy of every recorded operation, in the order calls began.
func (l *Ledger) Ops() []LedgerOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]LedgerOp, len(l.ops))
	for i, o := range l.ops {
		out[i] = *o
	}
	return out
}

// WriteJSON writes the operations as a JSON array, for failure artifacts.
func (l *Ledger) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(l.Ops())
}

// AcquireSentAt returns the local instant the TryAcquire that made owner's
// grant was sent (whether its reply arrived or was lost), and whether such
// a committed acquisition exists.
func (l *Ledger) AcquireSentAt(owner string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.ops {
		if o.Op == leaseapi.OperationAcquire && o.Owner == owner && o.Committed() {
			return o.SentAt, true
		}
	}
	return time.Time{}, false
}

// TrustBound returns the latest local instant until which the holder of
// (owner, token) may be admitted under p: the send time of its granting
// TryAcquire, or of the latest Renew whose success reached the caller,
// plus the smaller of p's TTL and the granted TTL, minus p's margin. A
// handle reporting Active at or after it breaks DESIGN §1. ok is false
// when no committed grant of owner exists (nothing may be admitted).
func (l *Ledger) TrustBound(owner string, token leaseapi.Token, p leaseapi.Policy) (bound time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.ops {
		if o.Owner != owner || o.Token != token || !o.Committed() {
			continue
		}
		switch {
		case o.Op == leaseapi.OperationAcquire:
		case o.Op == leaseapi.OperationRenew && o.done && o.seen == nil:
		default:
			continue
		}
		if d := o.Record.LocalDeadline(o.SentAt, p); d.After(bound) {
			bound, ok = d, true
		}
	}
	return bound, ok
}

// CheckAmbiguity is checker C4: every operation is matched to what the
// backend really did. It returns the number of ambiguous mutations that
// committed and that did not, and a violation for:
//
//   - "unresolved": an ambiguous mutation whose fate is still open (a
//     deferred execution that has not run yet: call Drain first);
//   - "ambiguous-read": a read reported as ErrAmbiguousOutcome;
//   - "fabricated": a success the backend never produced, or a returned
//     record that differs from the backend's;
//   - "unavailable-applied": a mutation reported as ErrBackendUnavailable
//     (nothing changed) that the backend applied and committed.
func (l *Ledger) CheckAmbiguity() (committed, notCommitted int, vs []Violation) {
	for _, o := range l.Ops() {
		if !o.done {
			vs = append(vs, Violation{"unresolved", fmt.Sprintf("op %d (%v) has not returned", o.ID, o.Op), []int{o.ID}})
			continue
		}
		switch {
		case o.Client == "direct":
		case o.Ambiguous() && !o.Mutation():
			vs = append(vs, Violation{"ambiguous-read", fmt.Sprintf("op %d: %v reported ambiguous", o.ID, o.Op), []int{o.ID}})
		case o.Ambiguous() && o.Committed():
			committed++
		case o.Ambiguous():
			notCommitted++
		case o.seen == nil && (!o.Applied || o.result != nil):
			vs = append(vs, Violation{"fabricated", fmt.Sprintf("op %d: %v succeeded but the backend answered %q (applied %v)", o.ID, o.Op, o.Result, o.Applied), []int{o.ID}})
		case o.seen == nil && o.Op != leaseapi.OperationInspect && o.Returned != o.Record:
			vs = append(vs, Violation{"fabricated", fmt.Sprintf("op %d: %v returned another record than the backend's", o.ID, o.Op), []int{o.ID}})
		case o.seen == leaseapi.ErrBackendUnavailable && o.Committed():
			vs = append(vs, Violation{"unavailable-applied", fmt.Sprintf("op %d: %v reported unavailable but committed", o.ID, o.Op), []int{o.ID}})
		}
	}
	return committed, notCommitted, vs
}

// CheckGrants checks that every grant in h (a handle returned to a holder)
// is a grant the backend committed to that owner with that token: no
// handle is ever returned blind (checker C2, second half).
func (l *Ledger) CheckGrants(h *History) []Violation {
	type grant struct {
		key, owner string
		token      leaseapi.Token
	}
	committed := map[grant]bool{}
	for _, o := range l.Ops() {
		if o.Op == leaseapi.OperationAcquire && o.Committed() {
			committed[grant{o.Key, o.Owner, o.Record.Token}] = true
		}
	}
	var vs []Violation
	for _, e := range h.Events() {
		if e.Kind == Granted && !committed[grant{e.Key, e.Owner, e.Token}] {
			vs = append(vs, Violation{"blind-grant", fmt.Sprintf("token %d handed out without a committed grant", e.Token), []int{e.Seq}})
		}
	}
	return vs
}

// CheckFaultRun is checker C6: a fault run proves something only if it
// produced at least one ambiguous mutation that committed and one that did
// not, and if a fresh acquisition succeeded after the final heal
// (freshAcquire is its error). It also returns C4's violations.
func (l *Ledger) CheckFaultRun(freshAcquire error) []Violation {
	committed, notCommitted, vs := l.CheckAmbiguity()
	if committed == 0 {
		vs = append(vs, Violation{"thin-run", "no ambiguous mutation committed", nil})
	}
	if notCommitted == 0 {
		vs = append(vs, Violation{"thin-run", "no ambiguous mutation failed to commit", nil})
	}
	if freshAcquire != nil {
		vs = append(vs, Violation{"no-recovery", fmt.Sprintf("fresh acquire after the heal: %v", leaseapi.Kind(freshAcquire)), nil})
	}
	return vs
}

// Client returns the caller-side wrapper of b for one client named name.
// It implements leaseapi.Backend, Inspector (forwarded; ErrInvalidState
// when b cannot inspect, as [Faulty] does) and ReleaseWatcher (forwarded).
func (l *Ledger) Client(name string, b leaseapi.Backend) leaseapi.Backend {
	return &ledgerClient{l: l, name: name, b: b}
}

// Server returns the backend-side wrapper of b: it records what b applied
// and answered. It implements leaseapi.Backend, Inspector and
// ReleaseWatcher as Client does.
func (l *Ledger) Server(b leaseapi.Backend) leaseapi.Backend {
	return &ledgerServer{l: l, b: b}
}

type ledgerClient struct {
	l    *Ledger
	name string
	b    leaseapi.Backend
}

func (c *ledgerClient) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	_, id := c.l.begin(c.name, leaseapi.OperationAcquire, k, owner, 0)
	rec, err := c.b.TryAcquire(context.WithValue(ctx, ledgerID{}, id), k, owner, ttl)
	c.l.end(id, rec, err)
	return rec, err
}

func (c *ledgerClient) Renew(ctx context.Context, in leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	_, id := c.l.begin(c.name, leaseapi.OperationRenew, in.Key, in.Owner, in.Token)
	rec, err := c.b.Renew(context.WithValue(ctx, ledgerID{}, id), in, ttl)
	c.l.end(id, rec, err)
	return rec, err
}

func (c *ledgerClient) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	_, id := c.l.begin(c.name, leaseapi.OperationValidate, rec.Key, rec.Owner, rec.Token)
	got, err := c.b.Validate(context.WithValue(ctx, ledgerID{}, id), rec)
	c.l.end(id, leaseapi.Record{}, err)
	return got, err
}

func (c *ledgerClient) Release(ctx context.Context, rec leaseapi.Record) error {
	_, id := c.l.begin(c.name, leaseapi.OperationRelease, rec.Key, rec.Owner, rec.Token)
	err := c.b.Release(context.WithValue(ctx, ledgerID{}, id), rec)
	c.l.end(id, leaseapi.Record{}, err)
	return err
}

func (c *ledgerClient) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	in, ok := c.b.(leaseapi.Inspector)
	if !ok {
		return leaseapi.Record{}, false, leaseapi.NewError("inspect", leaseapi.ErrInvalidState, "not supported")
	}
	_, id := c.l.begin(c.name, leaseapi.OperationInspect, k, "", 0)
	rec, held, err := in.Inspect(context.WithValue(ctx, ledgerID{}, id), k)
	c.l.end(id, rec, err)
	return rec, held, err
}

func (c *ledgerClient) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if w, ok := c.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

// Capabilities implements leaseapi.Capable: the wrapped backend's claims
// (the ledger only records calls; it neither blocks nor changes reads).
func (c *ledgerClient) Capabilities() leaseapi.Capabilities { return leaseapi.CapabilitiesOf(c.b) }

type ledgerServer struct {
	l *Ledger
	b leaseapi.Backend
}

func (s *ledgerServer) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	rec, err := s.b.TryAcquire(ctx, k, owner, ttl)
	s.l.applied(ctx, leaseapi.OperationAcquire, k, owner, 0, rec, err)
	return rec, err
}

func (s *ledgerServer) Renew(ctx context.Context, in leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	rec, err := s.b.Renew(ctx, in, ttl)
	s.l.applied(ctx, leaseapi.OperationRenew, in.Key, in.Owner, in.Token, rec, err)
	return rec, err
}

func (s *ledgerServer) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	got, err := s.b.Validate(ctx, rec)
	s.l.applied(ctx, leaseapi.OperationValidate, rec.Key, rec.Owner, rec.Token, leaseapi.Record{}, err)
	return got, err
}

func (s *ledgerServer) Release(ctx context.Context, rec leaseapi.Record) error {
	err := s.b.Release(ctx, rec)
	s.l.applied(ctx, leaseapi.OperationRelease, rec.Key, rec.Owner, rec.Token, leaseapi.Record{}, err)
	return err
}

func (s *ledgerServer) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	in, ok := s.b.(leaseapi.Inspector)
	if !ok {
		return leaseapi.Record{}, false, leaseapi.NewError("inspect", leaseapi.ErrInvalidState, "not supported")
	}
	rec, held, err := in.Inspect(ctx, k)
	s.l.applied(ctx, leaseapi.OperationInspect, k, "", 0, rec, err)
	return rec, held, err
}

func (s *ledgerServer) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if w, ok := s.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

// Capabilities implements leaseapi.Capable: the wrapped backend's claims.
func (s *ledgerServer) Capabilities() leaseapi.Capabilities { return leaseapi.CapabilitiesOf(s.b) }
