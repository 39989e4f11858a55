package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/lifecycle"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// Options configures a [Singleton]. New copies it; the value is not kept.
// The callbacks are called from the campaign goroutine, one at a time.
type Options struct {
	// Key is the leadership lease's key; every candidate uses the same one.
	// Required.
	Key leaseapi.Key
	// Policy is the lease policy. Its Wait bounds one campaign (one
	// Acquire, which wakes early on a release notification); its TTL and
	// SafetyMargin bound how long a crashed leader blocks the others.
	// Required.
	Policy leaseapi.Policy
	// Run is the leader's work. It runs while this candidate leads, with a
	// ctx that is canceled when the lease is lost or expires (context.Cause
	// says why) and when the Singleton stops; h is the lease (h.Token() is
	// the fencing token of this term). It should return when ctx is done;
	// if it returns earlier the candidate steps down (releases the lease)
	// and campaigns again after Backoff. Required.
	Run func(ctx context.Context, h *runtime.Handle) error
	// OnStartedLeading, if set, is called with the term's token when this
	// candidate becomes leader, just before Run, on the campaign goroutine.
	OnStartedLeading func(token leaseapi.Token)
	// OnStoppedLeading, if set, is called after a term ends (Run returned,
	// renewal stopped, the release returned — successful or not, see
	// OnError and Stop — or the lease lost), on the campaign goroutine,
	// whatever ended it — loss, Run's return or Stop.
	OnStoppedLeading func()
	// OnError, if set, receives what ended a term (Run's error, a
	// *PanicError, an ErrLost error, the release's error) and every
	// campaign failure other than contention and a Wait exhausted on a
	// healthy leader (backend unavailable or misconfigured, ambiguous,
	// capacity, a closed client). It is called on the campaign goroutine.
	// A panic in it is recovered and dropped.
	OnError func(err error)
	// Backoff is the least time between the starts of two campaigns, and
	// the pause after a term ends. Zero means Policy.Retry, or
	// Policy.RenewEvery if Retry is zero. Negative is invalid.
	Backoff time.Duration
	// Clock drives the backoff. Nil is the real clock.
	Clock clock.Clock
}

// Singleton runs a function on exactly one candidate of a fleet at a time:
// leader election on one lease. Build it with [New]; drive it either with
// Start and Stop (uber-go/fx OnStart/OnStop hooks) or with Serve (a
// thejerf/suture Service). It is safe for concurrent use. The zero
// Singleton (and a nil *Singleton) is not usable: Start, Serve and Stop
// return ErrInvalidState and Leading reports false. It does not own
// the client: close it after Stop. A client closed under a running
// Singleton fails every campaign (reported through OnError, matching
// ErrInvalidState) until Stop.
type Singleton struct {
	c       *runtime.Client
	o       Options
	clk     clock.Clock
	backoff time.Duration
	// probe is Policy with Wait zero: one attempt, whose error tells a
	// failing backend from a held lease before a campaign waits. Equal to
	// Policy when Policy.Wait is zero (waits is false).
	probe leaseapi.Policy
	waits bool

	// mu guards stopErr: the release error of the term that Stop (or the
	// end of Serve's ctx) ended, returned by Stop and Serve.
	mu      sync.Mutex
	stopErr error

	// leader is the current term's token, 0 when not leading.
	leader atomic.Uint64

	// life is canceled by Stop; it ends the loop whoever runs it.
	life       context.Context
	cancelLife context.CancelFunc

	// run runs the loop, on the goroutine Start spawns or in a Serve call;
	// Stop waits on the channel it returns.
	run lifecycle.Life
}

