package supervisor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/callctx"
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
	// Managed reports whether managed renewal is on. (Beside State, so
	// that the two share a word: a View is 224 bytes, not 232, and a
	// renewal's published copy falls in the 224-byte size class.)
	Managed bool
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

// StateChange is one transition of a lease's state, as the actor made it:
// the local instant, the states before and after, the reason (the view's
// Err after the change: nil for Active and Released) and the lease's token.
type StateChange struct {
	At       time.Time
	From, To leaseapi.State
	Cause    error
	Token    leaseapi.Token
	// Key is the lease's key (for the runtime's own use: it hashes it
	// before anything leaves the client); Prev is the view's Err before
	// the change (why it was Uncertain, if it was).
	Key  leaseapi.Key
	Prev error
}

// Gate bounds how many supervisors may run managed renewal at once. Enter
// reports whether a slot was taken (false fails StartManaged fast with
// ErrCapacity); Leave gives one back. The supervisor calls Leave exactly
// once for every successful Enter. Both must be safe for concurrent use.
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
	// WallClock says Clock is the wall clock (clock.New()): the actor then
	// uses the time package's timers directly, which saves the clock
	// package's wrapper per lease. Leave it false for any other clock.
	WallClock bool
	// Life bounds every backend call of the supervisor except the release
	// on close. Its Done channel is the client's close signal: the
	// supervisor then releases its lease best effort under CloseContext()
	// and exits; queued requests are answered from the final view.
	Life context.Context
	// CloseContext returns the context that bounds the release on close
	// (the one passed to Client.Close); nil means context.Background, still
	// bounded by the policy's OperationTimeout.
	CloseContext func() context.Context
	// Managed bounds managed renewal; nil means unbounded.
	Managed Gate
	// Held, if set, is the bound on held leases whose slot the owner took
	// for this supervisor before Start: the supervisor gives it back (Leave)
	// once as it exits, before Done is closed, so that a slot is free again
	// by the time Done says the lease has ended.
	Held Gate
	// OnExit, if set, is called once from the supervisor goroutine after
	// the final view is published and Done is closed.
	OnExit func(*Supervisor)
	// OnStateChange, if set, is called on the supervisor goroutine after
	// each change of a lease's state, after the new view is published and
	// before the reply to the request that caused it. It must not block:
	// the lease's renewals and replies wait for it.
	OnStateChange func(StateChange)
	// OnCall, if set, is called on the supervisor goroutine after each
	// backend call, before its outcome is applied (see hooks.go). It must
	// not block.
	OnCall func(Call)
	// Unbounded skips the OperationTimeout timer around backend calls, for
	// a backend that never blocks (leaseapi.Capabilities.NeverBlocks).
	Unbounded bool
	// Renewer performs renewals; nil means Backend.Renew. The runtime
	// passes a batching renewer for backends that renew in batches.
	Renewer Renewer

	// shared bounds the calls on the wall clock (internal/callctx); set
	// by Defaults when WallClock is set.
	shared *callctx.Shared
	// pool holds the goroutines of exited actors for the next leases
	// (pool.go); set by Defaults when WallClock is set.
	pool *pool
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

// call is one request with its reply channel. Reply channels are not
// pooled across leases: a channel shared across testing/synctest bubbles
// would crash the tests of every user who runs this library inside
// synctest. Each lease reuses its own (Supervisor.slot), which lives and
// dies with the lease's goroutine.
type call = mailbox.Call[request, reply]

// inboxSize bounds queued requests per lease; senders wait (honouring ctx)
// when it is full. Requests to one lease are rare and served in order, so
// a small bound costs nothing and keeps 100,000 idle leases small.
const inboxSize = 2

// Supervisor owns one held lease: it is the only writer of the lease's
// view, runs its timer and performs its backend calls, one at a time. Its
// methods are safe for concurrent use by multiple goroutines; the read
// methods never block.
type Supervisor struct {
	cfg    *Config         // shared by every lease of a client; read only
	policy leaseapi.Policy // this lease's policy

	// view is written only by the actor goroutine; everyone reads it.
	view atomic.Pointer[View]
	// first is the view published at Start, held in the Supervisor's own
	// allocation (one allocation less per lease; it stays as long as the
	// Supervisor, unlike a later view). Never modified once published.
	first View

	// inbox carries requests from callers to the actor (held by value).
	// Its closed channel is the supervisor's done channel: the actor closes
	// it when it exits, after the final view.
	inbox mailbox.Mailbox[call]
	// slot is the reply exchange the requests to this lease reuse, one at
	// a time (a concurrent one makes its own): a request costs no
	// allocation but the first's reply channel.
	slot mailbox.Slot[reply]

	// closeErr is written by the actor before it closes done and read
	// only after done: why the release on close was not confirmed.
	closeErr error

	// Actor-owned state below: touched only by the run goroutine.
	st    core
	timer timer     // armed at core.wakeAt; zero until the first wait
	armed time.Time // the instant timer is (or, before it is made, will be) armed at
	// due: the last step's wake instant had passed when it was armed;
	// the timer was left alone and next steps the timer event at once.
	due bool
	// loss carries the managed lease's Loss: buffer 1, at most one value,
	// sent and closed by the actor; the runtime's Managed receives.
	loss chan Loss
}

// Start starts the supervisor goroutine for grant g under policy p and
// returns at once. cfg must have been through Defaults and is not copied.
// The actor runs until the lease reaches a terminal state (Released,
// Lost, Expired) or cfg.Life ends (then it releases the lease first);
// Done is closed as it exits. On the wall clock its goroutine may be one
// an earlier lease's actor ran on, and may be kept for a later one
// (pool.go; [Config.Wait] waits for them all).
func Start(cfg *Config, p leaseapi.Policy, g Grant) *Supervisor {
	s := new(Supervisor)
	StartIn(s, cfg, p, g)
	return s
}

