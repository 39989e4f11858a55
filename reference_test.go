package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasekit/lease"
	"github.com/leasekit/lease/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// referenceFiveMinuteStart is the reference API's five-minute start,
// verbatim but for gofmt's line breaks: it must compile and run against
// this package with only the backend's construction changed (the caller
// makes the client).
func referenceFiveMinuteStart(ctx context.Context, client *lease.Client, key lease.Key, protectedWrite func(context.Context, lease.Token) error) error {
	policy, err := lease.NewPolicy(lease.PolicyOptions{
		TTL: 30 * time.Second, RenewEvery: 10 * time.Second,
		SafetyMargin: 5 * time.Second, Retry: 100 * time.Millisecond,
		Wait: 2 * time.Second, MaxAttempts: 20,
		OperationTimeout: 2 * time.Second,
	})
	handle, err := client.Acquire(ctx, key, policy)
	if err != nil {
		return err
	}
	managed, err := handle.StartManaged(ctx)
	if err != nil {
		return err
	}
	defer managed.Stop(context.WithoutCancel(ctx))
	defer handle.Release(context.WithoutCancel(ctx))

	if err := protectedWrite(ctx, handle.Token()); err != nil {
		return err
	}
	return nil
}

func TestReferenceFiveMinuteStart(t *testing.T) {
	ctx := t.Context()
	store, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.WithoutCancel(ctx))
	key, err := lease.NewKey("reference", "five-minute-start")
	if err != nil {
		t.Fatal(err)
	}
	var wrote []lease.Token
	write := func(_ context.Context, token lease.Token) error {
		wrote = append(wrote, token)
		return nil
	}
	for range 2 {
		if err := referenceFiveMinuteStart(ctx, client, key, write); err != nil {
			t.Fatalf("five-minute start: %v", err)
		}
	}
	// Each run held the lease for its write and released it: the second
	// acquired at once with the next token.
	if len(wrote) != 2 || wrote[0] != 1 || wrote[1] != 2 {
		t.Fatalf("protected writes: got tokens %v, want [1 2]", wrote)
	}
	if _, held, err := store.Inspect(ctx, key); err != nil || held {
		t.Fatalf("after the runs: held %v (%v), want released", held, err)
	}

	// A protected write that fails is returned, and the lease is released.
	boom := errors.New("write refused")
	err = referenceFiveMinuteStart(ctx, client, key, func(context.Context, lease.Token) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("failing write: got %v, want the write's error", err)
	}
	if _, held, err := store.Inspect(ctx, key); err != nil || held {
		t.Fatalf("after the failing write: held %v (%v), want released", held, err)
	}
}

// referenceBackend is a backend written against the reference's Backend
// interface (the four methods), delegating to the memory store: what
// acceptance checks plug in.
type referenceBackend struct{ s *memory.Store }

func (b referenceBackend) TryAcquire(ctx context.Context, key lease.Key, owner string, ttl time.Duration) (lease.Record, error) {
	return b.s.TryAcquire(ctx, key, owner, ttl)
}

func (b referenceBackend) Renew(ctx context.Context, rec lease.Record, ttl time.Duration) (lease.Record, error) {
	return b.s.Renew(ctx, rec, ttl)
}

func (b referenceBackend) Validate(ctx context.Context, rec lease.Record) (lease.Record, error) {
	return b.s.Validate(ctx, rec)
}

func (b referenceBackend) Release(ctx context.Context, rec lease.Record) error {
	return b.s.Release(ctx, rec)
}

