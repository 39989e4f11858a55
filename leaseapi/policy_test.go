package leaseapi_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// checkPolicy fails t unless p obeys every rule documented on
// PolicyOptions, keeps every field of in that was set, and round-trips
// through Options.
func checkPolicy(t *testing.T, in leaseapi.PolicyOptions, p leaseapi.Policy) {
	t.Helper()
	if err := p.Check(); err != nil {
		t.Fatalf("accepted policy fails Check: %v", err)
	}
	o := p.Options()
	trust := o.TTL - o.SafetyMargin
	for _, rule := range []struct {
		name string
		ok   bool
	}{
		{"1ms <= TTL <= MaxTTL", o.TTL >= time.Millisecond && o.TTL <= leaseapi.MaxTTL},
		{"0 < SafetyMargin < TTL", o.SafetyMargin > 0 && o.SafetyMargin < o.TTL},
		{"TTL - SafetyMargin >= 1µs", trust >= time.Microsecond},
		{"0 < RenewEvery < TTL - SafetyMargin", o.RenewEvery > 0 && o.RenewEvery < trust},
		{"0 <= Wait <= MaxWait", o.Wait >= 0 && o.Wait <= leaseapi.MaxWait},
		{"Wait > 0 needs Retry > 0", o.Wait == 0 || o.Retry > 0},
		{"0 <= Retry <= MaxWait", o.Retry >= 0 && o.Retry <= leaseapi.MaxWait},
		{"Retry < TTL - SafetyMargin", o.Retry < trust},
		{"0 <= Jitter <= MaxWait", o.Jitter >= 0 && o.Jitter <= leaseapi.MaxWait},
		{"1 <= MaxAttempts <= MaxAttempts", o.MaxAttempts >= 1 && o.MaxAttempts <= leaseapi.MaxAttempts},
		{"0 < OperationTimeout <= MaxOperationTimeout", o.OperationTimeout > 0 && o.OperationTimeout <= leaseapi.MaxOperationTimeout},
		{"OperationTimeout < TTL - SafetyMargin", o.OperationTimeout < trust},
		{"FailureBehavior is fail-closed", o.FailureBehavior == leaseapi.FailureFailClosed},
		{"RenewRetry > 0", p.RenewRetry() > 0},
		{"the getters read the options", p.TTL() == o.TTL && p.SafetyMargin() == o.SafetyMargin && p.RenewEvery() == o.RenewEvery &&
			p.Wait() == o.Wait && p.Retry() == o.Retry && p.Jitter() == o.Jitter && p.MaxAttempts() == o.MaxAttempts &&
			p.OperationTimeout() == o.OperationTimeout && p.FailureBehavior() == o.FailureBehavior},
		{"set fields are kept", o.TTL == in.TTL && (in.SafetyMargin == 0 || o.SafetyMargin == in.SafetyMargin) &&
			(in.RenewEvery == 0 || o.RenewEvery == in.RenewEvery) && o.Wait == in.Wait && o.Retry == in.Retry &&
			o.Jitter == in.Jitter && (in.MaxAttempts == 0 || o.MaxAttempts == in.MaxAttempts) &&
			(in.OperationTimeout == 0 || o.OperationTimeout == in.OperationTimeout)},
	} {
		if !rule.ok {
			t.Fatalf("NewPolicy(%+v) accepted %+v, which breaks %s", in, o, rule.name)
		}
	}
	again, err := leaseapi.NewPolicy(o)
	if err != nil {
		t.Fatalf("NewPolicy(%+v).Options() = %+v is rejected: %v", in, o, err)
	}
	if again != p {
		t.Fatalf("NewPolicy(Options()) = %+v, want %+v", again.Options(), o)
	}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, leaseapi.ErrInvalidState) || leaseapi.Kind(err) != leaseapi.ErrInvalidState {
		t.Fatalf("%s: got %v, want exactly ErrInvalidState", what, err)
	}
}

