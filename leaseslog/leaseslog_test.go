package leaseslog_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/leaseslog"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for the delivery goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogsStateChangesAndFailures drives a lease through contention, an
// ambiguous renewal, a validation, an unavailable renewal and its expiry,
// and checks each log line's level and attributes, and that no line holds
// the key, the namespace or the owner id.
func TestLogsStateChangesAndFailures(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		var buf syncBuffer
		l := leaseslog.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
			Level: slog.LevelDebug,
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		})))
		store, err := memory.New(memory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f := simtest.NewFaulty(store)
		c, err := runtime.NewClient(f, runtime.ClientOptions{OnStateChange: l.StateChange, Tracer: l})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: time.Second, Retry: time.Second, OperationTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		const ns, name = "tenant-secret", "payroll-secret-key"
		k := leaseapi.MustKey(ns, name)
		h, err := c.TryAcquire(t.Context(), k, p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.TryAcquire(t.Context(), k, p) // contended
		f.Inject(leaseapi.OperationRenew, simtest.LoseReply, simtest.FailBeforeSend)
		_ = h.Renew(t.Context()) // ambiguous: Uncertain
		if err := h.Validate(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = h.Renew(t.Context()) // unavailable: Uncertain
		simtest.Advance(p.TTL()) // the deadline passes
		<-h.Done()
		simtest.Settle()

		// State changes arrive from the client's delivery goroutine, so
		// they interleave with the failures in any order; each kind is in
		// order.
		var changes, failures []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if strings.Contains(line, "lease state changed") {
				changes = append(changes, line)
			} else {
				failures = append(failures, line)
			}
		}
		got := append(changes, failures...)
		want := []string{
			"level=WARN msg=\"lease state changed\" from=active to=uncertain",
			"level=INFO msg=\"lease state changed\" from=uncertain to=active",
			"level=WARN msg=\"lease state changed\" from=active to=uncertain",
			"level=WARN msg=\"lease state changed\" from=uncertain to=expired",
			"level=DEBUG msg=\"lease operation failed\" op=try_acquire outcome=contended",
			"level=WARN msg=\"lease operation failed\" op=renew outcome=ambiguous",
			"level=WARN msg=\"lease operation failed\" op=renew outcome=unavailable",
		}
		if len(got) != len(want) {
			t.Fatalf("log: got %d lines, want %d:\n%s", len(got), len(want), buf.String())
		}
		for i, line := range got {
			if !strings.HasPrefix(line, want[i]) {
				t.Errorf("line %d: got %q, want it to start with %q", i, line, want[i])
			}
			if !strings.Contains(line, "key_hash=") {
				t.Errorf("line %d has no key hash: %q", i, line)
			}
			for _, secret := range []string{ns, name, h.Owner()} {
				if strings.Contains(strings.ToLower(line), strings.ToLower(secret)) {
					t.Errorf("line %d reveals %q: %q", i, secret, line)
				}
			}
		}
		for _, cause := range []string{"cause=ambiguous", "cause=unavailable", "cause=lost"} {
			if !strings.Contains(buf.String(), cause) {
				t.Errorf("log lacks %q:\n%s", cause, buf.String())
			}
		}
	})
}

func TestLevels(t *testing.T) {
	var buf syncBuffer
	l := leaseslog.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, tc := range []struct {
		to   leaseapi.State
		want string
	}{
		{leaseapi.StateLost, "level=ERROR"},
		{leaseapi.StateExpired, "level=WARN"},
		{leaseapi.StateUncertain, "level=WARN"},
		{leaseapi.StateActive, "level=INFO"},
		{leaseapi.StateReleased, "level=DEBUG"},
	} {
		l.StateChange(runtime.StateChange{From: leaseapi.StateActive, To: tc.to})
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, tc.want) {
			t.Errorf("to %v: got %q, want %s", tc.to, last, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{leaseapi.ErrStaleOwner, "level=ERROR"},
		{leaseapi.ErrFencingRegression, "level=ERROR"},
		{leaseapi.ErrLost, "level=ERROR"},
		{leaseapi.ErrAmbiguousOutcome, "level=WARN"},
		{leaseapi.ErrBackendUnavailable, "level=WARN"},
		{leaseapi.ErrCapacity, "level=WARN"},
		{leaseapi.ErrCanceled, "level=INFO"},
		{leaseapi.ErrContended, "level=DEBUG"},
	} {
		l.TraceEnd(context.Background(), runtime.TraceEnd{Op: runtime.TraceRenew, Err: leaseapi.NewError("renew", tc.err, "")})
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, tc.want) {
			t.Errorf("%v: got %q, want %s", tc.err, last, tc.want)
		}
	}
	before := buf.String()
	l.TraceEnd(context.Background(), runtime.TraceEnd{Op: runtime.TraceRenew})
	if buf.String() != before {
		t.Error("a successful operation was logged")
	}
}
