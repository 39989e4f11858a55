package leaseapi

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// driverErr stands for a driver's error type.
type driverErr struct{ code string }

func (e *driverErr) Error() string { return "driver said: secret-dsn " + e.code }

// TestWithCause: the driver's error is reachable with errors.As, through
// Wrap too, while the message stays redacted and the kind stays the one
// kind; causes that match a sentinel or a context error are not attached.
func TestWithCause(t *testing.T) {
	base := NewError("", ErrBackendUnavailable, "configuration: permission denied")
	err := Wrap(WithCause(base, &driverErr{code: "42501"}), "renew")
	var de *driverErr
	if !errors.As(err, &de) || de.code != "42501" {
		t.Fatalf("errors.As through WithCause and Wrap: got %v", de)
	}
	if got, want := err.Error(), "lease: renew: backend unavailable: configuration: permission denied"; got != want {
		t.Fatalf("message: got %q, want %q", got, want)
	}
	if Kind(err) != ErrBackendUnavailable {
		t.Fatalf("kind: got %v", Kind(err))
	}
	for _, s := range sentinels {
		if s != ErrBackendUnavailable && errors.Is(err, s) {
			t.Fatalf("matches %v too", s)
		}
	}
	for _, cause := range []error{ErrContended, context.DeadlineExceeded, fmt.Errorf("x: %w", context.Canceled)} {
		got := WithCause(base, cause)
		if Kind(got) != ErrBackendUnavailable || errors.Is(got, ErrContended) || errors.Is(got, context.DeadlineExceeded) || errors.Is(got, context.Canceled) {
			t.Fatalf("WithCause(%v): attached a cause that matches another kind: %v", cause, got)
		}
	}
	if got := WithCause(errors.New("foreign"), &driverErr{}); errors.As(got, &de) && de.code == "" {
		t.Fatal("WithCause attached a cause to an error of another package")
	}
	if WithCause(base, nil) != base {
		t.Fatal("WithCause with a nil cause changed the error")
	}
}
