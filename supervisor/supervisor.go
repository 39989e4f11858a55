package supervisor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/mailbox"
)

// View is an immutable snapshot of a lease as its supervisor last published
// it. Readers get a pointer to a View that is never modified again.
type View struct {
	// Record is the latest grant: acquisition or latest renewal.
	Record leaseapi.Record
	// AcquiredAt is the backend time of the original acquisition.
	AcquiredAt time.Time
	// State as of the last step. [Supervisor.State] also reports Expired
	// once the clock passes Deadline, before the actor has noticed.
	State leaseapi.State
	// SentAt and RecvAt bracket, on the local clock, the request that
	// produced Record: sent at SentAt, answered by RecvAt.
	SentAt time.Time
	RecvAt time.Time
	// Deadline is the local instant from which admission is denied: the
	// send time of the last trusted grant + min(TTL, granted TTL) -
	// SafetyMargin. It equals LocalDeadline(SentAt) unless the last renewal
	// was distrusted for clock skew (then it is the earlier one).
	Deadline time.Time
	// Err is why the lease is Uncertain or terminal (nil when Active or
	// Released); it matches exactly one sentinel.
	Err error
}

// Loss reports the end of a managed lease that was not released by its
// holder: the state it ended in (Expired or Lost), when (local time) and why.
type Loss struct {
	At    time.Time
	State leaseapi.State
	Err   error
}

// Gate bounds how many supervisors may run managed renewal at once. Enter
// reports whether a slot was taken (false fails StartManaged fast with
// ErrCapacity); Leave gives one back. The supervisor calls Leave exactly
// once for every successful Enter.
type Gate interface {
	Enter() bool
	Leave()
}

// Config is what a supervisor needs besides its policy and grant; the
// runtime shares one Config (by pointer, read only) across all the leases
// of a client. Call Defaults before use.
type Config struct {
	Backend leaseapi.Backend
	Clock   clock.Clock
	// Life bounds every backend call of the supervisor except the release
	// on close. When it is canceled (the client starts closing), the
	// supervisor releases its lease best effort under CloseContext() and
	// exits; queued requests are then answered from the final view.
	Life context.Context
	// CloseContext returns the context that bounds the release on close
	// (the one passed to Client.Close); nil means context.Background, still
	// bounded by the policy's OperationTimeout.
	CloseContext func() context.Context
	// Managed bounds managed renewal; nil means unbounded.
	Managed Gate
	// OnExit, if set, is called once from the supervisor goroutine after
	// the final view is published and Done is closed.
	OnExit func(*Supervisor)
	// Unbounded skips the OperationTimeout timer around backend calls, for
	// a backend that never blocks (leaseapi.NonBlocking).
	Unbounded bool
	// Renewer performs renewals; nil means Backend.Renew. The runtime
	// passes a batching renewer for backends that renew in batches.
	Renewer Renewer

	realClock bool // Clock is the wall clock (set by Defaults), see timer
}

// Grant is the acquisition a supervisor starts from: the record and the
// local instants its request was sent and its reply received.
type Grant struct {
	Record leaseapi.Record
	SentAt time.Time
	RecvAt time.Time
}

// Renewer renews one grant, with the semantics of leaseapi.Backend.Renew.
type Renewer interface {
	Renew(ctx context.Context, rec leaseapi.Record, ttl time.Duration) (leaseapi.Record, error)
}

type request uint8

const (
	reqRenew request = iota + 1
	reqValidate
	reqRelease
	reqStartManaged
	reqStopManaged
	reqClose // sent by the client after canceling Life, to wake an idle actor
)

type reply struct {
	err  error
	loss <-chan Loss // set by a successful reqStartManaged
}

// call is one request with its reply channel. Reply channels are not
// pooled: a channel shared across testing/synctest bubbles would crash the
// tests of every user who runs this library inside synctest.
type call = mailbox.Call[request, reply]

// inboxSize bounds queued requests per lease; senders wait (honouring ctx)
// when it is full. Requests to one lease are rare and served in order, so
// a small bound costs nothing and keeps 100,000 idle leases small.
const inboxSize = 2

// Supervisor owns one held lease: it is the only writer of the lease's
// view, runs its timers and performs its backend calls, one at a time. Its
// methods are safe for concurrent use by multiple goroutines; the read
// methods never block.
type Supervisor struct {
	cfg    *Config         // shared by every lease of a client; read only
	policy leaseapi.Policy // this lease's policy

	// view is written only by the actor goroutine; everyone reads it.
	view atomic.Pointer[View]

	// inbox carries requests from callers to the actor (held by value).
	// Its closed channel is the supervisor's done channel: the actor closes
	// it when it exits, after the final view.
	inbox mailbox.Mailbox[call]

	// managed mirrors whether managed renewal is on, for readers; only the
	// actor writes it.
	managed atomic.Bool

	// Actor-owned state below: touched only by the run goroutine.
	timer       timer     // armed at the deadline or the next renewal; created at the first park
	renewDue    time.Time // next managed renewal; meaningful while managed
	loss        chan Loss // buffer 1: at most one Loss, then closed
	everManaged bool
	called      bool // the last step called the backend: continue on a fresh goroutine
}

