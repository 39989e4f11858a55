package leaseapi_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

func TestCheckHelpers(t *testing.T) {
	live := context.Background()
	canceled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel2 := context.WithDeadline(live, time.Unix(1, 0))
	defer cancel2()

	key := leaseapi.MustKey("ns", "k")
	good := leaseapi.Record{Key: key, Owner: "o", Token: 1}
	const ttl = time.Second
	const op = "op"

	type call func(ctx context.Context) error
	acquire := func(k leaseapi.Key, owner string, ttl time.Duration) call {
		return func(ctx context.Context) error { return leaseapi.CheckAcquire(ctx, op, k, owner, ttl) }
	}
	renew := func(rec leaseapi.Record, ttl time.Duration) call {
		return func(ctx context.Context) error { return leaseapi.CheckRenew(ctx, op, rec, ttl) }
	}
	record := func(rec leaseapi.Record) call {
		return func(ctx context.Context) error { return leaseapi.CheckRecord(ctx, op, rec) }
	}
	keyCheck := func(k leaseapi.Key) call {
		return func(ctx context.Context) error { return leaseapi.CheckKey(ctx, op, k) }
	}
	renewReq := func(rec leaseapi.Record, ttl time.Duration) call {
		return func(context.Context) error {
			return leaseapi.CheckRenewRequest(op, leaseapi.RenewRequest{Record: rec, TTL: ttl})
		}
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		call call
		want string // "" = nil
		kind error
	}{
		{"acquire ok", live, acquire(key, "o", ttl), "", nil},
		{"acquire nil ctx", nil, acquire(key, "o", ttl), "lease: op: invalid state or input: nil context", leaseapi.ErrInvalidState},
		{"acquire canceled", canceled, acquire(key, "o", ttl), "lease: op: canceled", leaseapi.ErrCanceled},
		{"acquire expired", expired, acquire(key, "o", ttl), "lease: op: timed out", leaseapi.ErrTimeout},
		{"acquire ctx before args", canceled, acquire(leaseapi.Key{}, "", 0), "lease: op: canceled", leaseapi.ErrCanceled},
		{"acquire zero key", live, acquire(leaseapi.Key{}, "", 0), "lease: op: invalid state or input: zero key", leaseapi.ErrInvalidState},
		{"acquire bad owner", live, acquire(key, "", 0), "lease: op: invalid state or input: invalid owner id", leaseapi.ErrInvalidState},
		{"acquire bad ttl", live, acquire(key, "o", 0), "lease: op: invalid state or input: ttl out of range", leaseapi.ErrInvalidState},
		{"renew ok", live, renew(good, ttl), "", nil},
		{"renew nil ctx", nil, renew(good, ttl), "lease: op: invalid state or input: nil context", leaseapi.ErrInvalidState},
		{"renew canceled", canceled, renew(leaseapi.Record{}, 0), "lease: op: canceled", leaseapi.ErrCanceled},
		{"renew bad ttl before token", live, renew(leaseapi.Record{Key: key, Owner: "o"}, 0), "lease: op: invalid state or input: ttl out of range", leaseapi.ErrInvalidState},
		{"renew zero token", live, renew(leaseapi.Record{Key: key, Owner: "o"}, ttl), "lease: op: invalid state or input: zero token", leaseapi.ErrInvalidState},
		{"renew request ok", nil, renewReq(good, ttl), "", nil},
		{"renew request zero key", nil, renewReq(leaseapi.Record{}, ttl), "lease: op: invalid state or input: zero key", leaseapi.ErrInvalidState},
		{"renew request bad ttl", nil, renewReq(good, time.Microsecond), "lease: op: invalid state or input: ttl out of range", leaseapi.ErrInvalidState},
		{"renew request bad owner", nil, renewReq(leaseapi.Record{Key: key, Owner: "o\n", Token: 1}, ttl), "lease: op: invalid state or input: invalid owner id", leaseapi.ErrInvalidState},
		{"renew request zero token", nil, renewReq(leaseapi.Record{Key: key, Owner: "o"}, ttl), "lease: op: invalid state or input: zero token", leaseapi.ErrInvalidState},
		{"record ok", live, record(good), "", nil},
		{"record nil ctx", nil, record(good), "lease: op: invalid state or input: nil context", leaseapi.ErrInvalidState},
		{"record expired", expired, record(leaseapi.Record{}), "lease: op: timed out", leaseapi.ErrTimeout},
		{"record bad owner", live, record(leaseapi.Record{Key: key, Token: 1}), "lease: op: invalid state or input: invalid owner id", leaseapi.ErrInvalidState},
		{"record zero token", live, record(leaseapi.Record{Key: key, Owner: "o"}), "lease: op: invalid state or input: zero token", leaseapi.ErrInvalidState},
		{"key ok", live, keyCheck(key), "", nil},
		{"key nil ctx", nil, keyCheck(key), "lease: op: invalid state or input: nil context", leaseapi.ErrInvalidState},
		{"key canceled", canceled, keyCheck(leaseapi.Key{}), "lease: op: canceled", leaseapi.ErrCanceled},
		{"key zero", live, keyCheck(leaseapi.Key{}), "lease: op: invalid state or input: zero key", leaseapi.ErrInvalidState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(tc.ctx)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if got := leaseapi.Kind(err); got != tc.kind {
				t.Fatalf("Kind: got %v, want %v", got, tc.kind)
			}
			switch tc.kind {
			case leaseapi.ErrCanceled:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("got %v, want it to match context.Canceled", err)
				}
			case leaseapi.ErrTimeout:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("got %v, want it to match context.DeadlineExceeded", err)
				}
			}
		})
	}
}

