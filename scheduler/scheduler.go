package scheduler

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/lifecycle"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Mode says how the servers of a fleet share a job. It is a value, safe
// for concurrent use.
type Mode uint8

const (
	// OnOneServer runs each slot of the job on exactly one server: the
	// first server to claim the slot's key. Runs of different slots may
	// overlap (on different servers) when a run is longer than the interval.
	OnOneServer Mode = iota + 1
	// NonOverlap runs each slot on at most one server, like OnOneServer, and
	// additionally never runs two runs of the job at once anywhere in the
	// fleet: a run holds the job's lease (renewed while it runs); slots that
	// come due while it runs are skipped, not queued.
	NonOverlap
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case OnOneServer:
		return "on-one-server"
	case NonOverlap:
		return "non-overlap"
	}
	return "invalid"
}

// MaxJobNameBytes bounds a job name.
const MaxJobNameBytes = 128

// DefaultKeyNamespace is the key namespace when Options.KeyNamespace is empty.
const DefaultKeyNamespace = "scheduler"

// maxCatchUp bounds how many passed slots one wake-up walks through.
const maxCatchUp = 10_000

// Job is one scheduled job. Every server of a fleet must add the job with
// the same Name, Schedule and Mode. A Job is a value; the Scheduler only
// reads it, and calls Run from the job's goroutine (one run at a time per
// Scheduler).
type Job struct {
	// Name identifies the job across the fleet: 1 to MaxJobNameBytes bytes
	// of valid UTF-8 without control bytes or '/'. It is part of the lease
	// keys, so it is as confidential as a key.
	Name string
	// Schedule yields the job's slots; see [Every].
	Schedule Schedule
	// Mode is OnOneServer or NonOverlap.
	Mode Mode
	// Location is the time zone the scheduler passes to Schedule.Next: nil
	// means UTC, whatever the server's local time zone (time.Local). A
	// schedule that computes wall-clock slots ("every day at 09:00") from
	// t's location therefore picks the same instants on every server of a
	// fleet, wherever each server thinks it is; name a location to have
	// 09:00 mean 09:00 there. Every server must add the job with the same
	// Location. [Every]'s slots do not depend on it.
	Location *time.Location
	// Policy is the lease policy of the job's leases. Its Wait bounds how
	// long after a slot's time a server keeps retrying a claim that failed
	// for lack of a reliable backend answer (zero: one attempt).
	Policy leaseapi.Policy
	// Run is the job. Its ctx is canceled when the run's lease is lost or
	// expires (context.Cause says why) and when the scheduler stops; token
	// is the run's fencing token (see the package doc). [Slot] and
	// [HandleFrom] read the slot and the lease from ctx. A panic is
	// recovered and reported as a [PanicError].
	Run func(ctx context.Context, token leaseapi.Token) error
}

// Outcome is what a server did with one slot. It is a value, safe for
// concurrent use.
type Outcome uint8

const (
	// Ran: this server claimed the slot and ran the job; Event.Err is the
	// job's error, a *PanicError, or an ErrLost error if the job returned
	// nil but its lease ended while it ran.
	Ran Outcome = iota + 1
	// Taken: another server had already claimed the slot.
	Taken
	// Busy: (NonOverlap) another run of the job held the job's lease.
	Busy
	// Missed: the slot passed while this server was running the job or
	// before it woke up; it did not try to claim it.
	Missed
	// Failed: the claim had no reliable outcome (Event.Err says why); the
	// slot was not run here. Also reported, with a *PanicError, when the
	// job's Schedule.Next panicked (the job then ends: no further slot)
	// or when Options.OnEvent panicked.
	Failed
	// Retrying: one claim attempt had no reliable outcome (Event.Err says
	// why: a backend unavailable, misconfigured or ambiguous) and is
	// retried after Policy.Retry, within Policy.Wait of the slot. The
	// slot's final outcome is reported after it.
	Retrying
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Ran:
		return "ran"
	case Taken:
		return "taken"
	case Busy:
		return "busy"
	case Missed:
		return "missed"
	case Failed:
		return "failed"
	case Retrying:
		return "retrying"
	}
	return "invalid"
}

