package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/callctx"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// Client bounds.
const (
	// MaxClientWaiters is the largest ClientOptions.MaxWaiters.
	MaxClientWaiters uint32 = 1_000_000
	// MaxClientManaged is the largest ClientOptions.MaxManaged.
	MaxClientManaged uint32 = 100_000
	// DefaultMaxWaiters is MaxWaiters when zero.
	DefaultMaxWaiters uint32 = 10_000
	// DefaultMaxManaged is MaxManaged when zero.
	DefaultMaxManaged uint32 = 10_000
	// MaxClientHeld is the largest ClientOptions.MaxHeld.
	MaxClientHeld uint32 = 1_000_000
	// DefaultMaxHeld is MaxHeld when zero.
	DefaultMaxHeld uint32 = 100_000
)

// ClientOptions configures a [Client]. The zero value is valid: the real
// clock, crypto/rand owner ids, the clock-driven sleeper, math/rand jitter
// and the default bounds.
type ClientOptions struct {
	// Clock drives deadlines, renewal and retries. Nil is the real clock.
	Clock clock.Clock
	// Owners makes a fresh owner id for every acquisition attempt.
	Owners leaseapi.OwnerSource
	// Sleeper pauses between acquisition attempts. Nil sleeps on Clock.
	Sleeper leaseapi.Sleeper
	// Retry draws retry jitter.
	Retry leaseapi.RetrySource
	// MaxWaiters bounds Acquire/TryAcquire calls in flight (0: 10,000; at
	// most MaxClientWaiters). One more fails fast with ErrCapacity.
	MaxWaiters uint32
	// MaxManaged bounds handles under managed renewal (0: 10,000; at most
	// MaxClientManaged). One more StartManaged fails with ErrCapacity.
	MaxManaged uint32
	// MaxHeld bounds the handles the client holds at once, managed or not
	// (0: 100,000; at most MaxClientHeld). Each held handle keeps one
	// supervisor goroutine until its lease ends, which for a forgotten
	// unmanaged handle is its deadline; the bound keeps a program that
	// leaks handles from growing without limit. One more acquisition fails
	// fast with ErrCapacity, before any backend call.
	MaxHeld uint32
	// NoBatching makes every renewal its own backend call even when the
	// backend claims batched renewal (leaseapi.Capabilities.RenewBatch).
	NoBatching bool
	// NoMetrics turns the exact metrics off: Client.Metrics then reports
	// only the gauges (see metrics.go for what they cost when on).
	NoMetrics bool
	// OnStateChange, if set, receives every handle transition, best
	// effort: in order, one call at a time, on a goroutine of the client
	// (never a supervisor's), dropped and counted when 1,024 are already
	// waiting for it. It may call the client's methods, Close included.
	// Close waits for the hook's last call to return, except when it is
	// called on the goroutine of a hook (this client's or another
	// client's): then it returns once every lease has ended, and the
	// changes still queued (those of the shutdown) are delivered after
	// the hook returns, by its goroutine, which then exits.
	OnStateChange func(StateChange)
	// Tracer, if set, wraps every public operation (see [Tracer]).
	Tracer Tracer
	// KeyHasher hashes keys for state changes and traces. Nil draws a
	// random secret for this client; share one across a fleet to follow a
	// lease from process to process. A non-nil one must come from
	// NewKeyHasher (a zero KeyHasher's secret is known to everyone).
	KeyHasher *KeyHasher
}