// TestNewPolicyFindings holds the inputs found from outside the project,
// each with its answer.
func TestNewPolicyFindings(t *testing.T) {
	// Accepted with RenewEvery = OperationTimeout = 1ns = TTL - margin, and
	// its Options rejected: now rejected at once.
	_, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: time.Second - time.Nanosecond})
	wantInvalid(t, "a margin leaving 1ns of the TTL", err)
	// The smallest window that is accepted obeys its own rules.
	in := leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: time.Second - time.Microsecond}
	p, err := leaseapi.NewPolicy(in)
	if err != nil {
		t.Fatalf("a margin leaving 1µs: %v", err)
	}
	checkPolicy(t, in, p)

	// Retry near math.MaxInt64 overflowed the acquisition pause.
	_, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, Retry: math.MaxInt64, Jitter: time.Second, Wait: time.Second})
	wantInvalid(t, "Retry near MaxInt64", err)
	_, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 2 * leaseapi.MaxWait, Retry: leaseapi.MaxWait + 1, Wait: time.Second})
	wantInvalid(t, "Retry over MaxWait", err)
	_, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, Retry: time.Millisecond, Jitter: math.MaxInt64, Wait: time.Second})
	wantInvalid(t, "Jitter near MaxInt64", err)
	_, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: time.Second, Retry: time.Millisecond, Jitter: leaseapi.MaxWait + 1, Wait: time.Second})
	wantInvalid(t, "Jitter over MaxWait", err)
	in = leaseapi.PolicyOptions{TTL: time.Second, Retry: time.Millisecond, Jitter: leaseapi.MaxWait, Wait: leaseapi.MaxWait}
	if p, err = leaseapi.NewPolicy(in); err != nil {
		t.Fatalf("Jitter = Wait = MaxWait: %v", err)
	}
	checkPolicy(t, in, p)

	// A Retry as long as the trust window is the renewal retry too: one
	// failed renewal could never be retried before the deadline.
	_, err = leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: 9 * time.Second, Wait: time.Minute})
	wantInvalid(t, "Retry = TTL - margin", err)
	in = leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: 9*time.Second - 1, Wait: time.Minute}
	if p, err = leaseapi.NewPolicy(in); err != nil {
		t.Fatalf("Retry just under TTL - margin: %v", err)
	}
	checkPolicy(t, in, p)
}

func TestNewPolicyDefaultsRoundTrip(t *testing.T) {
	for _, in := range []leaseapi.PolicyOptions{
		{TTL: time.Millisecond},
		{TTL: time.Second},
		{TTL: 30 * time.Second, RenewEvery: 10 * time.Second, SafetyMargin: 5 * time.Second, Retry: 100 * time.Millisecond, Wait: 2 * time.Second, MaxAttempts: 20, OperationTimeout: 2 * time.Second},
		{TTL: leaseapi.MaxTTL},
		{TTL: leaseapi.MaxTTL, SafetyMargin: 1, Retry: leaseapi.MaxWait, Jitter: leaseapi.MaxWait, Wait: leaseapi.MaxWait, MaxAttempts: leaseapi.MaxAttempts, OperationTimeout: leaseapi.MaxOperationTimeout, FailureBehavior: leaseapi.FailureFailClosed},
	} {
		p, err := leaseapi.NewPolicy(in)
		if err != nil {
			t.Fatalf("NewPolicy(%+v): %v", in, err)
		}
		checkPolicy(t, in, p)
	}
}

