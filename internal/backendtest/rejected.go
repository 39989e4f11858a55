package backendtest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/leasekit/lease/leaseapi"
)

// sentinels is every kind of leaseapi, for [WantRejected].
var sentinels = []error{
	leaseapi.ErrContended, leaseapi.ErrTimeout, leaseapi.ErrCanceled, leaseapi.ErrLost,
	leaseapi.ErrStaleOwner, leaseapi.ErrBackendUnavailable, leaseapi.ErrInvalidState,
	leaseapi.ErrAmbiguousOutcome, leaseapi.ErrCapacity, leaseapi.ErrFencingRegression,
}

// WantRejected fails t unless err is a rejection of bad input as the
// constructors promise it: it matches leaseapi.ErrInvalidState and no other
// sentinel, and its message carries none of inputs. fixed holds the
// messages of rejections of canonical inputs (what the constructor says
// whatever it was given): an input found in one of them, or shorter than 4
// bytes, proves nothing either way and is not checked ("leas" is in every
// message, whoever rejected it). what names the call.
func WantRejected(t testing.TB, what string, err error, fixed []string, inputs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want ErrInvalidState", what)
	}
	for _, s := range sentinels {
		if errors.Is(err, s) != (s == leaseapi.ErrInvalidState) {
			t.Fatalf("%s: got %v, want an error matching ErrInvalidState and no other sentinel (errors.Is(err, %v) = %v)", what, err, s, errors.Is(err, s))
		}
	}
	if k := leaseapi.Kind(err); k != leaseapi.ErrInvalidState {
		t.Fatalf("%s: got kind %v, want ErrInvalidState", what, k)
	}
	msg := err.Error()
	for _, in := range inputs {
		if len(in) < 4 || !strings.Contains(msg, in) || slices.ContainsFunc(fixed, func(f string) bool { return strings.Contains(f, in) }) {
			continue
		}
		t.Fatalf("%s: message %q carries the rejected input %q", what, msg, in)
	}
}

// Messages returns the messages of errs, for WantRejected's fixed.
func Messages(errs ...error) []string {
	out := make([]string, 0, len(errs))
	for _, err := range errs {
		if err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}
