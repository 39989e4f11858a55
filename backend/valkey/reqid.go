package valkey

import (
	"math/rand/v2"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/leaseapi"
)

// Request ids bind every reply to its request.
//
// Each script call carries a fresh random id as its last argument, and the
// script echoes it in its reply, after the status of its one-line reply
// ("S ID[ PAYLOAD]", see scripts.go). A reply whose id is not the request's belongs to another
// request: the client's connection delivered replies out of order, as
// valkey-go has been seen to do on a pipelined connection that is reset
// while it also carries a subscription. Decoding such a reply as our own
// could hand out a grant that belongs to another key or owner, or report
// "not applied" for a mutation that ran; instead the call fails as
// unreadable (mismatchError: ErrAmbiguousOutcome for a mutation), and
// the server time it carries is not learnt (clock.go).
//
// An error reply (a *ValkeyError) carries no id, so it cannot be checked;
// see classify.

// maxRequestID bounds the ids: Lua numbers are doubles, exact below 2^53,
// and the script echoes the id as a number.
const maxRequestID = 1 << 53

// newRequestID returns a fresh id, never 0, and its argument text.
func newRequestID() (int64, string) {
	id := newRequestIDValue()
	return id, strconv.FormatInt(id, 10)
}

// newRequestIDValue returns a fresh id, never 0 (callText.id appends its
// text).
func newRequestIDValue() int64 { return 1 + rand.Int64N(maxRequestID-1) }

// line decodes a one-line script reply "S ID" or "S ID PAYLOAD" to the
// request whose id text is ida: a failed call is classified, a reply that
// is not a line of that shape is protocolError, and one with another id
// (or none) is mismatchError. It returns the status digit and the payload.
func line(res vk.ValkeyResult, ida, op string, mutation bool) (int, string, error) {
	if err := res.Error(); err != nil {
		return 0, "", leaseapi.Wrap(classify(err, mutation), op)
	}
	text, err := res.ToString()
	if err != nil || text == "" || text[0] < '1' || text[0] > '9' || len(text) > 1 && text[1] != ' ' {
		return 0, "", protocolError(op, mutation)
	}
	if len(text) == 1 {
		return 0, "", mismatchError(op, mutation) // a status without an id
	}
	id, payload, _ := strings.Cut(text[2:], " ")
	if id != ida {
		return 0, "", mismatchError(op, mutation)
	}
	return int(text[0] - '0'), payload, nil
}
