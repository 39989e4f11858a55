package leaseapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

func TestNewKey(t *testing.T) {
	for _, tc := range []struct {
		name, ns, key string
		ok            bool
	}{
		{"simple", "jobs", "nightly", true},
		{"slashes in name", "jobs", "a/b/c", true},
		{"unicode", "jöbs", "naïve", true},
		{"max length", "n", strings.Repeat("k", leaseapi.MaxKeyBytes-2), true},
		{"empty namespace", "", "k", false},
		{"empty name", "n", "", false},
		{"slash in namespace", "a/b", "k", false},
		{"leading slash", "n", "/k", false},
		{"trailing slash", "n", "k/", false},
		{"double slash", "n", "a//b", false},
		{"control byte", "n", "a\x00b", false},
		{"newline", "n\n", "k", false},
		{"DEL", "n", "k\x7f", false},
		{"invalid utf-8", "n", "\xff\xfe", false},
		{"too long", "n", strings.Repeat("k", leaseapi.MaxKeyBytes-1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := leaseapi.NewKey(tc.ns, tc.key)
			if tc.ok {
				if err != nil {
					t.Fatalf("NewKey: got %v, want nil", err)
				}
				if k.Namespace() != tc.ns || k.Name() != tc.key || k.String() != tc.ns+"/"+tc.key {
					t.Fatalf("key parts: got %q %q %q", k.Namespace(), k.Name(), k.String())
				}
				back, err := leaseapi.ParseKey(k.String())
				if err != nil || back != k {
					t.Fatalf("ParseKey(String()): got (%v, %v), want the key", back, err)
				}
				return
			}
			if !errors.Is(err, leaseapi.ErrInvalidState) {
				t.Fatalf("NewKey: got %v, want ErrInvalidState", err)
			}
			if strings.Contains(err.Error(), tc.key) && tc.key != "" && len(tc.key) > 2 {
				t.Fatalf("error %q reveals the rejected name", err)
			}
		})
	}
	if _, err := leaseapi.ParseKey("no-slash"); !errors.Is(err, leaseapi.ErrInvalidState) {
		t.Fatalf("ParseKey without slash: got %v", err)
	}
	if err := (leaseapi.Key{}).Check(); !errors.Is(err, leaseapi.ErrInvalidState) {
		t.Fatalf("zero key Check: got %v", err)
	}
}

