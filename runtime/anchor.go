//go:build !leasemutant

package runtime

import (
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/leaseapi"
)

// This file holds the acquisition rules the safety suite's mutants replace
// (see anchor_mutant.go, built only with the leasemutant tag).

// grantAnchor returns the instant a grant is trusted from: the local clock
// reading taken before the acquiring request was sent, also for a grant
// adopted after its reply was lost (the grant cannot have started before
// that send, and may have started at it).
func grantAnchor(_ clock.Clock, sentAt time.Time, _ bool) time.Time { return sentAt }

// admitToken is the client's token high-water check: a grant at or below
// a token this client already saw for key means the backend lost
// acknowledged writes.
func (c *Client) admitToken(key leaseapi.Key, token leaseapi.Token) bool {
	return c.marks.admit(key, token)
}