// Client acquires leases on one backend and owns the supervisors of the
// leases it holds. It is safe for concurrent use by multiple goroutines.
// The library is stateless beyond the backend: any number of Clients, in
// any number of processes, may share a backend.
type Client struct {
	b         leaseapi.Backend
	inspector leaseapi.Inspector      // nil unless the backend claims Inspect
	watcher   leaseapi.ReleaseWatcher // nil unless the backend claims WatchRelease
	// unbounded: the backend claims NeverBlocks (leaseapi.Capabilities), so
	// its calls need no OperationTimeout timer.
	unbounded bool
	// batch coalesces renewals for a BatchRenewer backend; nil otherwise.
	batch *batcher
	// bounds bounds the acquisitions' calls on the wall clock (opContext);
	// nil on any other clock and for a backend that never blocks.
	bounds *callctx.Shared
	// canAdopt: a lost acquisition reply may be resolved by Inspect and
	// adopted, because the backend claims Adopt (leaseapi.Capabilities);
	// false when it does not say so.
	canAdopt bool
	clk      clock.Clock
	owners   leaseapi.OwnerSource
	sleeper  leaseapi.Sleeper
	retry    leaseapi.RetrySource

	// Telemetry (metrics.go, statechange.go, trace.go): m is nil when
	// metrics are off, tracer nil when untraced, events nil without a hook.
	m      *clientMetrics
	tracer Tracer
	hasher *KeyHasher
	events *stateQueue

	maxWaiters int64
	waiters    atomic.Int64
	managed    gate
	held       gate // one slot per live supervisor: taken in register, given back by the supervisor
	marks      watermarks

	// life is canceled when Close starts: it aborts in-flight supervisor
	// calls and acquisition waits, and tells every supervisor to release
	// and exit under closeCtx.
	life       context.Context
	cancelLife context.CancelFunc
	closeCtx   atomic.Pointer[context.Context] // set by Close before canceling life
	// sup is the supervisor configuration shared by every lease.
	sup *supervisor.Config

	// live counts the supervisors started (register) and not yet exited
	// (unregister), with liveClosed set once Close has started; after that
	// nothing registers. Whoever leaves it at exactly liveClosed (the last
	// supervisor to exit, or Close finding none) closes drained: one word
	// instead of a lock and a set of supervisors, which 64 goroutines
	// acquiring and releasing at once queued on (the spawn of every
	// supervisor ran under that lock).
	live atomic.Uint64
	// mu guards unconfirmed. No channel operation happens under it.
	mu sync.Mutex
	// unconfirmed counts, by sentinel, the releases on close that failed
	// or could not be confirmed.
	unconfirmed map[error]int
	// drained is closed once Close has started and the last supervisor has
	// exited.
	drained   chan struct{}
	closeOnce sync.Once
}

// liveClosed is the bit of Client.live that says Close has started.
const liveClosed = 1 << 63

// NewClient returns a Client for backend b. It does no I/O and starts no
// goroutine. A nil backend, out-of-range bounds, an option that is a nil
// pointer or func inside a non-nil interface (a typed-nil Clock, Owners,
// Sleeper, Retry or Tracer, which would panic on first use) and a
// KeyHasher not made by NewKeyHasher are ErrInvalidState.
func NewClient(b leaseapi.Backend, o ClientOptions) (*Client, error) {
	const op = "new client"
	if b == nil || isNilPointer(b) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil backend")
	}
	if isNilPointer(o.Clock) || isNilPointer(o.Owners) || isNilPointer(o.Sleeper) || isNilPointer(o.Retry) || isNilPointer(o.Tracer) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "typed-nil option")
	}
	if o.KeyHasher != nil && *o.KeyHasher == (KeyHasher{}) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "key hasher not made by NewKeyHasher")
	}
	if o.MaxWaiters > MaxClientWaiters {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "max waiters out of range")
	}
	if o.MaxManaged > MaxClientManaged {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "max managed out of range")
	}
	if o.MaxHeld > MaxClientHeld {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "max held out of range")
	}
	c := &Client{
		b:       b,
		clk:     o.Clock,
		owners:  o.Owners,
		sleeper: o.Sleeper,
		retry:   o.Retry,
		drained: make(chan struct{}),
	}
	// Capabilities are read once, only through leaseapi.CapabilitiesOf: an
	// unclaimed capability is not used, whatever methods b happens to have.
	caps := leaseapi.CapabilitiesOf(b)
	if caps.Inspect {
		c.inspector = b.(leaseapi.Inspector)
	}
	if caps.WatchRelease {
		c.watcher = b.(leaseapi.ReleaseWatcher)
	}
	c.unbounded = caps.NeverBlocks
	c.canAdopt = caps.Adopt
	wall := c.clk == nil
	if wall {
		c.clk = clock.New()
	}
	if wall && !c.unbounded {
		c.bounds = callctx.NewCeil(context.Background())
	}
	if c.owners == nil {
		c.owners = leaseapi.RandomOwners{}
	}
	if c.sleeper == nil {
		c.sleeper = NewSleeper(c.clk)
	}
	if c.retry == nil {
		c.retry = leaseapi.RandomJitter{}
	}
	c.maxWaiters = int64(cmpOr(o.MaxWaiters, DefaultMaxWaiters))
	c.managed.max = int64(cmpOr(o.MaxManaged, DefaultMaxManaged))
	c.held.max = int64(cmpOr(o.MaxHeld, DefaultMaxHeld))
	c.life, c.cancelLife = context.WithCancel(context.Background())
	if caps.RenewBatch && !c.unbounded && !o.NoBatching {
		c.batch = newBatcher(b.(leaseapi.BatchRenewer), c.clk, wall, c.life)
	}
	sup := &supervisor.Config{
		Backend:      c.b,
		Clock:        c.clk,
		WallClock:    wall,
		Life:         c.life,
		CloseContext: c.closeContext,
		Managed:      &c.managed,
		Held:         &c.held,
		OnExit:       c.unregister,
		Unbounded:    c.unbounded,
		Renewer:      c.renewer(),
	}
	if err := c.initTelemetry(o, sup); err != nil {
		c.cancelLife()
		return nil, err
	}
	c.sup = sup.Defaults()
	return c, nil
}

