package postgres_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
)

// notSent is an error the driver marks safe to retry (nothing was sent).
type notSent struct{ err error }

func (e notSent) Error() string     { return "not sent: " + e.err.Error() }
func (e notSent) Unwrap() error     { return e.err }
func (e notSent) SafeToRetry() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	pg := func(code, sev string) error {
		return &pgconn.PgError{Code: code, Severity: sev, SeverityUnlocalized: sev, Message: "secret-key-name in a message"}
	}
	for _, tc := range []struct {
		name     string
		err      error
		mutation bool
		want     error
	}{
		{"nil", nil, true, nil},
		{"serialization mutation", pg("40001", "ERROR"), true, leaseapi.ErrBackendUnavailable},
		{"deadlock mutation", pg("40P01", "ERROR"), true, leaseapi.ErrBackendUnavailable},
		{"statement timeout mutation", pg("57014", "ERROR"), true, leaseapi.ErrAmbiguousOutcome},
		{"statement timeout read", pg("57014", "ERROR"), false, leaseapi.ErrBackendUnavailable},
		{"undefined table", pg("42P01", "ERROR"), true, leaseapi.ErrBackendUnavailable},
		{"invalid schema", pg("3F000", "ERROR"), false, leaseapi.ErrBackendUnavailable},
		{"permission denied", pg("42501", "ERROR"), true, leaseapi.ErrBackendUnavailable},
		{"undefined column", pg("42703", "ERROR"), true, leaseapi.ErrBackendUnavailable},
		{"unique violation", pg("23505", "ERROR"), true, leaseapi.ErrInvalidState},
		{"out of range", pg("22003", "ERROR"), true, leaseapi.ErrInvalidState},
		{"terminated mutation", pg("57P01", "FATAL"), true, leaseapi.ErrAmbiguousOutcome},
		{"terminated read", pg("57P01", "FATAL"), false, leaseapi.ErrBackendUnavailable},
		{"other error mutation", pg("XX000", "ERROR"), true, leaseapi.ErrBackendUnavailable},
		{"not sent", notSent{io.EOF}, true, leaseapi.ErrBackendUnavailable},
		{"not sent, ctx ended", notSent{context.DeadlineExceeded}, true, leaseapi.ErrTimeout},
		{"ctx canceled after send, mutation", context.Canceled, true, leaseapi.ErrAmbiguousOutcome},
		{"ctx canceled after send, read", context.Canceled, false, leaseapi.ErrCanceled},
		{"deadline after send, read", context.DeadlineExceeded, false, leaseapi.ErrTimeout},
		{"eof mutation", io.ErrUnexpectedEOF, true, leaseapi.ErrAmbiguousOutcome},
		{"eof read", io.ErrUnexpectedEOF, false, leaseapi.ErrBackendUnavailable},
	} {
		got := postgres.Classify(tc.err, tc.mutation)
		if leaseapi.Kind(got) != tc.want {
			t.Errorf("%s: got %v, want kind %v", tc.name, got, tc.want)
		}
		if got != nil && strings.Contains(got.Error(), "secret") {
			t.Errorf("%s: %q leaks backend text", tc.name, got)
		}
		if tc.want == leaseapi.ErrTimeout && !errors.Is(got, context.DeadlineExceeded) {
			t.Errorf("%s: got %v, want it to match context.DeadlineExceeded", tc.name, got)
		}
	}
}

// TestClassifyConfiguration: configuration failures are told apart from
// outages in the message (and name the fix), match ErrBackendUnavailable
// only, whatever their severity and whether or not a mutation was sent,
// and keep the driver's error reachable with errors.As; outages say
// nothing of configuration.
func TestClassifyConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, sev, want string
	}{
		{"28P01", "FATAL", "configuration: authentication failed"},
		{"28000", "FATAL", "configuration: authentication failed"},
		{"3D000", "FATAL", "configuration: database does not exist"},
		{"42501", "ERROR", "configuration: permission denied"},
		{"42P01", "ERROR", "configuration: schema missing: run postgres.Migrate"},
		{"3F000", "ERROR", "configuration: schema missing: run postgres.Migrate"},
		{"42703", "ERROR", "configuration: schema out of date: run postgres.Migrate"},
		{"57P01", "FATAL", ""},
		{"08006", "FATAL", ""},
		{"40001", "ERROR", ""},
		{"53300", "FATAL", ""}, // too many connections: an outage
	} {
		for _, mutation := range []bool{false, true} {
			pgErr := &pgconn.PgError{Code: tc.code, Severity: tc.sev, SeverityUnlocalized: tc.sev, Message: "role secret-role"}
			got := postgres.Classify(pgErr, mutation)
			msg := got.Error()
			if tc.want != "" {
				if !strings.HasSuffix(msg, ": "+tc.want) || leaseapi.Kind(got) != leaseapi.ErrBackendUnavailable {
					t.Errorf("%s (mutation %v): got %q (kind %v), want ErrBackendUnavailable ending %q", tc.code, mutation, msg, leaseapi.Kind(got), tc.want)
				}
			} else if strings.Contains(msg, "configuration") {
				t.Errorf("%s (mutation %v): an outage reads as configuration: %q", tc.code, mutation, msg)
			}
			var back *pgconn.PgError
			if !errors.As(leaseapi.Wrap(got, "op"), &back) || back.Code != tc.code {
				t.Errorf("%s: errors.As does not reach the *pgconn.PgError through Wrap", tc.code)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("%s: %q leaks the server's message", tc.code, msg)
			}
		}
	}
}
