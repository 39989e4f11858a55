//go:build leasemutant

package runtime

import (
	"time"

	"github.com/benbjohnson/clock"

	"github.com/leasekit/lease/internal/mutant"
	"github.com/leasekit/lease/leaseapi"
)

// The mutant builds of anchor.go's rules: each behaves as the original
// unless its mutant is the one LEASE_MUTANT selects.

// grantAnchor under deadline-from-reply anchors every grant at the reply,
// and under adopt-at-resolve-time an adopted grant at the resolving read.
func grantAnchor(clk clock.Clock, sentAt time.Time, resolved bool) time.Time {
	if mutant.On(mutant.DeadlineFromReply) || mutant.On(mutant.AdoptAtResolveTime) && resolved {
		return clk.Now()
	}
	return sentAt
}

// admitToken under no-watermark admits every token.
func (c *Client) admitToken(key leaseapi.Key, token leaseapi.Token) bool {
	return c.marks.admit(key, token) || mutant.On(mutant.NoWatermark)
}