// isNilPointer reports whether v is a typed nil pointer or func (a nil
// *memory.Store in a Backend interface), which would panic on its first
// call. A nil interface is not one (it means "unset").
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return (r.Kind() == reflect.Pointer || r.Kind() == reflect.Func) && r.IsNil()
}

func cmpOr(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// Managed returns how many handles are under managed renewal now.
func (c *Client) Managed() int {
	if !c.usable() {
		return 0
	}
	return int(c.managed.n.Load())
}

// Held returns how many handles of this client have a live supervisor
// (the figure MaxHeld bounds). A supervisor exits just after its lease
// ends (the Release reply is sent first), so a count read right after
// Release may still include it; once the handle's Done is closed it is no
// longer counted.
func (c *Client) Held() int {
	if !c.usable() {
		return 0
	}
	return int(c.held.n.Load())
}

// register starts the supervisor of a fresh grant. It starts nothing and
// returns an error if the client is closed (ErrInvalidState) or already
// holds MaxHeld handles (ErrCapacity); the caller then gives the grant back.
// Nothing is locked: the supervisor is counted live, only while Close has
// not started, before it is started.
func (c *Client) register(p leaseapi.Policy, rec leaseapi.Record, sentAt, recvAt time.Time) (*Handle, error) {
	const op = "acquire"
	for n := c.live.Load(); ; n = c.live.Load() {
		if n&liveClosed != 0 {
			return nil, errClosed(op)
		}
		if c.live.CompareAndSwap(n, n+1) {
			break
		}
	}
	if !c.held.Enter() {
		c.leave()
		return nil, errMaxHeld
	}
	hs := new(handleSupervisor) // one allocation for both
	hs.h = Handle{c: c, s: &hs.s}
	supervisor.StartIn(&hs.s, c.sup, p, supervisor.Grant{Record: rec, SentAt: sentAt, RecvAt: recvAt})
	return &hs.h, nil
}

// leave uncounts a supervisor (or a registration that started none) and
// closes drained if it was the last one after Close started.
func (c *Client) leave() {
	if c.live.Add(^uint64(0)) == liveClosed {
		close(c.drained)
	}
}

// handleSupervisor is a Handle allocated together with its Supervisor.
type handleSupervisor struct {
	h Handle
	s supervisor.Supervisor
}

var errMaxHeld = leaseapi.NewError("acquire", leaseapi.ErrCapacity, "max held")

// closeContext returns the context Close was called with.
func (c *Client) closeContext() context.Context {
	if p := c.closeCtx.Load(); p != nil {
		return *p
	}
	return context.Background()
}

func (c *Client) renewer() supervisor.Renewer {
	if c.batch == nil {
		return nil
	}
	return c.batch
}

// unregister runs on a supervisor's goroutine as it exits (after Done).
func (c *Client) unregister(s *supervisor.Supervisor) {
	if err := s.CloseErr(); err != nil {
		c.mu.Lock()
		if c.unconfirmed == nil {
			c.unconfirmed = make(map[error]int)
		}
		c.unconfirmed[leaseapi.Kind(err)]++
		c.mu.Unlock()
	}
	c.leave() // after the count above: Close reads it once drained
}

// Close shuts the client down, like http.Server.Shutdown: it refuses new
// acquisitions (they fail with ErrInvalidState), aborts acquisition waits
// and in-flight renewals, releases every lease the client still holds
// (compare-and-release, best effort within ctx and each policy's
// OperationTimeout) so that other owners can take them at once, and waits
// until every supervisor has exited. After Close returns, no handle of this
// client reports Active and no goroutine the client started is alive
// (except the one delivering to ClientOptions.OnStateChange when Close is
// called from a hook: see there).
//
// Close never infers a release from shutdown. It returns nil only if every
// release it made was confirmed (or found the lease already replaced:
// ErrStaleOwner means nothing of ours was held). Otherwise its error joins
// one error per class of what went wrong, each matching its sentinel:
// ErrBackendUnavailable (a release was not applied), ErrAmbiguousOutcome
// (a release may or may not have been applied), and ErrTimeout or
// ErrCanceled (ctx ended first; the remaining releases were abandoned). A
// lease whose release was not confirmed may still be held on the backend
// until its TTL runs out: at most the policy's TTL after the send of its
// last successful renewal (its handle's Deadline plus the safety margin).
// Every such handle ends Lost. Close still waits for the supervisors to
// exit when ctx ends (promptly: their calls are canceled). Close is
// idempotent: later calls wait for the same shutdown and report its
// releases the same way.
func (c *Client) Close(ctx context.Context) error {
	if !c.usable() {
		return errUnusable("close")
	}
	if ctx == nil {
		return leaseapi.NewError("close", leaseapi.ErrInvalidState, "nil context")
	}
	c.closeOnce.Do(func() {
		c.closeCtx.Store(&ctx)
		if c.live.Or(liveClosed) == 0 {
			close(c.drained) // no supervisor left to do it
		}
		c.cancelLife() // every supervisor now releases under ctx and exits
	})
	var ctxErr error
	select {
	case <-c.drained:
	case <-ctx.Done():
		<-c.drained // supervisors' releases use ctx: they exit promptly now
		ctxErr = leaseapi.ContextError("close", ctx.Err())
	}
	c.sup.Wait() // the supervisors' goroutines: parked ones end with life
	if c.batch != nil {
		c.batch.wait() // its senders end with life, canceled above
	}
	if c.events != nil {
		c.events.wait() // no supervisor is left to report a change
	}
	return c.closeError(ctxErr)
}

// closeError joins ctxErr with one error per class of unconfirmed
// release (in a fixed order; a class ctxErr already names is not repeated).
func (c *Client) closeError(ctxErr error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	kinds := slices.SortedFunc(maps.Keys(c.unconfirmed), func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	errs := []error{ctxErr}
	for _, kind := range kinds {
		if ctxErr != nil && errors.Is(ctxErr, kind) {
			continue
		}
		detail := fmt.Sprintf("%d release(s) not confirmed: held until TTL", c.unconfirmed[kind])
		errs = append(errs, leaseapi.NewError("close", kind, detail))
	}
	return errors.Join(errs...)
}

// full reports whether the gate has no slot left, without taking one.
func (g *gate) full() bool { return g.n.Load() >= g.max }

// gate is the MaxManaged bound: a counter that refuses to pass max.
type gate struct {
	n   atomic.Int64
	max int64
}

func (g *gate) Enter() bool {
	if g.n.Add(1) > g.max {
		g.n.Add(-1)
		return false
	}
	return true
}

func (g *gate) Leave() { g.n.Add(-1) }

// opContext bounds one backend call, sent at sentAt, by ctx and the
// policy's OperationTimeout, unless the backend never blocks. A ctx that
// already ends by then bounds the call alone (exactly as a timeout
// context of it would), so no context is made for it. On the wall clock a
// ctx that never ends (Done nil: Background, a WithValue or WithoutCancel
// chain) gets an exact bound that makes no timer of its own
// (callctx.Shared.Exact): its deadline, from which backends derive the
// not-after bound they send, is exactly sentAt+OperationTimeout, and it
// ends at the earliest then, less than 1/64 of the timeout later.
// Otherwise the call gets a timeout context of its own.
func (c *Client) opContext(ctx context.Context, p leaseapi.Policy, sentAt time.Time) (context.Context, context.CancelFunc) {
	if c.unbounded {
		return ctx, noCancel
	}
	d := p.OperationTimeout()
	if dl, ok := ctx.Deadline(); ok && !dl.After(sentAt.Add(d)) {
		return ctx, noCancel
	}
	if c.bounds != nil && d >= callctx.Min && ctx.Done() == nil {
		return c.bounds.Exact(ctx, sentAt, d), noCancel
	}
	return c.clk.WithTimeout(ctx, d)
}

// noCancel is the CancelFunc of a context opContext did not make.
func noCancel() {}

// NewSleeper returns the default leaseapi.Sleeper: a timer on clk (nil:
// the real clock), woken early by wake. Wrap it to observe or shape
// acquisition pauses without re-implementing them.
func NewSleeper(clk clock.Clock) leaseapi.Sleeper {
	if clk == nil {
		clk = clock.New()
	}
	return clockSleeper{clk}
}

// clockSleeper is the default Sleeper: a timer on the client's clock.
type clockSleeper struct{ clk clock.Clock }

func (s clockSleeper) Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := s.clk.Timer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