func TestErrorsMatchExactlyOneSentinel(t *testing.T) {
	sentinels := []error{leaseapi.ErrContended, leaseapi.ErrTimeout, leaseapi.ErrCanceled, leaseapi.ErrLost,
		leaseapi.ErrStaleOwner, leaseapi.ErrBackendUnavailable, leaseapi.ErrInvalidState, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrCapacity,
		leaseapi.ErrFencingRegression}
	var errs []error
	for _, s := range sentinels {
		errs = append(errs, leaseapi.NewError("op", s, "detail"), leaseapi.Wrap(s, "op"), leaseapi.Wrap(fmt.Errorf("ctx: %w", s), "op"))
	}
	errs = append(errs,
		leaseapi.Wrap(errors.New("dial tcp 10.0.0.1:6379: password=hunter2"), "op"),
		leaseapi.Wrap(context.Canceled, "op"),
		leaseapi.Wrap(fmt.Errorf("driver: %w", context.DeadlineExceeded), "op"),
		leaseapi.ContextError("op", context.DeadlineExceeded),
		leaseapi.LateError("op"),
	)
	for _, err := range errs {
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v matches %d sentinels, want 1", err, n)
		}
		if !strings.HasPrefix(err.Error(), "lease: op: ") {
			t.Errorf("%q lacks the redacted prefix", err)
		}
	}
	raw := leaseapi.Wrap(errors.New("dial tcp 10.0.0.1:6379: password=hunter2"), "renew")
	if !errors.Is(raw, leaseapi.ErrBackendUnavailable) || strings.Contains(raw.Error(), "hunter2") || strings.Contains(raw.Error(), "10.0.0.1") {
		t.Fatalf("raw error not redacted: %q", raw)
	}
	c := leaseapi.Wrap(context.Canceled, "op")
	if !errors.Is(c, context.Canceled) || !errors.Is(c, leaseapi.ErrCanceled) {
		t.Fatalf("canceled: %v", c)
	}
	d := leaseapi.Wrap(fmt.Errorf("x: %w", context.DeadlineExceeded), "op")
	if !errors.Is(d, context.DeadlineExceeded) || !errors.Is(d, leaseapi.ErrTimeout) {
		t.Fatalf("deadline: %v", d)
	}
	amb := leaseapi.Wrap(errors.Join(leaseapi.ErrAmbiguousOutcome, context.DeadlineExceeded), "op")
	if errors.Is(amb, context.DeadlineExceeded) {
		t.Fatalf("an ambiguous outcome must not pose as the caller's deadline: %v", amb)
	}
	late := leaseapi.LateError("renew")
	if !errors.Is(late, leaseapi.ErrBackendUnavailable) || late.Error() != "lease: renew: backend unavailable: not applied: ran past its deadline" {
		t.Fatalf("late: got %q, want a definite ErrBackendUnavailable saying not applied", late)
	}
	if leaseapi.Wrap(nil, "op") != nil || leaseapi.Kind(nil) != nil {
		t.Fatal("nil must stay nil")
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want leaseapi.Outcome
	}{
		{nil, leaseapi.OutcomeSuccess},
		{leaseapi.ErrContended, leaseapi.OutcomeContended},
		{leaseapi.ErrStaleOwner, leaseapi.OutcomeStale},
		{leaseapi.ErrAmbiguousOutcome, leaseapi.OutcomeAmbiguous},
		{context.DeadlineExceeded, leaseapi.OutcomeTimeout},
		{errors.New("raw"), leaseapi.OutcomeUnavailable},
	} {
		if got := leaseapi.OutcomeOf(tc.err); got != tc.want {
			t.Errorf("OutcomeOf(%v): got %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRecordLocalDeadline(t *testing.T) {
	type Record = leaseapi.Record
	p, _ := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second})
	t0 := time.Unix(100, 0)
	r := leaseapi.Record{AcquiredAt: t0, ExpiresAt: t0.Add(10 * time.Second)}
	sent := time.Unix(50, 0) // the local clock is unrelated to the backend's
	if got, want := r.LocalDeadline(sent, p), sent.Add(9*time.Second); !got.Equal(want) {
		t.Fatalf("LocalDeadline: got %v, want %v", got, want)
	}
	r.ExpiresAt = t0.Add(5 * time.Second) // granted less than asked
	if got, want := r.LocalDeadline(sent, p), sent.Add(4*time.Second); !got.Equal(want) {
		t.Fatalf("LocalDeadline with a shorter grant: got %v, want %v", got, want)
	}
	if !r.LocalUsableAt(sent.Add(4*time.Second-1), sent, p) || r.LocalUsableAt(sent.Add(4*time.Second), sent, p) {
		t.Fatal("LocalUsableAt must be true strictly before the deadline only")
	}
	// A broken record gives no trust, and never an overflowed deadline.
	for _, bad := range []Record{
		{AcquiredAt: t0, ExpiresAt: t0},                                      // zero granted TTL
		{AcquiredAt: t0, ExpiresAt: t0.Add(time.Second)},                     // not longer than the margin
		{AcquiredAt: t0.Add(time.Hour), ExpiresAt: t0},                       // expires before acquired
		{AcquiredAt: time.UnixMicro(1e16), ExpiresAt: time.UnixMicro(0)},     // ~317 years backwards
		{AcquiredAt: time.UnixMicro(-1e16), ExpiresAt: time.UnixMicro(1e16)}, // ~634 years forwards: capped by the TTL
	} {
		d := bad.LocalDeadline(sent, p)
		if d.After(sent.Add(p.TTL())) {
			t.Fatalf("LocalDeadline(%v..%v) = %v: beyond send + TTL", bad.AcquiredAt, bad.ExpiresAt, d)
		}
		if bad.GrantedTTL() <= p.SafetyMargin() && bad.LocalUsableAt(sent, sent, p) {
			t.Fatalf("a record granting %v is usable", bad.GrantedTTL())
		}
	}
}