// Start spawns the supervisor goroutine for grant g under policy p and
// returns at once. cfg must have been through Defaults and is not copied.
// The actor runs until the lease reaches a terminal state (Released, Lost,
// Expired) or until cfg.Life is canceled; Done is closed then. (After each
// backend call it moves to a fresh goroutine, see run; one goroutine at a
// time.)
func Start(cfg *Config, p leaseapi.Policy, g Grant) *Supervisor {
	s := &Supervisor{cfg: cfg, policy: p}
	s.inbox.Init(inboxSize)
	v := &View{
		Record:     g.Record,
		AcquiredAt: g.Record.AcquiredAt,
		State:      leaseapi.StateActive,
		SentAt:     g.SentAt,
		RecvAt:     g.RecvAt,
		Deadline:   g.Record.LocalDeadline(g.SentAt, p),
	}
	s.view.Store(v)
	go s.run()
	return s
}

// Defaults fills in the zero fields of cfg that have defaults (Life,
// Renewer), notes whether Clock is the wall clock, and returns cfg; call it
// once before sharing cfg.
func (cfg *Config) Defaults() *Config {
	if cfg.Life == nil {
		cfg.Life = context.Background()
	}
	if cfg.Renewer == nil {
		cfg.Renewer = cfg.Backend
	}
	cfg.realClock = isRealClock(cfg.Clock)
	return cfg
}

// Managed reports whether managed renewal is on. It never blocks.
func (s *Supervisor) Managed() bool { return s.managed.Load() }

// View returns the last published view (never nil). It never blocks.
func (s *Supervisor) View() *View { return s.view.Load() }

// State returns the lease's state at the local instant now: the published
// state, except that Active and Uncertain read as Expired from the deadline
// on, before the actor has processed its timer. It never blocks or does I/O.
func (s *Supervisor) State(now time.Time) leaseapi.State {
	v := s.view.Load()
	if !v.State.Terminal() && !now.Before(v.Deadline) {
		return leaseapi.StateExpired
	}
	if mutant.On(mutant.UncertainAdmits) && v.State == leaseapi.StateUncertain {
		return leaseapi.StateActive
	}
	return v.State
}

// Done returns a channel closed when the supervisor goroutine has exited.
func (s *Supervisor) Done() <-chan struct{} { return s.inbox.Closed() }

// Renew asks the actor to renew the lease now and waits for the outcome.
// ctx bounds only the wait; the backend call is bounded by the policy's
// OperationTimeout and its outcome is applied even if ctx ends first.
func (s *Supervisor) Renew(ctx context.Context) error { return s.ask(ctx, reqRenew, "renew").err }

// Validate asks the actor to confirm the lease with the backend. Success
// restores Active from Uncertain (before the deadline) without extending it.
func (s *Supervisor) Validate(ctx context.Context) error {
	return s.ask(ctx, reqValidate, "validate").err
}

// Release asks the actor to release the lease (compare-and-release).
// Idempotent: after a successful release it returns nil. It ends managed
// renewal before the backend call, whatever the call's outcome (the loss
// channel closes without a value).
func (s *Supervisor) Release(ctx context.Context) error {
	return s.ask(ctx, reqRelease, "release").err
}

// StartManaged turns on managed renewal and returns the loss channel: it
// yields at most one Loss and is then closed (without a value on a clean
// stop or release). A second call is ErrInvalidState; a full Gate is
// ErrCapacity.
func (s *Supervisor) StartManaged(ctx context.Context) (<-chan Loss, error) {
	r := s.ask(ctx, reqStartManaged, "start managed")
	return r.loss, r.err
}

// StopManaged turns managed renewal off and closes the loss channel without
// a value. It never releases. Idempotent; nil after the supervisor exited.
func (s *Supervisor) StopManaged(ctx context.Context) error {
	return s.ask(ctx, reqStopManaged, "stop managed").err
}

// WakeForClose nudges an idle actor after its Life was canceled, without
// blocking: it queues a close request if there is room. If there is none,
// the actor is busy and sees the canceled Life before its next wait.
func (s *Supervisor) WakeForClose() {
	_ = s.inbox.TrySend(mailbox.NewCall[request, reply](reqClose))
}

// ask is the caller side of every request: send, wait, and answer from the
// final view when the actor has exited.
func (s *Supervisor) ask(ctx context.Context, r request, op string) reply {
	if ctx == nil {
		return reply{err: leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")}
	}
	rep, err := mailbox.Request(ctx, &s.inbox, s.inbox.Closed(), r)
	switch {
	case err == nil:
		return rep
	case err == mailbox.ErrClosed:
		return s.finalReply(r)
	}
	return reply{err: leaseapi.ContextError(op, err)}
}

// finalReply answers a request after the actor has exited, from the final
// view: never blocks, never panics, fails closed.
func (s *Supervisor) finalReply(r request) reply {
	st := s.view.Load().State
	switch r {
	case reqStopManaged:
		return reply{}
	case reqStartManaged:
		if st == leaseapi.StateReleased {
			return reply{err: leaseapi.NewError("start managed", leaseapi.ErrInvalidState, "lease released")}
		}
		return reply{err: leaseapi.NewError("start managed", leaseapi.ErrLost, "")}
	}
	return reply{err: terminalReply(st, toEvent(r))}
}

func toEvent(r request) event {
	switch r {
	case reqRenew:
		return evRenew
	case reqValidate:
		return evValidate
	case reqRelease:
		return evRelease
	}
	return 0
}
