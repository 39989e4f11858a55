package valkey

// Unit tests of the not-after bound's arithmetic and of the late status's
// classification. They test unexported functions, so they live in the
// package itself (as fuzz_test.go does).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

func TestNotAfter(t *testing.T) {
	const S = int64(1_796_000_000_000_000) // a server time in 2026, µs
	ms := func(n int64) int64 { return n * 1000 }
	for _, tc := range []struct {
		name   string
		obs    *serverClock
		t      int64 // local send instant, µs since origin
		budget time.Duration
		want   int64
	}{
		{"no observation: no bound", nil, 5, time.Second, 0},
		{"fresh observation", &serverClock{server: S, sent: ms(10)}, ms(10), time.Second,
			S + ms(1000) + ms(1)},
		{"the local time since the observation is added", &serverClock{server: S, sent: ms(10)}, ms(510), 200 * time.Millisecond,
			S + ms(500) + ms(200) + ms(1) + 500},
		{"1000 ppm of the observation's age", &serverClock{server: S, sent: 0}, ms(60_000), time.Second,
			S + ms(60_000) + ms(1000) + ms(1) + ms(60)},
		{"an observation from a later request", &serverClock{server: S, sent: ms(20)}, ms(15), time.Second,
			S - ms(5) + ms(1000) + ms(1)},
		{"sub-microsecond budget truncates", &serverClock{server: S, sent: 0}, 0, 1500 * time.Nanosecond,
			S + 1 + ms(1)},
		{"a deadline past: a bound in the past", &serverClock{server: S, sent: 0}, 0, -time.Second,
			S - ms(1000) + ms(1)},
		{"a deadline long past: still a bound", &serverClock{server: ms(1), sent: 0}, 0, -time.Hour, 1},
		{"a far deadline saturates at 2^53", &serverClock{server: S, sent: 0}, 0, time.Duration(1<<63 - 1), maxExact},
		{"a server time past 2^53 saturates", &serverClock{server: maxExact, sent: 0}, 0, time.Second, maxExact},
	} {
		if got := notAfter(tc.obs, tc.t, tc.budget); got != tc.want {
			t.Errorf("%s: got %d, want %d (off by %d µs)", tc.name, got, tc.want, got-tc.want)
		}
	}
}

// TestNotAfterIsAnUpperBound: for a server whose clock runs at the local
// rate with any offset, and any delay between a request's send and its
// script's TIME reading, the bound is never before the server's time at
// the caller's deadline (a prompt request is never refused), and exceeds
// it by at most the observation's delay plus the slack.
func TestNotAfterIsAnUpperBound(t *testing.T) {
	for _, offset := range []int64{3_600_000_000, 1_796_000_000_000_000, 1_796_000_000_000_000 + 123_456} {
		server := func(local int64) int64 { return local + offset } // the server's clock at a local instant
		for _, delay := range []int64{0, 1, 250, 40_000} {
			for _, age := range []int64{0, 1000, 10_000_000} {
				const sent = 1_000_000
				obs := &serverClock{server: server(sent + delay), sent: sent}
				t0 := sent + delay + age
				budget := 750 * time.Millisecond
				got := notAfter(obs, t0, budget)
				atDeadline := server(t0 + budget.Microseconds())
				slack := bootSlack.Microseconds() + (t0-sent)/rateSlack
				if got < atDeadline || got > atDeadline+delay+slack {
					t.Errorf("offset %d, delay %d, age %d: bound %d, want within [%d, %d]",
						offset, delay, age, got, atDeadline, atDeadline+delay+slack)
				}
			}
		}
	}
}

func TestClockEstimateObserve(t *testing.T) {
	c := newClockEstimate()
	if arg, _ := c.bound(context.Background()); arg != "0" {
		t.Fatalf("bound without a deadline: got %q, want 0", arg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if arg, _ := c.bound(ctx); arg != "0" {
		t.Fatalf("bound before any observation: got %q, want 0", arg)
	}
	c.observe(0, 5) // not a server time: ignored
	c.observe(-1, 5)
	if c.latest() != nil {
		t.Fatal("a non-positive server time was kept")
	}
	c.observe(1000, 10)
	c.observe(900, 5) // the reply to an older request: ignored
	if got := *c.latest(); got != (serverClock{1000, 10}) {
		t.Fatalf("after an older request's reply: got %+v, want {1000 10}", got)
	}
	c.observe(950, 10) // the same send instant, a lower reading: tighter
	c.observe(990, 10)
	if got := *c.latest(); got != (serverClock{950, 10}) {
		t.Fatalf("after a tighter reading: got %+v, want {950 10}", got)
	}
	c.observe(5000, 20) // a newer request: replaces, even with a higher offset
	if got := *c.latest(); got != (serverClock{5000, 20}) {
		t.Fatalf("after a newer request's reply: got %+v, want {5000 20}", got)
	}
	arg, sent := c.bound(ctx)
	n, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || n < 5000+time.Hour.Microseconds()-time.Second.Microseconds() || sent < 0 {
		t.Fatalf("bound with an hour left: got %q (sent %d), want about 5000 + 1h", arg, sent)
	}

	// Concurrent observers (run with -race): the newest send instant wins,
	// and a concurrent reader never sees the fields of two observations
	// (each has server = 1_000_000 + sent).
	c = newClockEstimate()
	var wg sync.WaitGroup
	done := make(chan struct{})
	torn := make(chan serverClock, 1)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if got := c.latest(); got != nil && got.server != 1_000_000+got.sent {
					select {
					case torn <- *got:
					default:
					}
				}
			}
		})
	}
	var writers sync.WaitGroup
	for g := range 8 {
		writers.Go(func() {
			for i := range 1000 {
				sent := int64(i*8 + g)
				c.observe(1_000_000+sent, sent)
			}
		})
	}
	writers.Wait()
	close(done)
	wg.Wait()
	select {
	case got := <-torn:
		t.Fatalf("a reader saw a torn observation %+v", got)
	default:
	}
	if got := *c.latest(); got.sent != 7999 || got.server != 1_007_999 {
		t.Fatalf("after concurrent observations: got %+v, want the newest {1007999 7999}", got)
	}
}

