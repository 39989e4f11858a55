package valkey_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// TestClassify feeds classify the errors valkey-go really returns (taken
// from a live server and real sockets where possible) and checks the kind
// for a mutation and for a read, and that no driver text leaks.
func TestClassify(t *testing.T) {
	addr := serverAddr(t)
	c := newClient(t, addr)
	ctx := t.Context()

	serverErr := c.Do(ctx, c.B().Arbitrary("NO-SUCH-COMMAND").Args("secret-arg").Build()).Error()
	if _, ok := vk.IsValkeyErr(serverErr); !ok {
		t.Fatalf("want a server error reply, got %v", serverErr)
	}
	refuser, err := testserver.NewRefuser() // a port nothing can listen on
	if err != nil {
		t.Fatal(err)
	}
	defer refuser.Close()
	refusedAddr := refuser.Addr()
	// valkey-go returns its dialer's error as is (a failed NewClient would
	// leave a delayed reconnect goroutine behind, so dial directly).
	_, dialErr := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", refusedAddr)
	if dialErr == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	closed := newClient(t, addr)
	closed.Close()
	closingErr := closed.Do(ctx, closed.B().Ping().Build()).Error()
	shortCtx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-shortCtx.Done()
	resetErr := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

	for _, tc := range []struct {
		name           string
		err            error
		mutation, read error
	}{
		{"server error reply", serverErr, leaseapi.ErrBackendUnavailable, leaseapi.ErrBackendUnavailable},
		{"dial refused", dialErr, leaseapi.ErrBackendUnavailable, leaseapi.ErrBackendUnavailable},
		{"no slot", vk.ErrNoSlot, leaseapi.ErrBackendUnavailable, leaseapi.ErrBackendUnavailable},
		{"client closing", closingErr, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrBackendUnavailable}, // valkey-go also gives it to a command written just before Close
		{"deadline during the call", context.DeadlineExceeded, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrBackendUnavailable},
		{"canceled during the call", context.Canceled, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrBackendUnavailable},
		{"connection reset", resetErr, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrBackendUnavailable},
		{"connection closed", io.EOF, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrBackendUnavailable},
		{"unexpected EOF", io.ErrUnexpectedEOF, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrBackendUnavailable},
	} {
		for _, mutation := range []bool{true, false} {
			want := tc.read
			if mutation {
				want = tc.mutation
			}
			got := valkey.Classify(tc.err, mutation)
			if leaseapi.Kind(got) != want {
				t.Errorf("%s (mutation %v): got %v, want %v", tc.name, mutation, got, want)
			}
			// A context error during the call is not reported as the
			// caller's cancellation: the outcome, not the ctx, matters.
			if errors.Is(got, leaseapi.ErrCanceled) || errors.Is(got, leaseapi.ErrTimeout) {
				t.Errorf("%s: got %v, want no ctx kind", tc.name, got)
			}
			for _, secret := range []string{"NO-SUCH-COMMAND", "secret-arg", refusedAddr, addr, "reset"} {
				if strings.Contains(got.Error(), secret) {
					t.Errorf("%s: %q reveals %q", tc.name, got, secret)
				}
			}
		}
	}
	if valkey.Classify(nil, true) != nil {
		t.Error("classify(nil) is not nil")
	}
	// The driver's error stays reachable for a caller who asks, through
	// the runtime's re-wrapping too, and only there (never in Error()).
	var ve *vk.ValkeyError
	if got := leaseapi.Wrap(valkey.Classify(serverErr, true), "acquire"); !errors.As(got, &ve) {
		t.Errorf("errors.As(%v, *ValkeyError) is false", got)
	}
	var oe *net.OpError
	if got := leaseapi.Wrap(valkey.Classify(dialErr, true), "acquire"); !errors.As(got, &oe) {
		t.Errorf("errors.As(%v, *net.OpError) is false", got)
	}
	if got := valkey.Classify(context.DeadlineExceeded, true); errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("a context error during the call is attached as the cause: %v", got)
	}
}