// TestCheckContextMatchesContextError pins CheckContext to the composition
// the backends used before it existed.
func TestCheckContextMatchesContextError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := leaseapi.CheckContext(ctx, "x")
	want := leaseapi.ContextError("x", ctx.Err())
	if got.Error() != want.Error() || leaseapi.Kind(got) != leaseapi.Kind(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if err := leaseapi.CheckContext(context.Background(), "x"); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	//nolint:staticcheck // a nil context is the input under test
	if err := leaseapi.CheckContext(nil, "x"); err == nil || err.Error() != "lease: x: invalid state or input: nil context" {
		t.Fatalf("got %v, want the nil context error", err)
	}
}

func TestCheckRenewBatch(t *testing.T) {
	key := leaseapi.MustKey("ns", "k")
	good := leaseapi.RenewRequest{Record: leaseapi.Record{Key: key, Owner: "o", Token: 1}, TTL: time.Second}
	badTTL := leaseapi.RenewRequest{Record: good.Record}
	zeroToken := leaseapi.RenewRequest{Record: leaseapi.Record{Key: key, Owner: "o"}, TTL: time.Second}
	reqs := []leaseapi.RenewRequest{good, badTTL, good, zeroToken}

	out, valid := leaseapi.CheckRenewBatch(context.Background(), "op", reqs)
	if len(out) != len(reqs) {
		t.Fatalf("len(out): got %d, want %d", len(out), len(reqs))
	}
	if want := []int{0, 2}; !slices.Equal(valid, want) {
		t.Fatalf("valid: got %v, want %v", valid, want)
	}
	for i, want := range []string{"", "lease: op: invalid state or input: ttl out of range", "", "lease: op: invalid state or input: zero token"} {
		got := ""
		if out[i].Err != nil {
			got = out[i].Err.Error()
		}
		if got != want {
			t.Fatalf("element %d: got %q, want %q", i, got, want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, valid = leaseapi.CheckRenewBatch(ctx, "op", reqs)
	if len(valid) != 0 {
		t.Fatalf("valid with a canceled ctx: got %v, want none", valid)
	}
	for i, r := range out {
		if leaseapi.Kind(r.Err) != leaseapi.ErrCanceled {
			t.Fatalf("element %d with a canceled ctx: got %v, want ErrCanceled", i, r.Err)
		}
	}
	if out, valid := leaseapi.CheckRenewBatch(context.Background(), "op", nil); len(out) != 0 || len(valid) != 0 {
		t.Fatalf("empty batch: got %v, %v, want nothing", out, valid)
	}
}