// New returns a Singleton campaigning through client. It does no I/O and
// starts nothing. A nil client, a zero key or policy, a nil Run or a
// negative Backoff is ErrInvalidState.
func New(client *runtime.Client, o Options) (*Singleton, error) {
	const op = "new singleton"
	bad := func(detail string) (*Singleton, error) {
		return nil, leaseapi.NewError(op, leaseapi.ErrInvalidState, detail)
	}
	switch {
	case client == nil:
		return bad("nil client")
	case o.Key.IsZero():
		return bad("zero key")
	case o.Policy.Check() != nil:
		return bad("zero policy")
	case o.Run == nil:
		return bad("nil run")
	case o.Backoff < 0:
		return bad("negative backoff")
	}
	s := &Singleton{c: client, o: o, clk: o.Clock, backoff: o.Backoff, probe: o.Policy}
	if o.Policy.Wait() > 0 {
		po := o.Policy.Options()
		po.Wait = 0
		if p, err := leaseapi.NewPolicy(po); err == nil {
			s.probe, s.waits = p, true
		}
	}
	if s.clk == nil {
		s.clk = clock.New()
	}
	if s.backoff == 0 {
		s.backoff = o.Policy.Retry()
		if s.backoff == 0 {
			s.backoff = o.Policy.RenewEvery()
		}
	}
	s.life, s.cancelLife = context.WithCancel(context.Background())
	return s, nil
}

// Leading returns the current term's token and true while this candidate
// is leader (from just before OnStartedLeading until Run returns). It
// does no I/O; Run should still check its handle's State before
// protected actions and fence them with the token.
func (s *Singleton) Leading() (leaseapi.Token, bool) {
	if s == nil {
		return 0, false
	}
	t := leaseapi.Token(s.leader.Load())
	return t, t != 0
}

// Start starts campaigning on a new goroutine and returns at once (an
// uber-go/fx OnStart hook). The goroutine exits when Stop is called, after
// the current term (if any) has ended: Run returned, renewal stopped and
// the release returned; a goroutine waiting for it exits right after. ctx is
// only checked: the campaign does not depend on it. A nil ctx, a second
// Start, a Start while Serve runs, or a Start after Stop is
// ErrInvalidState; a done ctx is ErrCanceled/ErrTimeout.
func (s *Singleton) Start(ctx context.Context) error {
	const op = "start singleton"
	if !s.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	if err := ctx.Err(); err != nil {
		return leaseapi.ContextError(op, err)
	}
	if !s.run.Start(func() { s.loop(s.life) }) {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "already running or stopped")
	}
	return nil
}

// Serve campaigns and leads on the caller's goroutine until ctx is done or
// Stop is called (a thejerf/suture Service). When it returns the current
// term has ended: Run returned, renewal stopped and the release returned.
// It returns the release's error when that last release failed (as Stop
// does), otherwise an error matching ErrCanceled or ErrTimeout (and ctx's
// error) when ctx ended, and nil when Stop ended it. Serve may be called again
// after it returned (a supervisor restarting it), but not while Start's
// loop or another Serve runs, nor after Stop: those are ErrInvalidState.
func (s *Singleton) Serve(ctx context.Context) error {
	const op = "serve singleton"
	if !s.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	served := s.run.Serve(func() {
		s.mu.Lock()
		s.stopErr = nil // a previous Serve's release is not this one's
		s.mu.Unlock()
		lctx, cancel := context.WithCancel(ctx)
		stopOnStop := context.AfterFunc(s.life, cancel)
		s.loop(lctx)
		stopOnStop()
		cancel()
	})
	if !served {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "already running or stopped")
	}
	if err := s.releaseErr(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && s.life.Err() == nil {
		return leaseapi.ContextError(op, err)
	}
	return nil
}

// Stop stops campaigning for good (an uber-go/fx OnStop hook): it cancels
// the running term's ctx, waits until Run has returned, renewal has
// stopped and the release of the lease has returned, and until the
// campaign loop has exited, whether Start or Serve runs it. It returns nil
// only when the lease was released (another candidate can take over at
// once, not after the TTL) or was not held; when the release failed or
// could not be confirmed it returns the release's error (as
// runtime.Client.Run reports it), matching ErrBackendUnavailable (the
// lease is still held) or ErrAmbiguousOutcome (it may be), and the lease
// ends at its TTL: Stop never reports a release it could not confirm. ctx bounds the wait:
// if it ends first Stop returns ErrCanceled/ErrTimeout and the loop keeps
// winding down (a later Stop waits again). Idempotent (a later Stop
// returns the same release error); a nil ctx, or a Singleton not built by
// New, is ErrInvalidState. After Stop, Start and Serve are
// ErrInvalidState.
func (s *Singleton) Stop(ctx context.Context) error {
	const op = "stop singleton"
	if !s.built() {
		return errNotBuilt(op)
	}
	if ctx == nil {
		return leaseapi.NewError(op, leaseapi.ErrInvalidState, "nil context")
	}
	done := s.run.Stop()
	s.cancelLife()
	if err := lifecycle.Wait(ctx, done); err != nil {
		return leaseapi.ContextError(op, err)
	}
	return s.releaseErr()
}