// FuzzNewPolicy: every accepted policy obeys every documented rule and
// round-trips through Options; every rejection is ErrInvalidState only; no
// input panics.
func FuzzNewPolicy(f *testing.F) {
	ms, s := int64(time.Millisecond), int64(time.Second)
	for _, seed := range [][9]int64{
		{s},
		{ms},
		{30 * s, 0, 0, 0, 0, 0, 0, 0, 0},
		{30 * s, 5 * s, 10 * s, 2 * s, 100 * ms, 0, 20, 2 * s, 1},
		{s, s - 1},
		{s, s - 1000},
		{s, 0, 0, s, math.MaxInt64, s},
		{s, 0, 0, s, ms, math.MaxInt64},
		{10 * s, s, 0, 60 * s, 9 * s},
		{int64(leaseapi.MaxTTL), 1, 0, int64(leaseapi.MaxWait), int64(leaseapi.MaxWait), int64(leaseapi.MaxWait), int64(leaseapi.MaxAttempts), int64(leaseapi.MaxOperationTimeout), 1},
		{-1, -1, -1, -1, -1, -1, -1, -1, -1},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, 255},
		{math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, 0, math.MinInt64, 0},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], uint32(seed[6]), seed[7], uint8(seed[8]))
	}
	f.Fuzz(func(t *testing.T, ttl, margin, renew, wait, retry, jitter int64, attempts uint32, opTimeout int64, fb uint8) {
		in := leaseapi.PolicyOptions{
			TTL: time.Duration(ttl), SafetyMargin: time.Duration(margin), RenewEvery: time.Duration(renew),
			Wait: time.Duration(wait), Retry: time.Duration(retry), Jitter: time.Duration(jitter),
			MaxAttempts: attempts, OperationTimeout: time.Duration(opTimeout), FailureBehavior: leaseapi.FailureBehavior(fb),
		}
		// The raw values (mostly out of range) and the same values folded
		// into the ranges NewPolicy accepts (mostly accepted, near the
		// bounds), so both sides of every rule are explored.
		fold := func(v int64, n time.Duration) time.Duration {
			if v < 0 {
				v = -(v + 1)
			}
			return time.Duration(v % int64(n+2))
		}
		folded := leaseapi.PolicyOptions{
			TTL: fold(ttl, leaseapi.MaxTTL), SafetyMargin: fold(margin, time.Duration(max(ttl, 0)%int64(leaseapi.MaxTTL+1))),
			RenewEvery: fold(renew, leaseapi.MaxTTL), Wait: fold(wait, leaseapi.MaxWait), Retry: fold(retry, leaseapi.MaxWait),
			Jitter: fold(jitter, leaseapi.MaxWait), MaxAttempts: attempts % (leaseapi.MaxAttempts + 2),
			OperationTimeout: fold(opTimeout, leaseapi.MaxOperationTimeout), FailureBehavior: leaseapi.FailureBehavior(fb % 3),
		}
		for _, in := range []leaseapi.PolicyOptions{in, folded} {
			p, err := leaseapi.NewPolicy(in)
			if err != nil {
				wantInvalid(t, "NewPolicy", err)
				if p != (leaseapi.Policy{}) {
					t.Fatalf("a rejected policy is not the zero Policy: %+v", p.Options())
				}
				continue
			}
			checkPolicy(t, in, p)
		}
	})
}

// FuzzNewKey: an accepted key is within the bounds NewKey documents and
// round-trips through String and ParseKey; a rejection is ErrInvalidState
// only and never carries the rejected text.
func FuzzNewKey(f *testing.F) {
	for _, seed := range [][2]string{
		{"jobs", "nightly"}, {"jobs", "a/b/c"}, {"", "x"}, {"x", ""}, {"a/b", "c"}, {"a", "b//c"},
		{"a", "/b"}, {"a", "b/"}, {"\x00", "x"}, {"x", "\xff"}, {"jöbs", "naïve"}, {"a", "\x7f"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, namespace, name string) {
		k, err := leaseapi.NewKey(namespace, name)
		if err != nil {
			wantInvalid(t, "NewKey", err)
			if k != (leaseapi.Key{}) {
				t.Fatal("a rejected key is not the zero Key")
			}
			if len(namespace) > 3 && strings.Contains(err.Error(), namespace) || len(name) > 3 && strings.Contains(err.Error(), name) {
				t.Fatalf("error %q carries the rejected text", err)
			}
			return
		}
		if k.Namespace() != namespace || k.Name() != name || k.IsZero() || k.Check() != nil {
			t.Fatalf("NewKey(%q, %q) = %q/%q", namespace, name, k.Namespace(), k.Name())
		}
		if len(k.String()) > leaseapi.MaxKeyBytes || !leaseapi.CleanText(namespace) || !leaseapi.CleanText(name) {
			t.Fatalf("NewKey(%q, %q) accepted a key out of bounds", namespace, name)
		}
		back, err := leaseapi.ParseKey(k.String())
		if err != nil || back != k {
			t.Fatalf("ParseKey(%q) = %v, %v; want the key back", k.String(), back, err)
		}
	})
}