// TestLateReplies: {statusLate, now} is a definite "not applied"
// (ErrBackendUnavailable, never ErrAmbiguousOutcome, ErrContended or
// ErrStaleOwner) for every script that carries a bound, with the operation
// name and nothing else of the request in its text; its time is learnt.
func TestLateReplies(t *testing.T) {
	const now = int64(1_796_000_000_000_000)
	const owner = "owner-secret-id"
	key := leaseapi.MustKey("ns", "secret-key")
	rec := leaseapi.Record{Key: key, Owner: owner, Token: 7, AcquiredAt: time.UnixMicro(now - 10), ExpiresAt: time.UnixMicro(now + 10)}

	check := func(what string, err error, op string) {
		t.Helper()
		if leaseapi.Kind(err) != leaseapi.ErrBackendUnavailable || errors.Is(err, leaseapi.ErrAmbiguousOutcome) {
			t.Errorf("%s: got %v, want ErrBackendUnavailable only", what, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "lease: "+op+": ") || !strings.Contains(msg, "not applied") {
			t.Errorf("%s: %q, want the operation %q and \"not applied\"", what, msg, op)
		}
		for _, secret := range []string{owner, "secret-key", strconv.FormatInt(now, 10)} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: %q reveals %q", what, msg, secret)
			}
		}
	}
	nowText := strconv.FormatInt(now, 10)
	_, got, err := acquireResult(statusLate, nowText, key, owner, time.Second, "try acquire")
	check("acquire", err, "try acquire")
	if got != now {
		t.Errorf("acquire late: server time %d, want %d", got, now)
	}
	_, got, err = renewResult(statusLate, nowText, rec, time.Second, "renew")
	check("renew", err, "renew")
	if got != now {
		t.Errorf("renew late: server time %d, want %d", got, now)
	}
	out := make([]leaseapi.RenewResult, 2)
	reqs := []leaseapi.RenewRequest{{Record: rec, TTL: time.Second}, {Record: rec, TTL: time.Second}}
	got = batchResult(statusLate, nowText, nil, []int{0, 1}, reqs, out, "renew batch")
	for i, r := range out {
		check("batch element "+strconv.Itoa(i), r.Err, "renew batch")
	}
	if got != now {
		t.Errorf("batch late: server time %d, want %d", got, now)
	}
	// A grant's acquired time is learnt too; no other reply carries one.
	es := (now+time.Second.Microseconds())/1000 - 1 // the reply's expiry: ms, minus 1
	if _, got, err := acquireResult(statusOK, fmt.Sprintf("7 %d", es), key, owner, time.Second, "try acquire"); err != nil || got != now {
		t.Errorf("acquire ok: got (%d, %v), want (%d, nil)", got, err, now)
	}
	if _, got, err := renewResult(statusOK, strconv.FormatInt(es, 10), rec, time.Second, "renew"); err != nil || got != now {
		t.Errorf("renew ok: got (%d, %v), want (%d, nil)", got, err, now)
	}
	out = make([]leaseapi.RenewResult, 2)
	if got := batchResult(statusOK, fmt.Sprintf("%d 31", es), nil, []int{0, 1}, reqs, out, "renew batch"); got != now || out[0].Err == nil || out[1].Err != nil {
		t.Errorf("batch (stale, ok): got %d, %v, want %d, (stale, ok)", got, out, now)
	}
	// The batch's one expiry is its TIME reading's, renewed or not.
	if got := batchResult(statusOK, fmt.Sprintf("%d 3", es), nil, []int{0}, reqs, out, "renew batch"); got != now {
		t.Errorf("batch (all stale): got %d, want %d", got, now)
	}
	if _, got, _ := acquireResult(statusContended, "", key, owner, time.Second, "try acquire"); got != 0 {
		t.Errorf("acquire contended found the time %d", got)
	}
	if _, got, _ := renewResult(statusStale, "", rec, time.Second, "renew"); got != 0 {
		t.Errorf("renew stale found the time %d", got)
	}

	// The other statuses keep their kinds.
	if _, _, err := acquireResult(statusContended, "", key, owner, time.Second, "try acquire"); leaseapi.Kind(err) != leaseapi.ErrContended {
		t.Errorf("acquire contended: got %v", err)
	}
	if _, _, err := renewResult(statusStale, "", rec, time.Second, "renew"); leaseapi.Kind(err) != leaseapi.ErrStaleOwner {
		t.Errorf("renew stale: got %v", err)
	}
	if _, _, err := acquireResult(statusLate, "", key, owner, time.Second, "try acquire"); leaseapi.Kind(err) != leaseapi.ErrAmbiguousOutcome {
		t.Errorf("acquire with a malformed late reply: got %v, want ErrAmbiguousOutcome (protocol error)", err)
	}
}

// TestClockEstimateAllocs: publishing and reading an observation allocate
// nothing (each acquisition and renewal does both).
func TestClockEstimateAllocs(t *testing.T) {
	c := newClockEstimate()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	sent := int64(0)
	if n := testing.AllocsPerRun(100, func() {
		sent++
		c.observe(1_000_000+sent, sent)
		_, _ = c.boundMicros(ctx)
	}); n != 0 {
		t.Fatalf("observe and boundMicros: %v allocations, want 0", n)
	}
}