func TestReferenceBackend(t *testing.T) {
	store, _ := memory.New(memory.Options{})
	client, err := lease.NewClient(referenceBackend{store}, lease.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	policy, _ := lease.NewPolicy(lease.PolicyOptions{TTL: 10 * time.Second})
	h, err := client.TryAcquire(t.Context(), lease.MustKey("reference", "backend"), policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Validate(t.Context()); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if err := h.Renew(t.Context()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := h.Release(t.Context()); err != nil || h.State() != lease.StateReleased {
		t.Fatalf("Release: %v, state %v", err, h.State())
	}
}

// The reference API's identifiers with the reference's types: this file
// fails to compile if one is missing or has another signature. Differences
// on purpose (ClientOptions.Clock, Sleeper) are in docs/reference-api.md.
var (
	_ uint32 = lease.MaxClientWaiters
	_ uint32 = lease.MaxClientManaged
	_ uint32 = lease.MaxAttempts

	_ time.Duration = lease.MaxTTL
	_ time.Duration = lease.MaxWait
	_ time.Duration = lease.MaxOperationTimeout
	_ int           = lease.MaxKeyBytes

	_ []error = []error{
		lease.ErrContended, lease.ErrTimeout, lease.ErrCanceled, lease.ErrLost, lease.ErrStaleOwner,
		lease.ErrBackendUnavailable, lease.ErrInvalidState, lease.ErrAmbiguousOutcome,
	}

	_ func(error, string) error = lease.Wrap

	_ func(lease.Backend, lease.Clock, ...lease.Observer) (lease.Backend, error) = lease.NewObservedBackend
	_ func(lease.Backend, lease.ClientOptions) (*lease.Client, error)            = lease.NewClient

	_ func(*lease.Client, context.Context, lease.Key, lease.Policy) (*lease.Handle, error) = (*lease.Client).Acquire
	_ func(*lease.Client, context.Context, lease.Key, lease.Policy) (*lease.Handle, error) = (*lease.Client).TryAcquire

	_ = lease.ClientOptions{
		Owners:     lease.OwnerSource(nil),
		Sleeper:    lease.Sleeper(nil),
		Retry:      lease.RetrySource(nil),
		MaxWaiters: uint32(0),
		MaxManaged: uint32(0),
	}
	_ func(lease.Clock) time.Time = lease.Clock.Now

	_                          = lease.Event{At: time.Time{}, Operation: lease.Operation(""), Outcome: lease.Outcome(""), KeyHash: ""}
	_ func(lease.Event) string = lease.Event.String

	_ lease.FailureBehavior = lease.FailureFailClosed

	_ func(*lease.Handle) time.Time                                = (*lease.Handle).AcquiredAt
	_ func(*lease.Handle) time.Time                                = (*lease.Handle).Deadline
	_ func(*lease.Handle) string                                   = (*lease.Handle).Owner
	_ func(*lease.Handle, context.Context) error                   = (*lease.Handle).Release
	_ func(*lease.Handle, context.Context) error                   = (*lease.Handle).Renew
	_ func(*lease.Handle) lease.Record                             = (*lease.Handle).Snapshot
	_ func(*lease.Handle, context.Context) (*lease.Managed, error) = (*lease.Handle).StartManaged
	_ func(*lease.Handle) lease.State                              = (*lease.Handle).State
	_ func(*lease.Handle) lease.Token                              = (*lease.Handle).Token
	_ func(*lease.Handle, context.Context) error                   = (*lease.Handle).Validate

	_ func(string, string) (lease.Key, error) = lease.NewKey
	_ func(string) (lease.Key, error)         = lease.ParseKey
	_ func(lease.Key) string                  = lease.Key.String

	_ = lease.Loss{At: time.Time{}, State: lease.State(0), Err: error(nil)}

	_ func(*lease.Managed) <-chan lease.Loss               = (*lease.Managed).Loss
	_ func(*lease.Managed, context.Context) error          = (*lease.Managed).Stop
	_ func(lease.Observer, lease.Event)                    = lease.Observer.Observe
	_ func(lease.ObserverFunc, lease.Event)                = lease.ObserverFunc.Observe
	_ func(lease.OwnerSource) (string, error)              = lease.OwnerSource.NewOwner
	_ func(lease.RetrySource, time.Duration) time.Duration = lease.RetrySource.Jitter

	_ []lease.Operation = []lease.Operation{lease.OperationAcquire, lease.OperationRenew, lease.OperationValidate, lease.OperationRelease}
	_ []lease.Outcome   = []lease.Outcome{
		lease.OutcomeSuccess, lease.OutcomeContended, lease.OutcomeStale, lease.OutcomeCanceled,
		lease.OutcomeUnavailable, lease.OutcomeAmbiguous, lease.OutcomeInvalid,
	}

	_ func(lease.PolicyOptions) (lease.Policy, error)   = lease.NewPolicy
	_ func(lease.Policy) lease.FailureBehavior          = lease.Policy.FailureBehavior
	_ func(lease.Policy) time.Duration                  = lease.Policy.Jitter
	_ func(lease.Policy) uint32                         = lease.Policy.MaxAttempts
	_ func(lease.Policy) time.Duration                  = lease.Policy.OperationTimeout
	_ func(lease.Policy) time.Duration                  = lease.Policy.RenewEvery
	_ func(lease.Policy) time.Duration                  = lease.Policy.Retry
	_ func(lease.Policy) time.Duration                  = lease.Policy.SafetyMargin
	_ func(lease.Policy) time.Duration                  = lease.Policy.TTL
	_ func(lease.Policy) time.Duration                  = lease.Policy.Wait
	_                                                   = lease.PolicyOptions{TTL: 0, Wait: 0, Retry: 0, Jitter: 0, RenewEvery: 0, SafetyMargin: 0, MaxAttempts: uint32(0), OperationTimeout: 0, FailureBehavior: lease.FailureBehavior(0)}
	_                                                   = lease.Record{Key: lease.Key{}, Owner: "", Token: lease.Token(0), AcquiredAt: time.Time{}, ExpiresAt: time.Time{}}
	_ func(lease.Record, time.Duration) time.Time       = lease.Record.SafeDeadline
	_ func(lease.Record, time.Time, time.Duration) bool = lease.Record.UsableAt

	_ []lease.State            = []lease.State{lease.StateActive, lease.StateExpired, lease.StateLost, lease.StateUncertain, lease.StateReleased}
	_ func(lease.State) string = lease.State.String
	_ uint64                   = uint64(lease.Token(0))
	_ uint8                    = uint8(lease.State(0))
	_ uint8                    = uint8(lease.FailureBehavior(0))
	_ string                   = string(lease.Operation(""))
	_ string                   = string(lease.Outcome(""))
)

// TestReferenceValues: the values the reference defines, through the root
// package.
func TestReferenceValues(t *testing.T) {
	if lease.StateActive != 1 || lease.StateExpired != 2 || lease.StateLost != 3 || lease.StateUncertain != 4 || lease.StateReleased != 5 {
		t.Error("State values differ from the reference's")
	}
	if lease.FailureFailClosed != 1 {
		t.Error("FailureFailClosed differs from the reference's")
	}
	if lease.OperationAcquire != "acquire" || lease.OutcomeSuccess != "success" || lease.OutcomeUnavailable != "unavailable" {
		t.Error("Operation or Outcome values differ from the reference's")
	}
	if lease.MaxClientWaiters != 1_000_000 || lease.MaxClientManaged != 100_000 || lease.MaxAttempts != 10_000 ||
		lease.MaxTTL != 24*time.Hour || lease.MaxWait != time.Hour || lease.MaxOperationTimeout != time.Minute || lease.MaxKeyBytes != 256 {
		t.Error("bounds differ from the reference's")
	}
}