func TestRecordSafeDeadline(t *testing.T) {
	t0 := time.Unix(100, 0)
	r := leaseapi.Record{AcquiredAt: t0, ExpiresAt: t0.Add(10 * time.Second)}
	for _, tc := range []struct {
		margin time.Duration
		want   time.Time
	}{
		{0, t0.Add(10 * time.Second)},
		{time.Second, t0.Add(9 * time.Second)},
		{-time.Second, t0.Add(10 * time.Second)}, // never past ExpiresAt
		{10 * time.Second, t0},                   // no trust, never before the grant
		{time.Hour, t0},
	} {
		if got := r.SafeDeadline(tc.margin); !got.Equal(tc.want) {
			t.Errorf("SafeDeadline(%v): got %v, want %v", tc.margin, got, tc.want)
		}
	}
	if !r.UsableAt(t0.Add(9*time.Second-1), time.Second) || r.UsableAt(t0.Add(9*time.Second), time.Second) {
		t.Fatal("UsableAt must be true strictly before SafeDeadline only")
	}
	if (leaseapi.Record{}).UsableAt(t0, 0) {
		t.Fatal("the zero record is usable")
	}
}

// TestReferenceValues pins the values the reference API defines, which
// callers may store, log or compare as numbers and strings.
func TestReferenceValues(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{string(leaseapi.OperationAcquire), "acquire"},
		{string(leaseapi.OperationRenew), "renew"},
		{string(leaseapi.OperationValidate), "validate"},
		{string(leaseapi.OperationRelease), "release"},
		{string(leaseapi.OutcomeSuccess), "success"},
		{string(leaseapi.OutcomeContended), "contended"},
		{string(leaseapi.OutcomeStale), "stale"},
		{string(leaseapi.OutcomeCanceled), "canceled"},
		{string(leaseapi.OutcomeUnavailable), "unavailable"},
		{string(leaseapi.OutcomeAmbiguous), "ambiguous"},
		{string(leaseapi.OutcomeInvalid), "invalid"},
		{leaseapi.OperationRenewBatch.String(), "renew-batch"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    leaseapi.State
		want uint8
	}{
		{leaseapi.StateActive, 1}, {leaseapi.StateExpired, 2}, {leaseapi.StateLost, 3},
		{leaseapi.StateUncertain, 4}, {leaseapi.StateReleased, 5},
	} {
		if uint8(tc.s) != tc.want {
			t.Errorf("%v: got %d, want %d", tc.s, uint8(tc.s), tc.want)
		}
	}
	if leaseapi.FailureFailClosed != 1 {
		t.Errorf("FailureFailClosed: got %d, want 1", leaseapi.FailureFailClosed)
	}
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second})
	if err != nil || p.FailureBehavior() != leaseapi.FailureFailClosed {
		t.Fatalf("the zero FailureBehavior: got %v (%v), want fail-closed", p.FailureBehavior(), err)
	}
	if _, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, FailureBehavior: 2}); !errors.Is(err, leaseapi.ErrInvalidState) {
		t.Fatalf("an unknown FailureBehavior: got %v, want ErrInvalidState", err)
	}
}

func TestStateFailsClosed(t *testing.T) {
	var zero leaseapi.State
	if zero == leaseapi.StateActive || zero.String() != "invalid" {
		t.Fatal("the zero State must not be Active")
	}
	for _, s := range []leaseapi.State{leaseapi.StateExpired, leaseapi.StateLost, leaseapi.StateReleased} {
		if !s.Terminal() {
			t.Errorf("%v must be terminal", s)
		}
	}
	if leaseapi.StateActive.Terminal() || leaseapi.StateUncertain.Terminal() {
		t.Error("active and uncertain are not terminal")
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"a/b", "a/b/c", "/b", "a/", "a//b", "\x00/\xff", "jöbs/naïve"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := leaseapi.ParseKey(s)
		if err != nil {
			if !errors.Is(err, leaseapi.ErrInvalidState) {
				t.Fatalf("ParseKey error %v is not ErrInvalidState", err)
			}
			return
		}
		if k.String() != s || len(s) > leaseapi.MaxKeyBytes || strings.IndexByte(k.Namespace(), '/') >= 0 {
			t.Fatalf("ParseKey(%q) accepted an invalid key", s)
		}
	})
}