// Event reports what this server did with one slot of one job. It is a
// value, handed to Options.OnEvent and not kept.
type Event struct {
	// Job is the job's name.
	Job string
	// Slot is the slot's scheduled time.
	Slot time.Time
	// Outcome is what happened.
	Outcome Outcome
	// Token is the run's fencing token (Ran only).
	Token leaseapi.Token
	// Err is the job's error (Ran) or the claim's error (Failed, Retrying).
	Err error
	// ReleaseErr is the error of the first release of this slot's leases
	// that failed (the run's lease after the run, a slot lease given back),
	// nil when every lease taken for the slot was released.
	// ErrBackendUnavailable: the lease is still held; ErrAmbiguousOutcome:
	// it may be. Such a lease ends at its TTL; until then a NonOverlap job
	// is Busy everywhere.
	ReleaseErr error
	// At is the local time of the event.
	At time.Time
}

// Options configures a [Scheduler]. The zero value is valid. New copies
// what it needs; the Options value is not kept.
type Options struct {
	// Clock decides when slots are due and drives every wait. Nil is the
	// real clock. Servers' clocks may differ (see the package doc).
	Clock clock.Clock
	// KeyNamespace is the namespace of the scheduler's lease keys (a valid
	// key namespace). Empty means DefaultKeyNamespace. Every server of a
	// fleet must use the same one.
	KeyNamespace string
	// OnEvent, if set, is called once per slot this server considered (and
	// before that once per claim attempt that is retried), on the job's
	// goroutine, after the run (if any) has ended and its lease was
	// released. It must not block for long: the job's next slot waits for
	// it. A panic in it is recovered and reported once more to OnEvent as
	// a Failed event whose Err is a *PanicError (a panic in that call is
	// dropped); the job goes on.
	OnEvent func(Event)
}

// job is an added Job with its keys' prefix.
type job struct {
	Job
	runKey leaseapi.Key   // NonOverlap: the job's lease
	loc    *time.Location // Job.Location, or UTC
	// broken is set when Schedule.Next panicked: the job ends and Next is
	// not called again. Only the job's goroutine touches it.
	broken bool
}

// Scheduler runs jobs on schedules, coordinating the servers of a fleet
// through leases on one backend. Build it with [New], add jobs, Start,
// Stop. It is safe for concurrent use. The zero Scheduler (and a nil
// *Scheduler) is not usable: its methods return ErrInvalidState. It does not own the client: close
// the client after Stop. A client closed under a running Scheduler fails
// every claim (Failed events matching ErrInvalidState) until Stop.
type Scheduler struct {
	c       *runtime.Client
	clk     clock.Clock
	ns      string
	onEvent func(Event)

	// mu guards jobs, names, cancel and stopErrs, and orders Add, Start
	// and Stop with life's state changes.
	mu     sync.Mutex
	jobs   []*job
	names  map[string]struct{}
	cancel context.CancelFunc
	// stopErrs are the release failures of runs that Stop ended; Stop
	// returns them.
	stopErrs []error
	// life runs the job goroutines; Stop waits on the channel it returns.
	life lifecycle.Life
}

// New returns a Scheduler that takes leases through client. It starts
// nothing. A nil client or an invalid namespace is ErrInvalidState.
func New(client *runtime.Client, o Options) (*Scheduler, error) {
	const op = "new scheduler"
	if client == nil {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil client")
	}
	ns := o.KeyNamespace
	if ns == "" {
		ns = DefaultKeyNamespace
	}
	if _, err := leaseapi.NewKey(ns, "x"); err != nil {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, "invalid key namespace")
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.New()
	}
	return &Scheduler{c: client, clk: clk, ns: ns, onEvent: o.OnEvent, names: map[string]struct{}{}}, nil
}

