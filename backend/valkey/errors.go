package valkey

import (
	"context"
	"errors"
	"net"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/leaseapi"
)

// classify maps an error from valkey-go to one sentinel kind. It is the
// only place this package interprets driver errors, and it uses typed
// checks only (never the error text, which may carry addresses or server
// messages; of a server error reply only its code, the first word, as
// valkey-go's own IsNoScript and IsMoved do). mutation says whether the
// command may change state. The result's message is fixed text; the
// driver's error is attached with [leaseapi.WithCause], so a caller can
// reach it with errors.As (a *vk.ValkeyError, a *net.OpError), never in
// Error().
//
//   - A server error reply whose code says the client is not allowed
//     (NOAUTH, WRONGPASS: authentication; NOPERM: the ACL user may not run
//     EVALSHA or touch a key the Store needs) is a configuration failure:
//     [leaseapi.ErrBackendUnavailable], with a detail that starts with
//     "configuration:" (retrying does not help; see "Key layout" in the
//     package doc for the ACL a Store needs). A command the script itself
//     may not run is refused without a code on Redis 7.0 (see errorCode).
//   - A server error reply (*vk.ValkeyError: NOSCRIPT already retried,
//     MOVED after redirection, LOADING, BUSY, OOM, READONLY, CLUSTERDOWN, a
//     script error...) means the server answered and our script wrote
//     nothing (every script checks before its first write, and the "#!lua"
//     shebang makes the server refuse OOM/replica/slot violations before the
//     script starts): [leaseapi.ErrBackendUnavailable].
//   - A failure to dial or to find a node for the slot happened before
//     anything was sent: [leaseapi.ErrBackendUnavailable].
//   - vk.ErrClosing: the valkey-go client was closed. valkey-go v1.0.79
//     gives it to a call made after Close (refused unsent) and also to a
//     command already written when Close was called and left unanswered
//     for a second (Close's escape timer), and the two cannot be told
//     apart. So for a read it is [leaseapi.ErrBackendUnavailable], and for
//     a mutation [leaseapi.ErrAmbiguousOutcome] ("client closed: the
//     command may have been sent"): never "not applied" for a write that
//     may have run.
//   - Anything else (a context that ended while the call was in flight, a
//     reset connection, an I/O timeout, the client closing) may have hit
//     after the command was written. For a mutation that is
//     [leaseapi.ErrAmbiguousOutcome]; for a read it is
//     [leaseapi.ErrBackendUnavailable].
//
// A context that was already done before the call is handled by the
// callers (leaseapi.ContextError), not here: valkey-go does not report
// whether a command reached the wire, so once a call started, a context
// error is no proof that nothing was sent.
func classify(err error, mutation bool) error {
	if err == nil {
		return nil
	}
	return leaseapi.WithCause(kindOf(err, mutation), err)
}

// kindOf is classify without the cause.
func kindOf(err error, mutation bool) error {
	var ve *vk.ValkeyError
	if errors.As(err, &ve) {
		switch errorCode(ve) {
		case "NOAUTH", "WRONGPASS":
			return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "configuration: authentication failed (check the client's username and password)")
		case "NOPERM":
			return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "configuration: permission denied (the ACL user lacks a key, channel or command the store needs)")
		}
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "server refused the command")
	}
	if errors.Is(err, vk.ErrClosing) {
		if mutation {
			return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "client closed: the command may have been sent")
		}
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "client closed")
	}
	if beforeSend(err) {
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "no connection to the server")
	}
	if !mutation {
		return leaseapi.NewError("", leaseapi.ErrBackendUnavailable, "read failed")
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "context ended before the reply")
	}
	return leaseapi.NewError("", leaseapi.ErrAmbiguousOutcome, "reply lost")
}

// errorCode is a server error reply's code: its first word ("NOPERM",
// "WRONGPASS", ...). A command that a script may not run is refused by
// Redis 7.0 with a script error that carries no such code ("The user
// executing the script can't run this command..."): that one reads as
// "server refused the command", with the driver's error attached.
func errorCode(ve *vk.ValkeyError) string {
	code, _, _ := strings.Cut(ve.Error(), " ")
	return code
}

// beforeSend reports errors that prove the command was never written: a
// failed dial (the connection did not exist) or no known node for the slot.
func beforeSend(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	return errors.Is(err, vk.ErrNoSlot) || errors.Is(err, vk.ErrNoAddr)
}

// protocolError is returned when a reply does not have the shape the script
// returns (a server that is not Redis 7+/Valkey, or a corrupted key).
func protocolError(op string, mutation bool) error {
	if mutation {
		return leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "unexpected reply")
	}
	return leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, "unexpected reply")
}

// mismatchError is returned when a reply carries another request's id
// (reqid.go): the connection delivered replies out of order. Like a reply
// of the wrong shape it says nothing about whether our script ran.
func mismatchError(op string, mutation bool) error {
	if mutation {
		return leaseapi.NewError(op, leaseapi.ErrAmbiguousOutcome, "reply to another request")
	}
	return leaseapi.NewError(op, leaseapi.ErrBackendUnavailable, "reply to another request")
}