// StartIn is Start on a zero Supervisor the caller allocated, typically
// inside a larger struct (the runtime allocates a Handle and its
// Supervisor together): s must not be copied or reused afterwards.
func StartIn(s *Supervisor, cfg *Config, p leaseapi.Policy, g Grant) {
	s.cfg, s.policy = cfg, p
	s.inbox.Init(inboxSize)
	s.st = newCore(&s.policy, g)
	s.first = s.st.view
	s.view.Store(&s.first)
	s.spawn()
}

// Defaults fills in the zero fields of cfg that have defaults (Life,
// Renewer), prepares the shared call bounds and the goroutine pool of the
// wall clock, and returns cfg; call it once, after setting the other
// fields and before sharing cfg.
func (cfg *Config) Defaults() *Config {
	if cfg.Life == nil {
		cfg.Life = context.Background()
	}
	if cfg.Renewer == nil {
		cfg.Renewer = cfg.Backend
	}
	if cfg.WallClock && !cfg.Unbounded {
		cfg.shared = callctx.NewShared(cfg.Life)
	}
	if cfg.WallClock {
		cfg.pool = newPool()
	}
	return cfg
}

// Managed reports whether managed renewal is on. It never blocks.
func (s *Supervisor) Managed() bool { return s.view.Load().Managed }

// View returns the last published view (never nil). It never blocks.
func (s *Supervisor) View() *View { return s.view.Load() }

// State returns the lease's state at the local instant now: the published
// state, except that Active and Uncertain read as Expired from the deadline
// on, before the actor has processed its timer. It never blocks or does I/O.
func (s *Supervisor) State(now time.Time) leaseapi.State { return stateAt(s.view.Load(), now) }

// StateAt returns the state v implies at the local instant now, as
// [Supervisor.State] does for the current view: a reader that needs the
// state together with other fields of one view uses it.
func (v *View) StateAt(now time.Time) leaseapi.State { return stateAt(v, now) }

// Done returns a channel closed when the supervisor goroutine has exited.
func (s *Supervisor) Done() <-chan struct{} { return s.inbox.Closed() }

// CloseErr reports, once Done is closed, why the release the supervisor
// made when the client closed failed or could not be confirmed (the lease
// may then be held on the backend until its TTL runs out); nil if it was
// released, or if it ended otherwise. Before Done it returns nil.
func (s *Supervisor) CloseErr() error {
	select {
	case <-s.Done():
		return s.closeErr
	default:
		return nil
	}
}

// Renew asks the actor to renew the lease now and waits for the outcome.
// A ctx already done sends nothing; a ctx that ends while the request is
// queued withdraws it (ErrCanceled/ErrTimeout: nothing was done); once the
// actor has taken the request, Renew waits for its outcome, which the
// policy's OperationTimeout bounds.
func (s *Supervisor) Renew(ctx context.Context) error { return s.ask(ctx, reqRenew).err }

// Validate asks the actor to confirm the lease with the backend. Success
// restores Active from Uncertain (before the deadline) without extending
// it. ctx as for Renew.
func (s *Supervisor) Validate(ctx context.Context) error { return s.ask(ctx, reqValidate).err }

// Release asks the actor to release the lease (compare-and-release).
// Idempotent: after a successful release it returns nil. It ends managed
// renewal before the backend call, whatever the call's outcome (the loss
// channel closes without a value). ctx as for Renew.
func (s *Supervisor) Release(ctx context.Context) error { return s.ask(ctx, reqRelease).err }

// StartManaged turns on managed renewal and returns the loss channel: it
// yields at most one Loss and is then closed (without a value on a clean
// stop or release). A second call is ErrInvalidState; a full Gate is
// ErrCapacity. ctx as for Renew: a canceled call never starts renewal.
func (s *Supervisor) StartManaged(ctx context.Context) (<-chan Loss, error) {
	r := s.ask(ctx, reqStartManaged)
	return r.loss, r.err
}

// StopManaged turns managed renewal off and closes the loss channel without
// a value. It never releases. Idempotent; nil after the supervisor exited.
func (s *Supervisor) StopManaged(ctx context.Context) error { return s.ask(ctx, reqStopManaged).err }

// ask is the caller side of every request: send, wait, and answer from the
// final view when the actor has exited.
func (s *Supervisor) ask(ctx context.Context, r request) reply {
	if ctx == nil {
		return reply{err: leaseapi.NewError(r.String(), leaseapi.ErrInvalidState, "nil context")}
	}
	rep, err := mailbox.RequestVia(ctx, &s.inbox, s.inbox.Closed(), &s.slot, r)
	switch {
	case err == nil:
		return rep
	case err == mailbox.ErrClosed:
		return finalReply(s.view.Load().State, r)
	}
	return reply{err: leaseapi.ContextError(r.String(), err)}
}

// publish stores a copy of the core's view as the published View. A
// terminal view is published as it is, without a copy: the core ends the
// actor in the step that makes a view terminal (core.finish) and nothing
// changes it after (exit changes only a view that is not terminal), so
// it is as immutable as a copy, and a lease's last view costs no
// allocation (one of the eight of a TryAcquire+Release pair: TestPairAllocs).
func (s *Supervisor) publish() {
	if s.st.view.State.Terminal() {
		s.view.Store(&s.st.view)
		return
	}
	v := new(View)
	*v = s.st.view
	s.view.Store(v)
}