// isNilPointer reports whether v is a typed nil pointer (a nil *Cron in
// a Schedule, say), which a nil check of the interface misses.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// built reports whether s was made by New.
func (s *Scheduler) built() bool { return s != nil && s.c != nil }

func errNotBuilt(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "scheduler not built by New")
}

// Add adds a job. It must be called before Start. Errors (all
// ErrInvalidState): an empty, too long or malformed name, a duplicate
// name, a nil or exhausted schedule, an interval below [MinInterval] or
// above [MaxInterval], a schedule whose first two slots are less than
// MinInterval apart or whose Next panics, an invalid mode, the zero
// policy, a nil Run, a scheduler already started or stopped, or one not
// built by New.
func (s *Scheduler) Add(j Job) error {
	const op = "add job"
	bad := func(detail string) error { return leaseapi.NewError(op, leaseapi.ErrInvalidState, detail) }
	if !s.built() {
		return errNotBuilt(op)
	}
	switch {
	case j.Name == "" || len(j.Name) > MaxJobNameBytes:
		return bad("job name empty or too long")
	case strings.ContainsRune(j.Name, '/'):
		return bad("slash in job name")
	case j.Schedule == nil || isNilPointer(j.Schedule):
		return bad("nil schedule")
	case j.Mode != OnOneServer && j.Mode != NonOverlap:
		return bad("invalid mode")
	case j.Policy.Check() != nil:
		return bad("zero policy")
	case j.Run == nil:
		return bad("nil run")
	}
	if iv, ok := j.Schedule.(Interval); ok && (iv.d < MinInterval || iv.d > MaxInterval) {
		return bad("interval out of range")
	}
	loc := j.Location
	if loc == nil {
		loc = time.UTC
	}
	now := s.clk.Now()
	first, err := safeNext(j.Schedule, now.In(loc))
	switch {
	case err != nil:
		return bad("schedule panicked")
	case !first.After(now):
		return bad("schedule has no future slot")
	}
	if second, err := safeNext(j.Schedule, first.In(loc)); err != nil {
		return bad("schedule panicked")
	} else if !second.IsZero() && second.Sub(first) < MinInterval {
		return bad("schedule slots closer than the minimum interval")
	}
	runKey, err := leaseapi.NewKey(s.ns, j.Name+"/run")
	if err != nil {
		return bad("job name not usable in a key")
	}
	// The longest slot key must fit too.
	if _, err := leaseapi.NewKey(s.ns, j.Name+"/slot/-9223372036854775808"); err != nil {
		return bad("job name not usable in a key")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.life.Idle() {
		return bad("scheduler already started")
	}
	if _, dup := s.names[j.Name]; dup {
		return bad("duplicate job name")
	}
	s.names[j.Name] = struct{}{}
	s.jobs = append(s.jobs, &job{Job: j, runKey: runKey, loc: loc})
	return nil
}

// Start starts one goroutine per job, which waits for the job's slots and
// runs them; each exits when Stop is called (after its current run has
// returned and its lease is released) or when its schedule has no more
// slots. ctx is only checked: the scheduler's life does not depend on it
// (as with uber-go/fx OnStart hooks, whose ctx ends after start-up). A
// nil ctx, a second Start, or a Start after Stop is ErrInvalidState; a
// done ctx is ErrCanceled/ErrTimeout and starts nothing.
func (s *Scheduler) Start(ctx context.Context) error {
	const op = "start scheduler"
	if !s.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	if err := ctx.Err(); err != nil {
		return leaseapi.ContextError(op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	jobsCtx, cancel := context.WithCancel(context.Background())
	loops := make([]func(), len(s.jobs))
	for i, j := range s.jobs {
		loops[i] = func() { s.loop(jobsCtx, j) }
	}
	// lifecycle.Life.Start's extra goroutine exits when every job
	// goroutine has exited.
	if !s.life.Start(loops...) {
		cancel()
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "already started or stopped")
	}
	s.cancel = cancel
	return nil
}

// Stop stops the scheduler: no slot is claimed from then on, running jobs'
// contexts are canceled, and Stop waits until every job has returned, its
// renewal has stopped and the release of its lease has returned. It
// returns nil only if every release that Stop waited for succeeded: a
// release that failed is returned (matching ErrBackendUnavailable: the
// lease is still held, or ErrAmbiguousOutcome: it may be, until its TTL;
// several are joined with errors.Join), and reported in the run's Event
// too. ctx bounds the wait: if it ends first, Stop returns
// ErrCanceled/ErrTimeout and the jobs keep winding down (a later Stop
// waits again, and reports the releases then). Stop is idempotent (a
// release failure is returned once); Stop before Start just prevents
// Start. A nil ctx, or a Scheduler not built by New, is ErrInvalidState.
func (s *Scheduler) Stop(ctx context.Context) error {
	const op = "stop scheduler"
	if !s.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	s.mu.Lock()
	done := s.life.Stop()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	if err := lifecycle.Wait(ctx, done); err != nil {
		return leaseapi.ContextError(op, err)
	}
	s.mu.Lock()
	errs := s.stopErrs
	s.stopErrs = nil
	s.mu.Unlock()
	return errors.Join(errs...)
}

// ctxKey keys the run's slot and handle in its context.
type ctxKey struct{}

type runInfo struct {
	slot time.Time
	h    *runtime.Handle
}

// Slot returns the slot a run's ctx belongs to, and false outside a run.
func Slot(ctx context.Context) (time.Time, bool) {
	ri, ok := ctx.Value(ctxKey{}).(runInfo)
	return ri.slot, ok
}

// HandleFrom returns the lease a run's ctx runs under (nil outside a run):
// the slot's lease (OnOneServer) or the job's lease (NonOverlap). Use it to
// check State before a protected action; do not Release it, the scheduler
// does when the run returns.
func HandleFrom(ctx context.Context) *runtime.Handle {
	ri, _ := ctx.Value(ctxKey{}).(runInfo)
	return ri.h
}

// emit hands e to OnEvent. A panic in OnEvent is recovered and reported
// once more as a Failed event; a panic in that report is dropped.
func (s *Scheduler) emit(e Event) {
	if s.onEvent == nil {
		return
	}
	e.At = s.clk.Now()
	if perr := protect("OnEvent", func() error { s.onEvent(e); return nil }); perr != nil {
		_ = protect("OnEvent", func() error {
			s.onEvent(Event{Job: e.Job, Slot: e.Slot, Outcome: Failed, Err: perr, At: s.clk.Now()})
			return nil
		})
	}
}

// safeNext calls sch.Next(t), turning a panic into a *PanicError.
func safeNext(sch Schedule, t time.Time) (next time.Time, err error) {
	err = protect("Schedule.Next", func() error { next = sch.Next(t); return nil })
	return next, err
}

// first returns the job's first slot strictly after t, computed in the
// job's location. A panicking Schedule is reported once (Failed, with
// slot as the event's Slot) and breaks the job: first then returns the
// zero time (no further slot) and the job ends without another run.
func (s *Scheduler) first(j *job, t, slot time.Time) time.Time {
	if j.broken {
		return time.Time{}
	}
	next, err := safeNext(j.Schedule, t.In(j.loc))
	if err != nil {
		j.broken = true
		s.emit(Event{Job: j.Name, Slot: slot, Outcome: Failed, Err: err})
		return time.Time{}
	}
	return next
}

// after returns the slot that follows slot: the first one at least
// MinInterval after it (slots of a schedule closer than that are skipped),
// or the zero time, as first does.
func (s *Scheduler) after(j *job, slot time.Time) time.Time {
	return s.first(j, slot.Add(MinInterval-1), slot)
}

// loop runs one job until ctx ends or its schedule ends.
func (s *Scheduler) loop(ctx context.Context, j *job) {
	now := s.clk.Now()
	next := s.first(j, now, now)
	for !next.IsZero() {
		if !s.waitUntil(ctx, next) {
			return
		}
		// A late wake-up (a paused process, a slow run before) claims only
		// the latest slot that is due; the earlier ones are missed here.
		slot := s.skipPassed(j, next, s.clk.Now(), true)
		if slot.IsZero() || j.broken {
			return
		}
		if slot.After(s.clk.Now()) {
			next = slot // too far behind to walk every slot: wait for this one
			continue
		}
		s.runSlot(ctx, j, slot)
		if ctx.Err() != nil {
			return
		}
		// Slots that passed while the slot ran are skipped, not queued.
		next = s.skipPassed(j, s.after(j, slot), s.clk.Now(), false)
		if !next.IsZero() && !next.After(slot) {
			s.emit(Event{Job: j.Name, Slot: next, Outcome: Failed, Err: leaseapi.NewError("schedule", leaseapi.ErrInvalidState, "schedule went backwards")})
			return
		}
	}
}

// skipPassed walks from slot over the slots that are already past at now,
// reporting each as Missed. With due, the latest slot at or before now is
// returned (it is due); otherwise the first slot not before now.
func (s *Scheduler) skipPassed(j *job, slot, now time.Time, due bool) time.Time {
	for range maxCatchUp {
		if slot.IsZero() {
			return slot
		}
		n := slot
		if due {
			n = s.after(j, slot)
			if n.IsZero() || n.After(now) || !n.After(slot) {
				return slot
			}
		} else if !slot.Before(now) {
			return slot
		}
		s.emit(Event{Job: j.Name, Slot: slot, Outcome: Missed})
		if !due {
			n = s.after(j, slot)
			if !n.IsZero() && !n.After(slot) {
				return n // reported by loop
			}
		}
		slot = n
	}
	// Too far behind to report every slot: resume at the next one.
	return s.first(j, now, now)
}

// waitUntil waits on the scheduler's clock until t; false if ctx ended.
func (s *Scheduler) waitUntil(ctx context.Context, t time.Time) bool {
	for {
		d := t.Sub(s.clk.Now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		tm := s.clk.Timer(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return false
		}
	}
}

// slotKey is the key that decides who runs slot: the first grant ever
// made on it (token 1).
func (s *Scheduler) slotKey(j *job, slot time.Time) leaseapi.Key {
	k, _ := leaseapi.NewKey(s.ns, j.Name+"/slot/"+strconv.FormatInt(slot.UnixNano(), 10))
	return k // validated by Add
}

// runSlot claims slot and runs it if this server won it.
func (s *Scheduler) runSlot(ctx context.Context, j *job, slot time.Time) {
	ev := Event{Job: j.Name, Slot: slot}
	deadline := slot.Add(j.Policy.Wait())
	cleanup := context.WithoutCancel(ctx)
	// release gives h back and keeps the first failure for the event.
	release := func(h *runtime.Handle) {
		if err := h.Release(cleanup); err != nil && ev.ReleaseErr == nil {
			ev.ReleaseErr = err
		}
	}
	var run *runtime.Handle
	if j.Mode == NonOverlap {
		h, err := s.tryAcquire(ctx, j, slot, j.runKey, deadline)
		switch {
		case leaseapi.Kind(err) == leaseapi.ErrContended:
			ev.Outcome = Busy
			s.emit(ev)
			return
		case err != nil:
			ev.Outcome, ev.Err = Failed, err
			s.emit(ev)
			return
		}
		run = h
	}
	claim, err := s.tryAcquire(ctx, j, slot, s.slotKey(j, slot), deadline)
	if err == nil && claim.Token() != 1 {
		// Somebody claimed this slot before (and released it or let it
		// expire): the slot is theirs forever.
		release(claim)
		err = leaseapi.NewError("claim slot", leaseapi.ErrContended, "")
	}
	if err != nil {
		if run != nil {
			release(run)
		}
		ev.Outcome, ev.Err = Failed, err
		if leaseapi.Kind(err) == leaseapi.ErrContended {
			ev.Outcome, ev.Err = Taken, nil
		}
		s.emit(ev)
		return
	}
	if run == nil {
		run = claim // OnOneServer: the run holds the slot's lease
	} else {
		// NonOverlap: the slot is ours for good (token 1); the run holds the
		// job's lease, whose token orders all runs of the job.
		release(claim)
	}
	ev.Outcome, ev.Token = Ran, run.Token()
	var relErr error
	ev.Err, relErr = s.runUnder(ctx, j, run, slot)
	if relErr != nil {
		if ev.ReleaseErr == nil {
			ev.ReleaseErr = relErr
		}
		if ctx.Err() != nil { // Stop ended this run: Stop reports it
			s.mu.Lock()
			s.stopErrs = append(s.stopErrs, relErr)
			s.mu.Unlock()
		}
	}
	s.emit(ev)
}

// tryAcquire makes one acquisition attempt, repeated every Retry while the
// backend gives no reliable answer and the local clock is before deadline;
// each attempt that is retried is reported (Retrying).
func (s *Scheduler) tryAcquire(ctx context.Context, j *job, slot time.Time, k leaseapi.Key, deadline time.Time) (*runtime.Handle, error) {
	p := j.Policy
	for {
		h, err := s.c.TryAcquire(ctx, k, p)
		switch leaseapi.Kind(err) {
		case leaseapi.ErrBackendUnavailable, leaseapi.ErrAmbiguousOutcome:
		default:
			return h, err
		}
		pause := max(p.Retry(), time.Millisecond)
		if p.Retry() == 0 || !s.clk.Now().Add(pause).Before(deadline) {
			return nil, err
		}
		s.emit(Event{Job: j.Name, Slot: slot, Outcome: Retrying, Err: err})
		tm := s.clk.Timer(pause)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return nil, leaseapi.ContextError("claim slot", ctx.Err())
		}
	}
}

// runUnder runs j under h with managed renewal, cancels the run's ctx on
// loss, and then stops renewal and releases h. It returns the run's error
// and the release's. It starts one watcher goroutine that exits before
// runUnder returns.
func (s *Scheduler) runUnder(ctx context.Context, j *job, h *runtime.Handle, slot time.Time) (err, relErr error) {
	cleanup := context.WithoutCancel(ctx)
	m, err := h.StartManaged(ctx)
	if err != nil {
		return err, h.Release(cleanup)
	}
	err = s.runManaged(ctx, j, h, m, slot)
	_ = m.Stop(cleanup) // nil, or renewal had already ended
	return err, h.Release(cleanup)
}

// runManaged runs j under h while m renews it, with a ctx canceled on loss.
func (s *Scheduler) runManaged(ctx context.Context, j *job, h *runtime.Handle, m *runtime.Managed, slot time.Time) (err error) {
	rctx, cancel := context.WithCancelCause(context.WithValue(ctx, ctxKey{}, runInfo{slot: slot, h: h}))
	defer cancel(nil)
	stopWatch := lifecycle.WatchLoss(m.Loss(), lossErr, h.Done(), func() error {
		return leaseapi.NewError("run job", leaseapi.ErrLost, "lease ended")
	}, cancel)
	defer func() {
		if lost := stopWatch(); err == nil && lost != nil {
			err = leaseapi.NewError("run job", leaseapi.ErrLost, "lease ended while running")
		}
	}()
	return callJob(rctx, j.Run, h.Token())
}

// lossErr is the error a managed renewal's Loss carries.
func lossErr(l runtime.Loss) error { return l.Err }

// callJob calls run and turns a panic into a *PanicError.
func callJob(ctx context.Context, run func(context.Context, leaseapi.Token) error, token leaseapi.Token) error {
	return protect("", func() error { return run(ctx, token) })
}

// protect calls f and turns a panic into a *PanicError naming callback.
func protect(callback string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Callback: callback}
		}
	}()
	return f()
}