// built reports whether s was made by New.
func (s *Singleton) built() bool { return s != nil && s.c != nil }

func errNotBuilt(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "singleton not built by New")
}

// releaseErr returns the release error of the term that stopping ended.
func (s *Singleton) releaseErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopErr
}

// releasePart returns what of Run's error err is not fn's own error fnErr
// and reports a release that failed: the parts matching
// ErrBackendUnavailable or ErrAmbiguousOutcome (Run joins the release's
// error with fn's, or with a loss). nil when the release succeeded.
func releasePart(err, fnErr error) error {
	if err == nil || err == fnErr {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := j.Unwrap()
		if len(parts) > 1 || !isReleaseFailure(err) {
			var out []error
			for _, e := range parts {
				if r := releasePart(e, fnErr); r != nil {
					out = append(out, r)
				}
			}
			return errors.Join(out...)
		}
	}
	if isReleaseFailure(err) {
		return err
	}
	return nil
}

// isReleaseFailure reports whether err is of a kind a failed release has.
func isReleaseFailure(err error) bool {
	switch leaseapi.Kind(err) {
	case leaseapi.ErrBackendUnavailable, leaseapi.ErrAmbiguousOutcome:
		return true
	}
	return false
}

// loop campaigns, leads, steps down and campaigns again until ctx ends.
//
// A campaign first makes one attempt (the probe policy, Wait zero), whose
// error is reported unless the key is held; only when it is held does the
// campaign wait for it (Policy.Wait, waking on a release notification).
// So a backend that fails every attempt (down, a wrong password, a missing
// schema) is reported once per campaign instead of hiding behind an
// exhausted Wait.
func (s *Singleton) loop(ctx context.Context) {
	for ctx.Err() == nil {
		began := s.clk.Now()
		led := false
		var fnErr error
		fn := func(rctx context.Context, h *runtime.Handle) error {
			led = true
			s.leader.Store(uint64(h.Token()))
			defer s.leader.Store(0)
			fnErr = s.lead(rctx, h)
			return fnErr
		}
		err := s.c.Run(ctx, s.o.Key, s.probe, fn)
		waited := false
		if !led && s.waits && leaseapi.Kind(err) == leaseapi.ErrContended && ctx.Err() == nil {
			waited = true
			err = s.c.Run(ctx, s.o.Key, s.o.Policy, fn)
		}
		if led && s.o.OnStoppedLeading != nil {
			s.report(protect(func() error { s.o.OnStoppedLeading(); return nil }))
		}
		if ctx.Err() != nil {
			if rel := releasePart(err, fnErr); led && rel != nil {
				s.mu.Lock()
				s.stopErr = rel
				s.mu.Unlock()
				s.report(rel)
			}
			return
		}
		pause := s.backoff
		if led {
			s.report(err)
		} else {
			switch k := leaseapi.Kind(err); {
			case k == leaseapi.ErrContended, k == leaseapi.ErrTimeout && waited:
				// Held by a healthy leader: the probe just said so.
			default:
				s.report(err)
			}
			// A campaign that waited already paced itself.
			pause -= s.clk.Now().Sub(began)
		}
		if pause > 0 {
			tm := s.clk.Timer(pause)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return
			}
		}
	}
}

// lead runs one term: OnStartedLeading, then Run, panics recovered.
func (s *Singleton) lead(ctx context.Context, h *runtime.Handle) error {
	if s.o.OnStartedLeading != nil {
		if err := protect(func() error { s.o.OnStartedLeading(h.Token()); return nil }); err != nil {
			return err
		}
	}
	return protect(func() error { return s.o.Run(ctx, h) })
}

func (s *Singleton) report(err error) {
	if err != nil && s.o.OnError != nil {
		_ = protect(func() error { s.o.OnError(err); return nil })
	}
}

// protect calls f and turns a panic into a *PanicError.
func protect(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
		}
	}()
	return f()
}
